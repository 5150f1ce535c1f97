"""A paged KV cache: the keys and values of many sequences in one pool of fixed-size blocks per layer
(vLLM's PagedAttention, Kwon et al., SOSP 2023).

A sequence's block table lists its blocks in order: position p lives in block table[p // block_size], at slot
p % block_size. A sequence takes one block at a time as it grows, so what it holds is at most one partly filled
block more than it uses, instead of max_seq_len reserved up front.

With prefix caching, each full block of a prompt is keyed by its tokens and every token before them. A request
whose prompt starts with the same tokens shares those blocks (reference counts) and computes only the rest. A
block goes back to the pool when its last user releases it; a keyed one keeps its key and contents, cached,
until the pool needs the space, least recently released first (vLLM's automatic prefix caching).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque

import torch


def block_keys(ids: list[int], block_size: int) -> list[str]:
    """One key per full block of ids: a hash of the block's tokens and the previous block's key, so two blocks
    share a key only if everything up to their ends is the same."""
    keys, key = [], ""
    for start in range(0, len(ids) - block_size + 1, block_size):
        block = ids[start:start + block_size]
        key = hashlib.sha256(f"{key}|{block}".encode()).hexdigest()
        keys.append(key)
    return keys


class PagedKVCache:
    """The pool (keys and values, (num_blocks, block_size, n_kv_heads, head_dim) per layer) and its accounting:
    a free list, a reference count per block, and the keys of blocks that hold a prompt prefix."""

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, num_blocks: int, block_size: int,
                 dtype=torch.float32, device=None, prefix_caching: bool = False):
        shape = (num_blocks, block_size, n_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.num_blocks, self.block_size, self.prefix_caching = num_blocks, block_size, prefix_caching
        self.ref_count = [0] * num_blocks
        self.key = [None] * num_blocks  # the prefix key a block holds, or None
        self.free = deque(range(num_blocks))  # free blocks that hold nothing worth keeping
        self.cached = OrderedDict()  # free blocks that still hold a keyed prefix, least recently released first
        self.by_key = {}  # key -> block, for every keyed block, in use or cached
        # where each layer gathers its keys and values, reused by the next layer and the next step: a fresh
        # tensor every time would cost more than the copy (the allocator maps new pages, and each one faults)
        self.scratch = [torch.empty((0, *shape[1:]), dtype=dtype, device=device) for _ in range(2)]

    @property
    def num_free(self) -> int:
        """Blocks a request can take: the empty ones and the cached ones (evicted when taken)."""
        return len(self.free) + len(self.cached)

    @property
    def blocks_in_use(self) -> int:
        return self.num_blocks - self.num_free

    def blocks_needed(self, n_tokens: int) -> int:
        return -(-n_tokens // self.block_size)

    def prefix_hits(self, ids: list[int]) -> list[int]:
        """The blocks holding the longest keyed prefix of ids; never the block of the last token, whose
        logits the prefill must compute."""
        if not self.prefix_caching:
            return []
        hits = []
        for key in block_keys(ids[:len(ids) - 1], self.block_size):
            if key not in self.by_key:
                break
            hits.append(self.by_key[key])
        return hits

    def can_allocate(self, ids: list[int]) -> bool:
        """Whether a sequence of ids fits now: a hit on a block in use costs nothing, any other block one."""
        hits_in_use = sum(self.ref_count[b] > 0 for b in self.prefix_hits(ids))
        return self.blocks_needed(len(ids)) - hits_in_use <= self.num_free

    def allocate(self, ids: list[int]) -> tuple[list[int], int]:
        """Blocks for a sequence of ids (call can_allocate first): (block table, tokens already cached)."""
        table = []
        for b in self.prefix_hits(ids):
            if self.ref_count[b] == 0:
                del self.cached[b]  # a cached block back in use
            self.ref_count[b] += 1
            table.append(b)
        n_cached = len(table) * self.block_size
        while len(table) < self.blocks_needed(len(ids)):
            table.append(self._take())
        if self.prefix_caching:
            # key the new full blocks now: a request admitted after this one in the same step reads them only
            # after this one's prefill has written them (prefills run in admission order)
            for i, key in enumerate(block_keys(ids, self.block_size)):
                if i >= n_cached // self.block_size and key not in self.by_key:
                    self.key[table[i]], self.by_key[key] = key, table[i]
        return table, n_cached

    def append_slot(self, table: list[int], n_tokens: int) -> bool:
        """Make room for a sequence's n_tokens-th token: a new block when the last one is full. False when no
        block is free (the scheduler then preempts)."""
        if self.blocks_needed(n_tokens) <= len(table):
            return True
        if self.num_free == 0:
            return False
        table.append(self._take())
        return True

    def release(self, table: list[int]):
        """A sequence is done with its blocks; each goes back to the pool when its last user releases it.
        The tail first, so that eviction takes a prompt's later blocks before its shared beginning."""
        for b in reversed(table):
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                if self.key[b] is None:
                    self.free.append(b)
                else:
                    self.cached[b] = None  # keeps key and contents until the space is needed
        table.clear()

    def _take(self) -> int:
        """A block for new contents: an empty one, else evict the least recently released cached one."""
        if self.free:
            b = self.free.popleft()
        else:
            b, _ = self.cached.popitem(last=False)
            del self.by_key[self.key[b]]  # its old contents can no longer be found
            self.key[b] = None
        self.ref_count[b] = 1
        return b

    def layers(self, tables: torch.Tensor) -> list[PagedLayer]:
        """What the model's forward takes as its cache: each layer's pool, seen through the block tables
        (B, n_blocks) of the batch (a shorter table padded with any block: its slots lie ahead of every query).
        For inference only: the layers gather into one shared scratch, so autograd could not keep them."""
        if self.scratch[0].shape[0] < tables.numel():
            self.scratch = [torch.empty((tables.numel(), *s.shape[1:]), dtype=s.dtype, device=s.device)
                            for s in self.scratch]
        k_out, v_out = (s[:tables.numel()] for s in self.scratch)
        return [PagedLayer(k, v, tables, k_out, v_out) for k, v in zip(self.k, self.v)]


