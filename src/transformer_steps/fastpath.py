"""The opt-in speed tricks for one-token decoding on a CPU, by name: `for_cpu_decode(model)`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .norms import LayerNorm, RMSNorm


class BuiltinLayerNorm(LayerNorm):
    """LayerNorm by torch's F.layer_norm (one kernel on a CPU): the formula of norms.layer_norm, other round-off."""

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class BuiltinRMSNorm(RMSNorm):
    """RMSNorm by torch's F.rms_norm: the formula of norms.rms_norm, with other round-off. On a CPU in torch 2.13
    it is composite (aten::_fused_rms_norm runs pow, mean, add_, rsqrt, mul, mul): one call, not one kernel."""

    def forward(self, x):
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


BUILTIN = {LayerNorm: BuiltinLayerNorm, RMSNorm: BuiltinRMSNorm}


def for_cpu_decode(model: nn.Module) -> nn.Module:
    """Store every nn.Linear weight W (out, in) with its longer side contiguous, and compute every norm with
    torch's built-in F.layer_norm / F.rms_norm; in place, and return model.

    A decode step multiplies one vector by every weight matrix, and a CPU's BLAS streams a matrix faster along
    long contiguous runs: where out > in, W is kept column-major (the contiguous transpose of a row-major
    (in, out) matrix), which F.linear takes as it is. At one token per step, a norm written as a formula is a
    handful of tiny ops, each dispatched from Python, and their overhead adds up. On a CPU in torch 2.13
    F.layer_norm is one fused kernel, while F.rms_norm is composite (aten::_fused_rms_norm runs pow, mean, add_,
    rsqrt, mul, mul): it saves the Python-level dispatch, not kernels (`make bench` part (e) measures both). The parameters and state dict keys stay the same; outputs agree to float32
    round-off, not bit for bit. A head tied to the embedding takes the layout along.

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
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) in BUILTIN:
                builtin = BUILTIN[type(child)].__new__(BUILTIN[type(child)])
                builtin.__dict__ = child.__dict__  # the same Parameters, eps and hooks
                setattr(parent, name, builtin)
    return model
