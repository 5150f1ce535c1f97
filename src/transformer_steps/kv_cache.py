"""A preallocated key/value cache for one attention layer (the gpt-fast shape)."""

from __future__ import annotations

import torch


class KVCache:
    """Keys and values of every position seen so far, written in place at explicit positions.

    Buffers are (B, n_kv_heads, max_len, head_dim); `update` returns views of the filled prefix.
    """

    def __init__(self, batch_size: int, n_kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device=None):
        shape = (batch_size, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0  # positions [0, length) hold valid keys/values

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2

    def update(self, start_pos: int, k: torch.Tensor, v: torch.Tensor):
        """Write k, v (B, nkv, T, hs) at positions [start_pos, start_pos + T); return keys/values [0, end)."""
        B, nkv, max_len, hs = self.k.shape  # each .shape is a call: read once (this runs every decode step)
        shape = k.shape
        if len(shape) != 4 or shape != v.shape or shape != (B, nkv, shape[2], hs):
            raise ValueError(f"k and v must both be ({B}, {nkv}, T, {hs}), got {tuple(shape)} and {tuple(v.shape)}")
        t, end = shape[2], start_pos + shape[2]
        if not 0 <= start_pos <= self.length:
            raise ValueError(f"start_pos must be in [0, {self.length}] (the filled length), got {start_pos}")
        if end > max_len:
            raise ValueError(f"KV cache overflow: positions up to {end} requested, capacity is {max_len}; "
                             "make the cache larger (max_len) or generate fewer tokens")
        # narrow + copy_ (not slice assignment): the same write with less per-call overhead at decode time
        self.k.narrow(2, start_pos, t).copy_(k)
        self.v.narrow(2, start_pos, t).copy_(v)
        self.length = end
        return self.k.narrow(2, 0, end), self.v.narrow(2, 0, end)

    def reset(self):
        self.k.zero_()
        self.v.zero_()
        self.length = 0
