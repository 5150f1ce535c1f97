"""The shipped corpus, its split and batching."""

import pytest
import torch

from transformer_steps.data import (
    get_batch,
    load_char_dataset,
    load_corpus,
    train_val_split,
)


def test_corpus_is_clean_play_text():
    text = load_corpus()
    assert 1_000_000 < len(text) < 1_300_000
    assert text.startswith("BERNARDO:\nWho's there?\n")
    for markup in "*_#[]\\":
        assert markup not in text, f"markdown left in the corpus: {markup!r}"
    assert "\nHAMLET:\n" in text and "\nJULIET:\n" in text


def test_train_val_split():
    train, val = train_val_split(list(range(100)), val_fraction=0.1)
    assert train.tolist() == list(range(90)) and val.tolist() == list(range(90, 100))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        train_val_split(list(range(10)), val_fraction=1.0)
    with pytest.raises(ValueError, match="empty"):
        train_val_split([1, 2, 3], val_fraction=0.01)


def test_char_dataset_covers_the_corpus():
    tok, train, val = load_char_dataset()
    assert tok.vocab_size == len(set(load_corpus()))
    assert len(train) + len(val) == len(load_corpus())
    assert abs(len(val) / (len(train) + len(val)) - 0.1) < 1e-3


def test_get_batch_shapes_and_shift():
    data = torch.arange(1000)
    g = torch.Generator().manual_seed(0)
    x, y = get_batch(data, batch_size=4, block_size=16, generator=g)
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    torch.testing.assert_close(y[:, :-1], x[:, 1:])
    torch.testing.assert_close(y, x + 1)  # arange data: the target is the next id
    # Same seed, same batch.
    x2, _ = get_batch(data, 4, 16, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(x, x2)


def test_get_batch_reaches_the_last_window():
    data = torch.arange(10)
    g = torch.Generator().manual_seed(0)
    x, y = get_batch(data, batch_size=200, block_size=9, generator=g)
    assert (y[:, -1] == 9).all() and (x[:, 0] == 0).all()


def test_get_batch_errors():
    data = torch.arange(10)
    with pytest.raises(ValueError, match="block_size"):
        get_batch(data, 2, 10)
    with pytest.raises(ValueError, match="batch_size"):
        get_batch(data, 0, 4)
    with pytest.raises(ValueError, match="1-D"):
        get_batch(data.view(2, 5), 2, 2)
