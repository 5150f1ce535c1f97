"""Scaled dot-product attention: the formula step by step, two kernels with one signature, and the module."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .positions import apply_rope
from .precision import upcast


def causal_mask(t_q: int, t_k: int, device=None) -> torch.Tensor:
    """Boolean (t_q, t_k) mask, True where query i may attend to key j.

    The queries are the *last* t_q positions of the t_k keys (query i sits at position t_k - t_q + i), as for
    a decode step or a chunk of a prompt.
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
    # the softmax in float32, as HF does
    weights = torch.softmax(upcast(scores), dim=-1).to(q.dtype)
    return weights @ v, weights


# The two kernels take the same arguments and return (output, weights or None), as HF's attention functions do:
# q (B, nh, T, hs), k and v (B, nkv, T_k, hs) with nkv dividing nh, mask (T, T_k) bool or None, or
# (B, 1, T, T_k) for sequences at their own positions.


def reference_attention(q, k, v, mask):
    """The formula above: each key/value head repeated for its group of query heads, then `attention`."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return attention(q, k, v, mask)


def sdpa_attention(q, k, v, mask):
    """PyTorch's fused kernel: the same numbers to float32 round-off, without materialising the weights."""
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])
    return y, None


ATTENTION = {"reference": reference_attention, "sdpa": sdpa_attention}


class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) self-attention with an optional KV cache."""

    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.causal = cfg.causal
        self.attend = ATTENTION[cfg.attn_impl]
        d = cfg.d_model
        # W_Q, W_K, W_V side by side in one matrix (as GPT-2's c_attn): one matmul instead of three
        self.qkv = nn.Linear(d, (self.n_heads + 2 * self.n_kv_heads) * self.head_dim, bias=cfg.bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, mask=None, rope=None, cache=None, input_pos=None, need_weights: bool = False):
        """x (B, T, C) -> (B, T, C), or (output, weights) with need_weights=True (the reference kernel).

        mask: (T, T_k) bool, True = attend; None means causal over x's own T tokens (or no mask at all for
        cfg.causal=False). rope: the (cos, sin) tables of x's positions, each (T, hs). cache: a KVCache, into
        which this call writes its keys and values at input_pos (T,); the queries then attend to the whole
        cache, and mask must hide the positions not yet written. Per-sequence positions input_pos (B, T) take
        a (B, 1, T, T_k) mask and (B, 1, T, hs) tables, and the cache gives each sequence its own keys.
        """
        B, T, _ = x.shape
        nh, nkv, hs = self.n_heads, self.n_kv_heads, self.head_dim
        qkv = self.qkv(x).view(B, T, nh + 2 * nkv, hs).transpose(1, 2)  # (B, nh + 2 nkv, T, hs)
        qk, v = qkv.split((nh + nkv, nkv), dim=1)
        if rope is not None:
            # q and k turn by the same angles: rotate all their heads in one call
            qk = apply_rope(qk, *rope)
        q, k = qk.split((nh, nkv), dim=1)
        if cache is not None:
            if mask is None:
                raise ValueError("with a cache, pass the mask of the queries' positions (TransformerLM does)")
            # (B, nkv, max_len, hs): every position the cache holds
            k, v = cache.update(input_pos, k, v)
        elif mask is None and self.causal:
            mask = causal_mask(T, T, x.device)
        attend = reference_attention if need_weights else self.attend
        y, weights = attend(q, k, v, mask)  # (B, nh, T, hs)
        y = self.o_proj(y.transpose(1, 2).reshape(B, T, nh * hs))  # (B, T, C)
        y = self.resid_dropout(y)
        return (y, weights) if need_weights else y
