"""Scaled dot-product attention: a readable reference that returns its weights, and the multi-head module."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import fastpath
from .positions import apply_rope
from .precision import upcast


def causal_mask(t_q: int, t_k: int, device=None) -> torch.Tensor:
    """Boolean (t_q, t_k) mask, True where query i may attend to key j.

    The queries are the *last* t_q positions of the t_k keys (query i sits at position t_k - t_q + i),
    which is what decode steps and chunked prefill need. SDPA's is_causal=True aligns them top-left
    instead, which is only right when t_q == t_k.
    """
    if t_q > t_k:
        raise ValueError(f"more queries ({t_q}) than keys ({t_k}): every query needs itself among the keys")
    q_pos = torch.arange(t_k - t_q, t_k, device=device)[:, None]
    k_pos = torch.arange(t_k, device=device)[None, :]
    return k_pos <= q_pos


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              scale: float | None = None):
    """softmax(q k^T * scale + mask) v, step by step. Returns (output, weights).

    q: (..., T_q, d_k), k: (..., T_k, d_k), v: (..., T_k, d_v); mask: bool, True = attend,
    broadcastable to (..., T_q, T_k). scale defaults to 1 / sqrt(d_k).
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same last dimension (d_k), got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v need the same length T_k, got {k.shape[-2]} and {v.shape[-2]}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got {mask.dtype}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(upcast(scores), dim=-1).to(q.dtype)  # float32 softmax, as HF does
    return weights @ v, weights


class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention with an optional KV cache."""

    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.impl, self.causal = cfg.attn_impl, cfg.causal
        d = cfg.d_model
        # W_Q, W_K, W_V side by side in one matrix (as GPT-2's c_attn): one matmul instead of three
        self.qkv = nn.Linear(d, (self.n_heads + 2 * self.n_kv_heads) * self.head_dim, bias=cfg.bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def project(self, x, rope=None):
        """q, k, v of x (B, T, C): (B, nh, T, hs), (B, nkv, T, hs), (B, nkv, T, hs), q and k rotated by
        rope = (cos, sin, signed_sin) tables (T, hs) when given."""
        B, T, _ = x.shape
        nh, nkv = self.n_heads, self.n_kv_heads
        qkv = self.qkv(x).view(B, T, nh + 2 * nkv, self.head_dim).transpose(1, 2)  # (B, nh + 2 nkv, T, hs)
        if rope is None:
            return qkv.split((nh, nkv, nkv), dim=1)
        if self.impl == "reference":  # the formula: x * cos + rotate_half(x) * sin, on q and on k
            q, k, v = qkv.split((nh, nkv, nkv), dim=1)
            return apply_rope(q, rope[0], rope[1]), apply_rope(k, rope[0], rope[1]), v
        qk, v = qkv.split((nh + nkv, nkv), dim=1)  # the same numbers, both rotated at once
        q, k = fastpath.rope_q_and_k(qk, rope[0], rope[2]).split((nh, nkv), dim=1)
        return q, k, v

    def forward(self, x, *, start_pos: int = 0, cache=None, rope=None, need_weights: bool = False):
        """x (B, T, C) at positions start_pos .. start_pos + T - 1; rope = (cos, sin, signed_sin) tables (T, hs)."""
        B, T, _ = x.shape
        q, k, v = self.project(x, rope)
        if cache is not None:
            k, v = cache.update(start_pos, k, v)  # (B, nkv, start_pos + T, hs)
        t_k = k.shape[2]
        weights = None
        if need_weights or self.impl == "reference":
            groups = self.n_heads // self.n_kv_heads  # each kv head serves `groups` query heads
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            y, weights = attention(q, k, v, causal_mask(T, t_k, x.device) if self.causal else None)
        else:
            gqa = self.n_kv_heads != self.n_heads
            if not self.causal:
                y = F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
            elif T == t_k:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            elif T == 1:  # one new token at the end sees every cached key: no mask needed
                y = F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T, t_k, x.device),
                                                   enable_gqa=gqa)
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, C)
        y = self.o_proj(y)
        if self.training:  # dropout is the identity in eval: skip the call (a decode step is op-bound)
            y = self.resid_dropout(y)
        return (y, weights) if need_weights else y
