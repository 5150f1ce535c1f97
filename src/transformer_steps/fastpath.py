"""The one speed trick that changes how a model is stored, opted into by name: `for_cpu_decode(model)`."""

from __future__ import annotations

import torch
from torch import nn


def for_cpu_decode(model: nn.Module) -> nn.Module:
    """Store every nn.Linear weight W (out, in) with its longer side contiguous, in place, and return model.

    A decode step multiplies one vector by every weight matrix, and a CPU's BLAS streams a matrix faster along
    long contiguous runs (`make bench` part (e) measures the gain). Where out > in, W is kept column-major (the
    contiguous transpose of a row-major (in, out) matrix); F.linear takes either layout, and the outputs agree
    to float32 round-off. Same Parameter objects, same values; a head tied to the embedding takes it along.

    Caveats, since W is no longer contiguous: `W.view(-1)` and safetensors' save_file refuse it (call
    `.contiguous()` on the state dict's tensors first), an in-place random fill such as `nn.init.normal_` gives
    other numbers for the same seed, and `load_state_dict(..., assign=True)` puts back row-major tensors.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"for_cpu_decode needs an nn.Module, got {type(model).__name__}")
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                w = module.weight
                out_features, in_features = w.shape
                w.set_(w.t().contiguous().t() if out_features > in_features else w.contiguous())
    return model
