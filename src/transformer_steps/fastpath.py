"""The package's speed tricks, in one place. Each computes what the formula it replaces computes (bit for bit,
or to float32 round-off; tests check both), and each but rms_norm (CUDA only, not yet measured) is here because
a benchmark measured a gain on a CPU. A decode step on a CPU is bound by the number of torch calls for a tiny
model (about 200 per token for the tiny Llama of `make bench` (b)), so most tricks remove calls; for a model
whose weights outgrow the CPU's caches it is bound by streaming the weights from memory, so long_rows_ lays
them out to stream faster. The modules use them when cfg.attn_impl is "sdpa" (the default); "reference" runs
the formulas as the chapters write them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


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
    instead of 16 for apply_rope on each. Measured with the norms below (and inference_mode in generate):
    bench (b), transformers' time over ours, 1.51-1.70x -> 2.44-2.81x in per-token CPU time."""
    if cos.dtype != qk.dtype:  # rotate in the projections' dtype (bf16 under autocast); cast only if needed
        cos, signed_sin = cos.to(qk.dtype), signed_sin.to(qk.dtype)
    return apply_rope_rolled(qk, cos, signed_sin)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """norms.layer_norm as F.layer_norm: one fused op instead of nine, the same numbers to float32 round-off.
    For float32 only: the from-scratch version upcasts bf16 first, the fused op does not."""
    return F.layer_norm(x, weight.shape, weight, bias, eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """norms.rms_norm as F.rms_norm, for float32 on CUDA: one fused kernel instead of five (a decode step there
    is bound by kernel launches). Not measured yet: no GPU has been available to the course. On a CPU F.rms_norm
    is several ops as well and was slower in the decode loop (bench (b)), so the modules use it on CUDA only."""
    return F.rms_norm(x, weight.shape, weight, eps)


def long_rows_(model: nn.Module) -> None:
    """Store every nn.Linear weight W (out, in) of model with its longer side contiguous, in place: column-major
    (W's columns, runs of `out` floats, contiguous) where out > in, row-major (W's rows, runs of `in` floats)
    where out <= in. The same matrix and values; F.linear accepts either layout, and its outputs agree to
    float32 round-off (a one-token product sums in another order: ~1e-6 on the logits).

    Why: a decode step multiplies one vector by every weight matrix, streaming each from memory, and MKL
    streams a matrix faster the longer its contiguous runs. Measured on the course's CPU, 1 thread, weights
    not in cache: runs of 384 floats ~10 GB/s, 1152-1536 floats 14-18 GB/s, 4096-4608 floats 21-24 GB/s.
    `make bench` (e) (`--threads 1`), the 12.6M model (49 MB of weights): 6.1-6.4 -> 3.8-4.2 ms per token,
    42-45% -> 62-65% of the weight-streaming bound (all row-major -> longer side contiguous; all
    column-major gave 49-52%). On CUDA the layout is not measured yet.
    A head tied to the token embedding shares its storage, so the embedding table turns column-major too and
    a lookup reads each token's row with a stride. Training, 1 thread, against all row-major: the same speed
    for the (e) model (a 4096-token vocabulary), 7% slower per step with a 50257-token vocabulary (2 layers of
    width 256, where the embedding is most of the model); a 127-token prefill of the latter was 1.4x faster.

    One thing a user may notice: an in-place random fill such as nn.init.normal_(w, generator=g) depends on
    the layout, so on a column-major w the same seed gives other numbers than on a row-major one. To get a
    row-major model's values, draw into a fresh tensor and copy: w.copy_(torch.empty(w.shape).normal_(0.0,
    std, generator=g))."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                w = module.weight
                out_features, in_features = w.shape
                w.set_(w.t().contiguous().t() if out_features > in_features else w.contiguous())
