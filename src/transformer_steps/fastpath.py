"""The package's speed tricks, in one place. Each computes what the formula it replaces computes (bit for bit,
or to float32 round-off; tests check both), and each is here because a benchmark measured a gain. A decode step
on a CPU is bound by the number of torch calls (about 200 per token for the tiny Llama of `make bench` (b)),
so the tricks remove calls. The modules use them when cfg.attn_impl is "sdpa" (the default); "reference"
runs the formulas as the chapters write them."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rope_sign(head_dim: int) -> torch.Tensor:
    """(-1, ..., -1, +1, ..., +1): rotate_half(x) == x.roll(head_dim // 2, -1) * rope_sign(head_dim), bit for bit."""
    return torch.cat((-torch.ones(head_dim // 2), torch.ones(head_dim // 2)))


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin * rope_sign(head_dim): the table apply_rope_rolled reads (the model keeps one, made once)."""
    return sin * rope_sign(sin.shape[-1]).to(sin.dtype)


def apply_rope_rolled(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """apply_rope(x, cos, sin) in 4 ops instead of 8, bit for bit: signed_sin = sin * rope_sign(hs) folds
    rotate_half's sign into the table (computed once per model), and a roll swaps the halves."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


def rope_q_and_k(qk: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """q and k rotated in one apply_rope_rolled over their stacked heads (B, nh + nkv, T, hs): 4 ops per layer
    instead of 16 for apply_rope on each. Measured with the norms below: bench (b) 1.51-1.70x -> 2.44-2.81x
    predicted from per-token CPU time (commit ade8b78, with inference_mode in generate)."""
    if cos.dtype != qk.dtype:  # rotate in the projections' dtype (bf16 under autocast); cast only if needed
        cos, signed_sin = cos.to(qk.dtype), signed_sin.to(qk.dtype)
    return apply_rope_rolled(qk, cos, signed_sin)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """norms.layer_norm as F.layer_norm: one fused op instead of nine, the same numbers to float32 round-off.
    For float32 only: the from-scratch version upcasts bf16 first, the fused op does not."""
    return F.layer_norm(x, weight.shape, weight, bias, eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """norms.rms_norm as F.rms_norm, for float32 on CUDA: one fused kernel instead of five (a decode step there
    is bound by kernel launches). Not measured yet: no GPU has been lent to this project. On a CPU F.rms_norm
    is several ops as well and was slower in the decode loop (bench (b)), so the modules use it on CUDA only."""
    return F.rms_norm(x, weight.shape, weight, eps)
