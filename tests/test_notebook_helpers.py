"""The chapters' helpers: seeding, fixed-decimal printing (no '-0.0000') and exercise checking."""

import random

import numpy as np
import pytest
import torch

from transformer_steps.course.notebook import check, fmt, seed_everything, show


def test_seed_everything_seeds_every_library_and_returns_a_cpu_generator():
    gen = seed_everything(3)
    a = (random.random(), np.random.rand(), torch.rand(2), torch.rand(2, generator=gen))
    gen = seed_everything(3)
    b = (random.random(), np.random.rand(), torch.rand(2), torch.rand(2, generator=gen))
    assert a[:2] == b[:2] and torch.equal(a[2], b[2]) and torch.equal(a[3], b[3])
    assert gen.device == torch.device("cpu")
    assert torch.equal(torch.rand(2, generator=seed_everything(3)), torch.rand(2, generator=torch.Generator().manual_seed(3)))


def test_fmt_scalars_vectors_matrices():
    assert fmt(1.0) == "1.0000"
    assert fmt(torch.tensor(3.14159), decimals=2) == "3.14"
    assert fmt(np.float32(0.5)) == "0.5000"
    assert fmt(torch.tensor([1.0, -2.5])) == "[ 1.0000  -2.5000]"
    assert fmt([[1, 2], [3, 4]], decimals=1) == "[[1.0  2.0]\n [3.0  4.0]]"
    assert fmt(torch.tensor([0.123456], dtype=torch.bfloat16), decimals=2) == "[0.12]"
    assert fmt(torch.ones(2, requires_grad=True)) == "[1.0000  1.0000]"


def test_fmt_never_prints_negative_zero():
    assert fmt(-0.0) == "0.0000"
    assert fmt(torch.tensor(-0.00001)) == "0.0000"
    text = fmt(torch.tensor([[-0.00004, 1.0], [2.0, -1e-9]]))
    assert "-0.0000" not in text and text.count("0.0000") == 2


def test_show_prints_name_and_value(capsys):
    show("x", torch.tensor([1.0, -0.00004]))
    show("loss", 2.5)
    show(torch.tensor(3.14159), decimals=2)
    show("m", torch.eye(2))
    assert capsys.readouterr().out == ("x = [1.0000  0.0000]\n"
                                       "loss = 2.5000\n"
                                       "3.14\n"
                                       "m =\n[[1.0000  0.0000]\n [0.0000  1.0000]]\n")


@pytest.mark.parametrize(("answer", "expected", "kwargs", "verdict", "printed"), [
    (None, 1.0, {}, False, "Not attempted yet: set `answer` and run this cell again."),
    (None, 1.0, {"name": "scores"}, False, "Not attempted yet: set `scores` and run this cell again."),
    (1.0004, 1.0, {}, True, "Correct!"),
    (1.01, 1.0, {}, False, "Not quite: largest difference 0.0100 (expected 1.0000, got 1.0100; tolerance 0.001)."),
    (1.01, 1.0, {"atol": 0.1}, True, "Correct!"),
    (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]), {}, False,
     "Not quite: largest difference 0.5000 at index (1,) (expected 2.5000, got 2.0000; tolerance 0.001)."),
    ([[1.0, 2.0], [3.0, 4.0]], torch.tensor([[1.0, 2.0], [3.0, 5.0]]), {}, False,
     "Not quite: largest difference 1.0000 at index (1, 1) (expected 5.0000, got 4.0000; tolerance 0.001)."),
    ([1.0, 2.0], torch.tensor([[1.0, 2.0]]), {}, False, "Not quite: expected shape (1, 2), got (2,)."),
    (np.array([0.25, 0.75]), [0.25, 0.75], {}, True, "Correct!"),
    ("abc", 1.0, {"name": "p"}, False, "Not quite: `p` should be numbers, got str."),
    (3, 3, {}, True, "Correct!"),
    (3, 4, {}, False, "Not quite: expected 4, got 3."),
    (3.0004, 3, {}, True, "Correct!"),  # a float answer to an int question is compared numerically
    ("causal", "causal", {}, True, "Correct!"),
    ("encoder", "causal", {}, False, "Not quite: expected 'causal', got 'encoder'."),
    (False, True, {}, False, "Not quite: expected True, got False."),
])
def test_check_says_right_wrong_and_why(capsys, answer, expected, kwargs, verdict, printed):
    assert check(answer, expected, **kwargs) is verdict
    assert capsys.readouterr().out == printed + "\n"


def test_as_text_writes_a_flat_list_with_fixed_decimals():
    from transformer_steps.course.notebook import as_text

    assert as_text(torch.tensor([[1.23456, -0.00001], [2.0, -3.5]]), 2) == "[1.23, 0.00, 2.00, -3.50]"
    assert as_text([1, 2], 0) == "[1, 2]"
