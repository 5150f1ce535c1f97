"""Device choice and autocast, with the hardware faked so each branch runs on any machine."""

import pytest
import torch

from transformer_steps import autocast_context, pick_device


@pytest.mark.parametrize("cuda, mps, expected", [(True, True, "cuda"), (True, False, "cuda"),
                                                 (False, True, "mps"), (False, False, "cpu")])
def test_pick_device_prefers_cuda_then_mps_then_cpu(monkeypatch, cuda, mps, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert pick_device() == torch.device(expected)


@pytest.mark.filterwarnings("ignore:CUDA is not available")  # the cuda context is only built here, never entered
def test_autocast_is_bf16_on_cuda_and_a_no_op_elsewhere():
    assert isinstance(autocast_context("cuda"), torch.autocast)
    assert autocast_context("cuda").fast_dtype == torch.bfloat16
    with autocast_context("cpu"):  # a no-op off CUDA: matmuls stay float32
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