class PagedLayer:
    """One layer's pool through a batch's block tables, with KVCache's update(input_pos, k, v), max_len and
    batch_size: what the model's attention calls."""

    def __init__(self, k_pool: torch.Tensor, v_pool: torch.Tensor, tables: torch.Tensor, k_out=None, v_out=None):
        self.k_pool, self.v_pool, self.tables, self.k_out, self.v_out = k_pool, v_pool, tables, k_out, v_out
        self.batch_size = tables.shape[0]
        self.max_len = tables.shape[1] * k_pool.shape[1]  # positions 0 .. max_len - 1 of each sequence

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Write k, v (B, nkv, T, hs) at the positions input_pos (B, T); return every sequence's keys and
        values gathered through its block table, (B, nkv, max_len, hs) each, as a contiguous cache holds them."""
        bs = self.k_pool.shape[1]
        slots = self.tables.gather(1, input_pos // bs) * bs + input_pos % bs  # (B, T) rows of the flat pool
        self.k_pool.flatten(0, 1)[slots] = k.transpose(1, 2).to(self.k_pool.dtype)  # (B, T, nkv, hs)
        self.v_pool.flatten(0, 1)[slots] = v.transpose(1, 2).to(self.v_pool.dtype)
        return gather(self.k_pool, self.tables, self.k_out), gather(self.v_pool, self.tables, self.v_out)


def gather(pool: torch.Tensor, tables: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """pool (num_blocks, bs, nkv, hs), tables (B, n) -> (B, nkv, n * bs, hs): each sequence's blocks in order.
    out: (B * n, bs, nkv, hs) to copy them into."""
    B, n = tables.shape
    _, bs, nkv, hs = pool.shape
    blocks = torch.index_select(pool, 0, tables.flatten(), out=out)  # (B * n, bs, nkv, hs)
    return blocks.view(B, n * bs, nkv, hs).transpose(1, 2)
