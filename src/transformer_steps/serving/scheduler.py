"""The scheduler: every step, admit waiting requests while the batch and the pool have room (their prefill),
or else give every running request one more token (a decode step); retire the finished, and preempt the most
recently admitted when the pool runs out (iteration-level scheduling: Orca, Yu et al., OSDI 2022)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .paged_cache import PagedKVCache


@dataclass(eq=False)
class Request:
    id: int
    prompt: list[int]
    max_new_tokens: int
    sampling: tuple  # (temperature, top_k, top_p, generator), sample_next's arguments
    stop_id: int | None = None  # an end-of-text id: the request ends once it samples it
    generated: list[int] = field(default_factory=list)
    table: list[int] = field(default_factory=list)  # its block table
    n_cached: int = 0  # leading tokens whose keys and values its blocks already hold
    arrival_time: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None

    @property
    def ids(self) -> list[int]:
        """The sequence so far; after a preemption, the prompt its recomputation starts from."""
        return self.prompt + self.generated

    @property
    def done(self) -> bool:
        """max_new_tokens generated, or the stop id just sampled (it is kept, as the last id)."""
        if len(self.generated) >= self.max_new_tokens:
            return True
        return self.stop_id is not None and bool(self.generated) and self.generated[-1] == self.stop_id


class Scheduler:
    def __init__(self, cache: PagedKVCache, max_batch_size: int, continuous: bool = True):
        self.cache, self.max_batch_size, self.continuous = cache, max_batch_size, continuous
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order
        self.preemptions = 0

    def add(self, request: Request):
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> tuple[str, list[Request]]:
        """("prefill", the requests admitted now) or ("decode", every running request)."""
        # static batching admits a new batch only once the whole previous one has finished
        if self.continuous or not self.running:
            admitted = []
            while (self.waiting and len(self.running) < self.max_batch_size
                   and self.cache.can_allocate(self.waiting[0].ids)):
                request = self.waiting.popleft()
                request.table, request.n_cached = self.cache.allocate(request.ids)
                self.running.append(request)
                admitted.append(request)
            if admitted:
                return "prefill", admitted
        # each running request writes its newest token: a new block when its last is full, and when none is
        # free, the newest request gives its blocks up (vLLM's recompute preemption)
        queue, batch = deque(self.running), []
        while queue:
            request = queue.popleft()
            while not self.cache.append_slot(request.table, len(request.ids)):
                victim = queue.pop() if queue else request
                self.preempt(victim)
                if victim is request:
                    break
            else:
                batch.append(request)
        self.running = batch
        return "decode", batch

    def preempt(self, request: Request):
        """Free its blocks and requeue it first in line: it is recomputed from its prompt and the ids it has
        generated so far, so its output is the same."""
        self.cache.release(request.table)  # its n_cached is set again when it is admitted again
        self.waiting.appendleft(request)
        self.preemptions += 1

    def retire(self, batch: list[Request]) -> list[Request]:
        """Release the blocks of the requests that have their last token; return those."""
        finished = [r for r in batch if r.done]
        for request in finished:
            self.cache.release(request.table)
            self.running.remove(request)
        return finished
