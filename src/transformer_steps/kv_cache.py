"""A preallocated key/value cache for one attention layer (the gpt-fast shape)."""

from __future__ import annotations

import torch

from .validate import check_choice, check_int

BYTES_PER_ELEMENT = (1, 2, 4, 8)  # int8, bf16/fp16, fp32, fp64


def kv_cache_bytes(cfg, seq_len: int, *, bytes_per_element: int = 2, batch_size: int = 1) -> int:
    """Bytes of the keys and values a model with config cfg keeps for seq_len positions per sequence:
    2 (K and V) * layers * batch * kv_heads * seq_len * head_dim * bytes per element."""
    check_int("seq_len", seq_len, 0)
    check_int("batch_size", batch_size, 1)
    check_choice("bytes_per_element", bytes_per_element, BYTES_PER_ELEMENT)
    return 2 * cfg.n_layers * batch_size * cfg.kv_heads * seq_len * cfg.head_dim * bytes_per_element


class KVCache:
    """Keys and values of one layer, (B, n_kv_heads, max_len, head_dim) each, written in place at explicit
    positions. The shapes never change, so a compiled decode step compiles once; the attention mask hides the
    positions not written yet (they lie ahead of every query)."""

    def __init__(self, batch_size: int, n_kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device=None):
        for name, value in (("batch_size", batch_size), ("n_kv_heads", n_kv_heads), ("max_len", max_len),
                            ("head_dim", head_dim)):
            check_int(name, value, 1)
        shape = (batch_size, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def batch_size(self) -> int:
        return self.k.shape[0]

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write k, v (B, nkv, T, hs) at the positions input_pos (T,), or (B, T) for each sequence at its own;
        return the whole buffers."""
        B, nkv, _, hs = self.k.shape
        if k.shape != v.shape or k.dim() != 4 or k.shape[:2] != (B, nkv) or k.shape[3] != hs:
            raise ValueError(f"k and v must both be ({B}, {nkv}, T, {hs}), got {tuple(k.shape)} and {tuple(v.shape)}")
        T = k.shape[2]
        if input_pos.shape not in ((T,), (B, T)):
            raise ValueError(f"input_pos must hold one position per key ({T},), got {tuple(input_pos.shape)}; "
                             f"or one per sequence and key, ({B}, {T})")
        # in the cache's dtype (a bf16 step under autocast writes into a float32 cache)
        if input_pos.dim() == 1:
            self.k.index_copy_(2, input_pos, k.to(self.k.dtype))
            self.v.index_copy_(2, input_pos, v.to(self.v.dtype))
        else:
            rows = torch.arange(B, device=input_pos.device)[:, None]  # (B, 1), beside input_pos (B, T)
            self.k[rows, :, input_pos] = k.transpose(1, 2).to(self.k.dtype)  # indexed as (B, T, nkv, hs)
            self.v[rows, :, input_pos] = v.transpose(1, 2).to(self.v.dtype)
        return self.k, self.v

    def reset(self):
        self.k.zero_()
        self.v.zero_()
