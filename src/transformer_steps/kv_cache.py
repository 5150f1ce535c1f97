"""A preallocated key/value cache for one attention layer (the gpt-fast shape)."""

from __future__ import annotations

import torch

from .validate import check_choice, check_int

BYTES_PER_ELEMENT = (1, 2, 4, 8)  # int8, bf16/fp16, fp32, fp64


def kv_bytes(n_layers: int, batch_size: int, kv_heads: int, seq_len: int, head_dim: int,
             bytes_per_element: int) -> int:
    """Bytes of the keys and values of seq_len positions: 2 (K and V) · layers · batch · kv_heads · seq_len ·
    head_dim · bytes. The one formula the package uses (KVCache.nbytes, the roofline, the benchmark)."""
    return 2 * n_layers * batch_size * kv_heads * seq_len * head_dim * bytes_per_element


def kv_cache_bytes(cfg, seq_len: int, *, bytes_per_element: int = 2, batch_size: int = 1) -> int:
    """KV-cache bytes of a model with config cfg holding seq_len positions per sequence."""
    check_int("seq_len", seq_len, 0)
    check_int("batch_size", batch_size, 1)
    check_choice("bytes_per_element", bytes_per_element, BYTES_PER_ELEMENT)
    return kv_bytes(cfg.n_layers, batch_size, cfg.kv_heads, seq_len, cfg.head_dim, bytes_per_element)


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
        B, nkv, max_len, hs = self.k.shape
        return kv_bytes(1, B, nkv, max_len, hs, self.k.element_size())

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
