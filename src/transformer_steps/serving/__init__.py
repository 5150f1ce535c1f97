"""Serving many requests at once on the model's one forward: a paged KV cache, a scheduler, an engine."""

from .engine import Engine, Stats
from .paged_cache import PagedKVCache, block_keys, gather
from .scheduler import Request, Scheduler

__all__ = ["Engine", "PagedKVCache", "Request", "Scheduler", "Stats", "block_keys", "gather"]
