"""LayerNorm and RMSNorm: each one formula, a pure function, and a module that holds its weights.

Both compute in float32 (float64 for a float64 model) and cast back, as HF Llama does. For LayerNorm this
matters: in bf16 the mean is rounded before the subtraction, and the whole output shifts with it. For RMSNorm
it changes little in PyTorch, which already accumulates bf16 sums in float32 and rounds only the result; it
guards against float16 overflow of x**2 and against kernels that accumulate in low precision."""

from __future__ import annotations

import torch
from torch import nn

from .precision import upcast


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""
    x32 = upcast(x)
    centred = x32 - x32.mean(-1, keepdim=True)
    var = centred.pow(2).mean(-1, keepdim=True)
    y = (centred * torch.rsqrt(var + eps)).to(x.dtype) * weight
    return y if bias is None else y + bias


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight: LayerNorm without the mean, the centring and the bias."""
    x32 = upcast(x)
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def make_norm(cfg) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.norm_eps)
    return LayerNorm(cfg.d_model, cfg.norm_eps, bias=cfg.bias)
