"""LayerNorm and RMSNorm from scratch. Both compute in float32 (float64 for a float64 model) and cast
back, as HF Llama does: a bf16 mean of squares loses the digits the normalisation depends on."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .precision import upcast


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance)."""
    x32 = upcast(x)
    mean = x32.mean(-1, keepdim=True)
    var = (x32 - mean).pow(2).mean(-1, keepdim=True)
    y = ((x32 - mean) * torch.rsqrt(var + eps)).to(x.dtype) * weight
    return y if bias is None else y + bias


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight: LayerNorm without centring or bias."""
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
        if x.dtype == torch.float32:  # the same numbers in one fused op (float32 round-off)
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        return layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if x.dtype != torch.float32:
            return rms_norm(x, self.weight, self.eps)
        if x.is_cuda:  # one fused kernel
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # on CPU F.rms_norm is several ops as well and was slower in a decode step (bench (b)): the formula
        # of rms_norm without its two casts, which are no-ops here
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def make_norm(cfg) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.norm_eps)
    return LayerNorm(cfg.d_model, cfg.norm_eps, bias=cfg.bias)
