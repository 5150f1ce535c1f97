"""The dtype the numerically delicate steps (norms, softmax, the loss) compute in."""

from __future__ import annotations

import contextlib

import torch


def upcast(x: torch.Tensor) -> torch.Tensor:
    """x in float32, or float64 if it already is: a bf16 mean of squares or softmax loses the digits that
    matter, and a float64 model (the chapters' tiny training runs) must not drop back to float32."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()  # no call at all when nothing changes


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """Modules built inside the block create their parameters in `dtype`, initial values included:
    `with default_dtype(torch.float64): model = TransformerLM(cfg)`."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (torch.float32 or torch.float64), got {dtype!r}")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
