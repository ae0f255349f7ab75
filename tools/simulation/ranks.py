"""The attention data-parallel ranks of one replica, as vLLM and SGLang run an MoE model with ``adp`` ranks.

Each rank is a scheduler of its own (:class:`~.engine.Engine`): its waiting queue, its running set, its share of
the replica's KV cache, its own ``max_num_seqs`` and token budget, its own chunked prefill. A request goes to one
rank and stays there (:func:`~.router.least_loaded_rank`, vLLM's data-parallel load balancer).

The MoE layers join the ranks every step. In each layer a rank attends to its own sequences and runs its
projections on its own tokens; then the dispatch (or all-gather) waits for every rank, the experts run on all
their tokens together, and the combine hands each rank its own back. So a step of the replica lasts as long as
its slowest rank's own part plus the MoE section on the union of the ranks' tokens (with pipeline stages, per
lane, the prompt chunks of every rank riding in the same lane); a rank with nothing to run still takes part,
with an empty batch (vLLM's dummy batch, SGLang's idle batch), and waits for the step like the others. A rank whose
sequences all wait for their first token to leave the pipeline (:mod:`.engine`) takes part the same way; when
every rank with work waits, the replica waits for the earliest of those tokens.

The step is priced as the serving model prices it (:func:`~shardplan.tools.serving.attention_dp.synced_round_s`),
from each rank's own load: the analytic model prices the same rounds, in expectation over the ranks' chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardplan.tools.serving.attention_dp import RankPrices, synced_round_s
from shardplan.tools.simulation.engine import Engine
from shardplan.tools.simulation.replica import StepPlan, StepRecord, repeats_before, waited
from shardplan.tools.simulation.router import least_loaded_rank

__all__ = ["RankGroup"]


@dataclass
class RankGroup:
    """One replica of ``len(ranks)`` attention data-parallel ranks stepping together. ``clock`` is when the
    replica's next step starts (every rank's clock is set to it before the step)."""

    ranks: list[Engine]
    costs: RankPrices
    record_steps: bool = False
    clock: float = 0.0
    steps: int = 0
    peak_blocks: int = 0
    """Most KV-cache blocks the ranks held together in a step, their cached prefixes included (as the mean in use
    counts them), before the sequences that finished in it let theirs go (as one scheduler's peak counts them)."""
    records: list[StepRecord] = field(default_factory=list)

    @property
    def has_work(self) -> bool:
        return any(rank.has_work for rank in self.ranks)

    @property
    def running(self) -> int:
        return sum(rank.running for rank in self.ranks)

    def cached_tokens(self, group: int) -> int:
        """Tokens of ``group``'s prefix the rank that caches most of it holds."""
        return max(rank.cached_tokens(group) for rank in self.ranks)

    @property
    def resident_s(self) -> float:
        return sum(rank.resident_s for rank in self.ranks)

    @property
    def running_s(self) -> float:
        return sum(rank.running_s for rank in self.ranks)

    @property
    def blocks_s(self) -> float:
        return sum(rank.blocks_s for rank in self.ranks)

    @property
    def preemptions(self) -> int:
        return sum(rank.preemptions for rank in self.ranks)

    def outstanding_at(self, now: float) -> int:
        """Requests routed to any rank and not finished by ``now``."""
        return sum(rank.outstanding_at(now) for rank in self.ranks)

    def enqueue(self, rid: int, now: float) -> None:
        """Send request ``rid`` to the least loaded rank at time ``now``; an idle replica starts its next step then."""
        if not self.has_work:
            self.clock = max(self.clock, now)
        rank = self.ranks[least_loaded_rank(self.ranks)]
        rank.clock = self.clock
        rank.enqueue(rid, now)

    def step(self, horizon: float) -> np.ndarray:
        """Run the replica's next step on every rank (and the identical ones after it that start before
        ``horizon``, while every rank with work decodes only); returns the ids of the requests that finished."""
        now = self.clock
        plans: list[StepPlan | None] = []
        for rank in self.ranks:
            rank.clock = now
            plans.append(rank.plan() if rank.has_work else None)
        # A rank waiting for a first token to leave the pipeline takes part with nothing to run, like an idle one.
        working = [p if p is not None and p.until is None else None for p in plans]
        waits = [p.until for p in plans if p is not None and p.until is not None]
        stepped = any(p is not None for p in working)
        if stepped:
            duration, chunk_pass = self._price(working)
            most = min(p.most for p in working if p is not None)
            repeats = repeats_before(most, duration, min([horizon, *waits]), now)
        else:  # every rank with work waits for a first token: the replica waits for the earliest
            duration, chunk_pass, repeats = waited(min(waits), horizon, now), 0.0, 1
        finished = [plan.run(duration, chunk_pass, repeats) for plan in plans if plan is not None]
        self.clock = now + duration * repeats
        for rank in self.ranks:
            rank.clock = self.clock  # a rank with nothing to run waited for the step too
        if stepped:
            self.steps += repeats
            # A rank without work holds only its cached prefixes.
            held = sum(rank.step_blocks if plan is not None else rank.prefix.blocks if rank.prefix is not None else 0
                       for rank, plan in zip(self.ranks, plans, strict=True))
            self.peak_blocks = max(self.peak_blocks, held)
        if stepped and self.record_steps:
            loads = [(p.decode, p.prefill) if p is not None else (0, 0) for p in plans]
            self.records.append(StepRecord(
                now, duration * repeats, sum(d for d, _ in loads), sum(p for _, p in loads), repeats, self.running,
                sum(len(rank.waiting) for rank in self.ranks),
            ))
        return np.concatenate(finished) if finished else np.zeros(0, dtype=np.int64)

    def _price(self, plans: list[StepPlan | None]) -> tuple[float, float]:
        """The step's duration and the pass of the lane carrying the prompt chunks, from every rank's load (an
        idle rank's is nothing)."""
        return synced_round_s(self.costs, [(p.decode, p.prefill) if p is not None else (0, 0) for p in plans])
