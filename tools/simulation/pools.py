"""The prefill pool of a split deployment: ``x`` prefill workers serving one first-come, first-served queue.

A free worker starts a step at once with the prompts waiting, whole prompts up to the analytic prefill worker's
``prompts`` per step and its token budget (at least one prompt), as the serving model's
:class:`~shardplan.tools.serving.disaggregated.PrefillWorker` does; the queue is one, as Dynamo's prefill queue
(or a router sending each prompt to an idle worker) makes it. A step of ``k`` prompts holding ``T`` tokens
costs the static prefill of ``k`` prompts at the mean length, scaled by ``T / (k x isl)``: exactly the
analytic step when every prompt has the mean length.

With prefix caching each worker has a prefix cache of its own (:class:`~.prefix_cache.PrefixCache`): a prompt whose
group's prefix the worker holds computes only the rest, ``T`` counts the tokens computed (and ``isl`` the tokens the
pricer's prefill computes of a mean prompt), and a prompt arriving when several workers are idle goes to the one
holding most of its prefix (cache affinity); a worker that frees up takes the head of the one queue.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from shardplan.tools.simulation.prefix_cache import PrefixCache
from shardplan.tools.simulation.state import Requests

__all__ = ["PrefillCosts", "PrefillStep", "PrefillPool"]


class PrefillCosts(Protocol):
    """Static prefill prices, as :class:`~shardplan.tools.serving.steps.StepPricer` gives them."""

    isl: int

    @property
    def prefill_tokens(self) -> int:
        """Tokens the priced prefill computes of a prompt of ``isl`` tokens (``isl`` without prefix caching)."""

    def prefill_s(self, prompts: int) -> float: ...


@dataclass(frozen=True)
class PrefillStep:
    """One prefill step of one worker, for the trace."""

    worker: int
    start_s: float
    duration_s: float
    prompts: int
    tokens: int


@dataclass
class PrefillPool:
    """The prefill workers, their shared queue and what they measured (times in seconds)."""

    requests: Requests
    costs: PrefillCosts
    workers: int
    prompts: int
    """Prompts one step takes at most."""
    token_budget: int
    """Prompt tokens one step takes at most (one prompt however long)."""
    record_steps: bool = False
    caches: list[PrefixCache] | None = None
    """Each worker's prefix cache; None: no prefix caching."""
    cache_blocks: int = 0
    """KV-cache blocks of one worker, which its step's prompts and its cached prefixes share."""
    queue: deque[int] = field(default_factory=deque)
    batches: dict[int, np.ndarray] = field(default_factory=dict)
    """The prompts of each busy worker's step."""
    _prices: dict[int, float] = field(default_factory=dict)
    _resident: int = 0
    _since: float = 0.0
    resident_s: float = 0.0
    """Requests queued or in a step, integrated over time."""
    steps: int = 0
    records: list[PrefillStep] = field(default_factory=list)

    def _count(self, now: float, change: int) -> None:
        self.resident_s += self._resident * (now - self._since)
        self._resident += change
        self._since = now

    def enqueue(self, rid: int, now: float) -> list[tuple[float, int]]:
        """Queue request ``rid`` at ``now``; returns the steps this starts as (end time, worker)."""
        self._count(now, 1)
        self.queue.append(rid)
        idle = [w for w in range(self.workers) if w not in self.batches]
        if not idle:
            return []
        if self.caches is not None and len(idle) > 1:
            group = int(self.requests.group[rid])
            return self._start(max(idle, key=lambda w: self.caches[w].held(group) if self.caches else 0), now)
        return self._start(idle[0], now)

    def finish(self, worker: int, now: float) -> tuple[np.ndarray, list[tuple[float, int]]]:
        """End ``worker``'s step at ``now``: the prompts it prefilled, and the next step it starts, if any."""
        done = self.batches.pop(worker)
        self._count(now, -int(done.size))
        if self.caches is not None:
            for rid in done.tolist():
                if self.requests.prefix[rid] >= self.caches[worker].block_tokens:
                    self.caches[worker].release(int(self.requests.group[rid]))
        return done, self._start(worker, now)

    def _start(self, worker: int, now: float) -> list[tuple[float, int]]:
        """Start a step on idle ``worker`` at ``now`` with the prompts at the head of the queue, if any."""
        if not self.queue:
            return []
        req = self.requests
        ids = [self.queue.popleft()]
        tokens = self._computed(worker, ids[0])
        while self.queue and len(ids) < self.prompts:
            more = self._computed(worker, self.queue[0])
            if tokens + more > self.token_budget:
                break
            ids.append(self.queue.popleft())
            tokens += more
        batch = np.array(ids, dtype=np.int64)
        unstarted = batch[np.isnan(req.scheduled[batch])]
        req.scheduled[unstarted] = now
        if self.caches is not None:
            self._cache(worker, batch, tokens)
        duration = self._price(batch.size) * tokens / (batch.size * self.costs.prefill_tokens)
        self.batches[worker] = batch
        self.steps += 1
        if self.record_steps:
            self.records.append(PrefillStep(worker, now, duration, int(batch.size), tokens))
        return [(now + duration, worker)]

    def _computed(self, worker: int, rid: int) -> int:
        """Prompt tokens ``worker`` computes for request ``rid``: those its prefix cache does not hold."""
        req = self.requests
        prompt = int(req.isl[rid])
        if self.caches is None:
            return prompt
        return prompt - self.caches[worker].hit_tokens(int(req.group[rid]), int(req.prefix[rid]), prompt)

    def _cache(self, worker: int, batch: np.ndarray, tokens: int) -> None:
        """Record the step's hits, pin its prompts' prefixes for the step, and make room for its own blocks."""
        assert self.caches is not None
        cache, req = self.caches[worker], self.requests
        for rid in batch.tolist():
            if req.hit[rid] < 0:
                req.hit[rid] = cache.hit_tokens(int(req.group[rid]), int(req.prefix[rid]), int(req.isl[rid]))
        for rid in batch.tolist():
            cache.acquire(int(req.group[rid]), int(req.prefix[rid]))
        cache.evict(max(self.cache_blocks - -(-tokens // cache.block_tokens), 0))

    def _price(self, prompts: int) -> float:
        if prompts not in self._prices:
            self._prices[prompts] = self.costs.prefill_s(prompts)
        return self._prices[prompts]

    def close(self, now: float) -> None:
        """Count the time up to ``now`` (the end of the run)."""
        self._count(now, 0)
