"""Position information: sinusoidal vectors added to embeddings, and RoPE rotations of q and k.

RoPE pairs dimensions in one of two conventions, equal up to a fixed permutation of dimensions:
- half-split (GPT-NeoX, HF Llama): dimension j rotates with j + head_dim/2 by angle theta_j;
- interleaved (the RoFormer paper, GPT-J): dimension 2j rotates with 2j + 1 by angle theta_j.
The package uses half-split, so Llama checkpoints load without permuting weights.
"""

from __future__ import annotations

import torch


def sinusoidal_encoding(n_pos: int, dim: int, base: float = 10000.0, dtype=torch.float32) -> torch.Tensor:
    """PE[p, 2i] = sin(p / base^(2i/dim)), PE[p, 2i+1] = cos(same angle). Shape (n_pos, dim)."""
    if dim % 2:
        raise ValueError(f"dim must be even (sin/cos pairs), got {dim}")
    pos = torch.arange(n_pos, dtype=dtype)[:, None]
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=dtype) / dim)
    angle = pos * inv_freq  # (n_pos, dim/2)
    pe = torch.empty(n_pos, dim, dtype=dtype)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def rope_inv_freq(head_dim: int, base: float = 10000.0, dtype=torch.float32) -> torch.Tensor:
    """theta_j = base^(-2j/head_dim), j = 0 .. head_dim/2 - 1 (computed as HF Llama does, in float32)."""
    if head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {head_dim}")
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(dtype) / head_dim))


def rope_cos_sin(positions: torch.Tensor, head_dim: int, base: float = 10000.0, dtype=torch.float32):
    """cos and sin of position * theta, each (T, head_dim) in the half-split layout [theta, theta].

    float32 tables are HF Llama's; a float64 model gets float64 tables (float32 sin and cos differ in the
    last bit between CPU kernels, and a training run would amplify that)."""
    freqs = positions.to(dtype)[:, None] * rope_inv_freq(head_dim, base, dtype).to(positions.device)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (j, j + d_h/2) pair of x (..., T, d_h) by its position's angle (half-split).

    cos and sin are (T, d_h) tables from rope_cos_sin; the rotation runs in x's dtype."""
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The same rotation with pairs (2j, 2j + 1); cos/sin in the half-split layout of rope_cos_sin."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half].to(x.dtype), sin[..., :half].to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * c - odd * s, even * s + odd * c), dim=-1).flatten(-2)


def interleaved_to_half_split(head_dim: int) -> torch.Tensor:
    """Permutation p with apply_rope(x[..., p]) == apply_rope_interleaved(x)[..., p]: evens, then odds."""
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
