"""The engine: requests in, ids out. Each step asks the scheduler what to run: a prefill runs the model's one
forward once per admitted request; a decode runs one forward for every running request, each newest token at its
own position, over the paged cache. Then it samples one token per request and retires the finished.

vLLM and SGLang pack a step's prefills into one unpadded batch, with a varlen attention kernel. Through this
model's one forward a packed prefill is a padded batch, and on a CPU, where a forward's cost follows the rows it
computes, the padding costs more than the forwards it saves: the 16 prompts (16-128 tokens) that bench (g1)
admits at once took 0.47 s as 16 forwards and 0.69-0.80 s as one batch padded to the longest (1 thread).

    >>> engine = Engine(model, max_batch_size=16, num_blocks=512, block_size=16)
    >>> new_ids = engine.run([[1, 2, 3], [4, 5]], max_new_tokens=8)  # one list of ids per prompt

A server drives add_request and step instead, and takes the finished requests out as they come:

    >>> while engine.has_work():
    ...     engine.step()
    ...     for request in engine.pop_finished():
    ...         reply(request.id, request.generated)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from numbers import Integral

import torch

from ..generate import check_sampling, sample_next
from ..model import TransformerLM
from ..validate import check_int
from .paged_cache import PagedKVCache
from .scheduler import Request, Scheduler


@dataclass
class Stats:
    prefill_tokens: int = 0  # prompt tokens computed (reused ones not counted)
    reused_prefix_tokens: int = 0  # prompt tokens whose keys and values came from cached blocks
    prefill_steps: int = 0
    decode_steps: int = 0
    generated_tokens: int = 0
    preemptions: int = 0
    peak_blocks_in_use: int = 0


class Engine:
    """Serves a TransformerLM: at most max_batch_size requests at once, over a pool of num_blocks blocks of
    block_size tokens per layer. prefix_caching: reuse the blocks of a prompt prefix already computed.

    continuous=False: static batching, a new batch only once the whole batch has finished. A request that
    finishes early leaves the batch at once: its slot idles, but nothing more is computed for it. That is the
    stronger of the two static baselines, so that continuous batching is credited only with what it adds,
    filling the idle slots; a batched `generate` (Orca's baseline) instead keeps computing a finished row until
    the batch's longest request ends. Bench (g2) times both, and fits what a decode step costs per step and per
    row, which decides what fewer steps buy."""

    def __init__(self, model: TransformerLM, max_batch_size: int = 16, num_blocks: int = 512,
                 block_size: int = 16, prefix_caching: bool = False, continuous: bool = True):
        if not isinstance(model, TransformerLM):
            raise TypeError(f"Engine needs a TransformerLM, got {type(model).__name__}")
        if not model.cfg.causal:
            raise ValueError("serving needs a causal model (cfg.causal=True): a bidirectional one sees the future")
        for name, value in (("max_batch_size", max_batch_size), ("num_blocks", num_blocks),
                            ("block_size", block_size)):
            check_int(name, value, 1)
        for name, value in (("prefix_caching", prefix_caching), ("continuous", continuous)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        self.model, cfg, w = model, model.cfg, model.tok_emb.weight
        self.cache = PagedKVCache(cfg.n_layers, cfg.kv_heads, cfg.head_dim, num_blocks, block_size, w.dtype,
                                  w.device, prefix_caching)
        self.scheduler = Scheduler(self.cache, max_batch_size, continuous)
        self.stats = Stats()
        self.requests: dict[int, Request] = {}  # every request not yet handed back (by run or pop_finished)
        self.trace: list[tuple[str, list[int]]] = []  # per step: its kind and the ids of the requests it ran
        self._next_id = 0

    def add_request(self, prompt, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
                    top_p: float | None = None, generator: torch.Generator | None = None,
                    stop_id: int | None = None) -> int:
        """Queue one prompt (a list of ids); returns its request id. Checked first: nothing changes on error.
        stop_id: an end-of-text id; the request ends as soon as it samples it (kept as its last id), so its ids
        are generate's cut after the first stop id, and its blocks go back to the pool at once."""
        prompt = self.check_request(prompt, max_new_tokens, temperature, top_k, top_p, stop_id)
        request = Request(self._next_id, prompt, max_new_tokens, (temperature, top_k, top_p, generator),
                          stop_id=None if stop_id is None else int(stop_id), arrival_time=time.perf_counter())
        self._next_id += 1
        self.requests[request.id] = request
        if max_new_tokens == 0:
            request.finish_time = request.arrival_time  # nothing to compute
        else:
            self.scheduler.add(request)
        return request.id

    def has_work(self) -> bool:
        """Whether a request is waiting or running: a server steps while this holds."""
        return self.scheduler.has_work()

    def pop_finished(self) -> list[Request]:
        """Take every finished request out of the engine, in request id order, and hand it back: the engine keeps
        no reference to it afterwards. A server calls this after each step; run() does it for its own."""
        finished = [r for r in self.requests.values() if r.finish_time is not None]
        for request in finished:
            del self.requests[request.id]
        return finished

    def step(self) -> list[Request]:
        """One step: a forward per admitted request (their prefills), or one forward that decodes the whole batch;
        returns the requests that finished in it."""
        if not self.scheduler.has_work():
            return []
        kind, batch = self.scheduler.schedule()
        self.stats.peak_blocks_in_use = max(self.stats.peak_blocks_in_use, self.cache.blocks_in_use)
        self.stats.preemptions = self.scheduler.preemptions
        with torch.inference_mode():
            if kind == "prefill":
                logits = torch.cat([self.prefill(request) for request in batch])
                self.stats.prefill_steps += 1
            else:
                logits = self.decode(batch)
                self.stats.decode_steps += 1
            new_ids = self.sample(batch, logits)
        now = time.perf_counter()
        for request, token in zip(batch, new_ids):
            request.generated.append(token)
            if request.first_token_time is None:
                request.first_token_time = now
        self.stats.generated_tokens += len(batch)
        self.trace.append((kind, [request.id for request in batch]))
        finished = self.scheduler.retire(batch)
        for request in finished:
            request.finish_time = now
        return finished

    def run(self, prompts, max_new_tokens, temperature: float = 0.0, top_k: int | None = None,
            top_p: float | None = None, generator: torch.Generator | None = None,
            stop_id=None) -> list[list[int]]:
        """Serve every prompt (a list of lists of ids, ragged); max_new_tokens: one int, or one per prompt;
        stop_id: None, one id, or one per prompt (None for a prompt without one). Returns the generated ids, one
        list per prompt, in the prompts' order. Requests already queued with add_request are served alongside."""
        if not isinstance(prompts, (list, tuple)):
            raise TypeError(f"prompts must be a list of lists of token ids, got {type(prompts).__name__}")
        counts = max_new_tokens if isinstance(max_new_tokens, (list, tuple)) else [max_new_tokens] * len(prompts)
        if len(counts) != len(prompts):
            raise ValueError(f"max_new_tokens needs one count per prompt ({len(prompts)}), got {len(counts)}")
        stops = stop_id if isinstance(stop_id, (list, tuple)) else [stop_id] * len(prompts)
        if len(stops) != len(prompts):
            raise ValueError(f"stop_id needs one id (or None) per prompt ({len(prompts)}), got {len(stops)}")
        # every request checked before any is queued
        for prompt, n, stop in zip(prompts, counts, stops):
            self.check_request(prompt, n, temperature, top_k, top_p, stop)
        ids = [self.add_request(p, n, temperature, top_k, top_p, generator, stop)
               for p, n, stop in zip(prompts, counts, stops)]
        while any(self.requests[i].finish_time is None for i in ids):
            self.step()
        return [self.requests.pop(i).generated for i in ids]

    def prefill(self, request: Request) -> torch.Tensor:
        """The request's tokens not yet cached, at their positions, into its blocks; last logits (1, V)."""
        device, start, ids = self.cache.k[0].device, request.n_cached, request.ids
        idx = torch.tensor([ids[start:]], device=device)  # (1, T)
        pos = torch.arange(start, len(ids), device=device)[None]  # (1, T)
        tables = torch.tensor([request.table], device=device)  # (1, n_blocks)
        self.stats.prefill_tokens += len(ids) - start
        self.stats.reused_prefix_tokens += start
        request.n_cached = len(ids)
        return self.model(idx, pos, self.cache.layers(tables), last_only=True, check=False)[:, -1]

    def decode(self, batch: list[Request]) -> torch.Tensor:
        """Each request's newest token at its own position, in one forward; logits (B, V)."""
        device = self.cache.k[0].device
        idx = torch.tensor([[r.ids[-1]] for r in batch], device=device)  # (B, 1)
        pos = torch.tensor([[len(r.ids) - 1] for r in batch], device=device)  # (B, 1)
        width = max(len(r.table) for r in batch)
        # shorter tables padded with block 0: read, never written, and masked (they lie ahead of every query)
        tables = torch.tensor([r.table + [0] * (width - len(r.table)) for r in batch], device=device)
        for r in batch:
            r.n_cached += 1
        return self.model(idx, pos, self.cache.layers(tables), check=False)[:, -1]

    def sample(self, batch: list[Request], logits: torch.Tensor) -> list[int]:
        """One id per request; requests with the same sampling arguments share one call."""
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(batch):
            groups.setdefault((*r.sampling[:3], id(r.sampling[3])), []).append(i)
        new = [0] * len(batch)
        for rows in groups.values():
            temperature, top_k, top_p, generator = batch[rows[0]].sampling
            ids = sample_next(logits[rows], temperature, top_k, top_p, generator)[:, 0].tolist()
            for i, token in zip(rows, ids):
                new[i] = token
        return new

    def check_request(self, prompt, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
                      stop_id=None) -> list[int]:
        """The prompt as a list of ints, or TypeError / ValueError naming what is wrong."""
        cfg, cache = self.model.cfg, self.cache
        if isinstance(prompt, torch.Tensor) and prompt.dim() == 1 and not prompt.dtype.is_floating_point:
            prompt = prompt.tolist()
        if not isinstance(prompt, (list, tuple)):
            raise TypeError(f"a prompt must be a list of token ids, got {type(prompt).__name__}")
        if not prompt:
            raise ValueError("empty prompt: a request needs at least one token")
        for token in prompt:
            if isinstance(token, bool) or not isinstance(token, Integral):
                raise TypeError(f"token ids must be ints, got {type(token).__name__} {token!r}")
        outside = [t for t in prompt if not 0 <= t < cfg.vocab_size]
        if outside:
            raise ValueError(f"token id {outside[0]} outside the vocabulary [0, {cfg.vocab_size})")
        if stop_id is not None:
            if isinstance(stop_id, bool) or not isinstance(stop_id, Integral):
                raise TypeError(f"stop_id must be an int token id or None, got {type(stop_id).__name__} {stop_id!r}")
            if not 0 <= stop_id < cfg.vocab_size:
                raise ValueError(f"stop_id {stop_id} outside the vocabulary [0, {cfg.vocab_size})")
        check_sampling(max_new_tokens, temperature, top_k, top_p)
        n = len(prompt) + max_new_tokens
        if n > cfg.max_seq_len:
            raise ValueError(f"prompt ({len(prompt)}) + max_new_tokens ({max_new_tokens}) = {n} exceeds "
                             f"max_seq_len ({cfg.max_seq_len})")
        # the last new token is sampled, never written: n - 1 positions in the cache
        need = cache.blocks_needed(n - 1) if max_new_tokens else 0
        if need > cache.num_blocks:
            raise ValueError(f"the request needs {need} blocks of {cache.block_size} tokens, but the pool has only "
                             f"{cache.num_blocks}: it could never fit")
        return [int(t) for t in prompt]
