"""The step of a replica whose attention runs data-parallel (``adp`` ranks), as engines run it and as it is priced.

vLLM and SGLang run each attention data-parallel rank of an MoE model as a scheduler of its own: its waiting
queue, its running set, its share of the KV cache and a token budget (``max_num_batched_tokens``) of its own,
so each rank takes its own prompts, chunk by chunk, when they reach it. The MoE layers join the ranks every
step: a rank attends to its own sequences and runs its projections on its own tokens, then the dispatch waits
for every rank, the experts run on all their tokens together and the combine hands each its own back (a rank
with nothing to do runs an empty batch to take part). So a step lasts as long as the slowest rank's own part
plus the MoE section on the union of the ranks' tokens (:func:`synced_round_s`).

In steady state every rank carries the same mean load, ``d`` running sequences, and takes a prompt chunk of
``c`` tokens in a share ``f`` of its steps, independently of the others: in a step ``n`` of the ``adp`` ranks
carry one, ``n`` binomial (``adp``, ``f``). A step with ``n > 0`` lasts as long as one chunk-carrying rank's
own part plus the experts on ``adp d + n c`` tokens; one with ``n = 0`` is a pure decode step
(:func:`mean_round_s`). A chunk comes out after its own rank's pass with the other ranks' chunks in the step
(:func:`chunk_out_s`). One rank (``adp = 1``) is the plain replica step of :class:`~.steps.StepPricer`.

Why this rule and not the lockstep one. AIConfigurator prices attention DP in lockstep: every rank carries
``1/adp`` of the running sequences and of each prompt chunk, in the same steps, so a prompt's projections and
attention are split ``adp`` ways. The simulator (:mod:`shardplan.tools.simulation.ranks`) runs the ranks'
schedulers as the engines do, and its mean TPOT at the same load follows the independent rule; lockstep is
optimistic, and more so the more ranks and the heavier the load, because in an engine one rank carries a whole
prompt chunk while the others wait for it at the MoE layers (``benchmarks/bench_adp_ranks.py``; the figures are
in the README's simulator section).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

__all__ = ["RankPrices", "synced_round_s", "mean_round_s", "chunk_out_s"]


class RankPrices(Protocol):
    """What the rule needs of :class:`~.steps.StepPricer`: its lanes, a rank's own pass and the MoE section."""

    @property
    def lanes(self) -> int:
        """Batches a replica keeps in flight: one per pipeline stage."""

    def rank_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float: ...

    def experts_s(self, tokens: float) -> float: ...


def synced_round_s(prices: RankPrices, loads: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """One round of a replica whose attention data-parallel rank ``i`` carries ``loads[i]`` = (running sequences,
    prompt tokens), and the pass of the lane that carries the prompt chunks, in seconds.

    A lane's pass lasts as long as its slowest rank's own part plus the MoE section on every rank's tokens; the
    ranks' chunks ride in the same lane (each rank keeps its virtual engines in step with the others'), and a
    round is the mean of the lanes' passes, as :meth:`~.steps.StepPricer.step_s` has it. A rank with nothing to
    run, ``(0, 0)``, still takes part.
    """
    lanes = prices.lanes
    heavy = max(prices.rank_pass_s(d, p) for d, p in loads) + prices.experts_s(sum(d / lanes + p for d, p in loads))
    if lanes == 1 or not any(p for _, p in loads):
        return heavy, heavy
    light = max(prices.rank_pass_s(d, 0) for d, _ in loads) + prices.experts_s(sum(d for d, _ in loads) / lanes)
    return (heavy + (lanes - 1) * light) / lanes, heavy


def _binomial(trials: int, share: float, hits: int) -> float:
    """Probability of ``hits`` successes in ``trials`` independent tries of probability ``share``.

    >>> round(_binomial(4, 0.5, 2), 4)
    0.375
    """
    return math.comb(trials, hits) * share**hits * (1 - share) ** (trials - hits)


def _loads(ranks: int, decode: float, chunk: float, carrying: int) -> list[tuple[float, float]]:
    return [(decode, chunk)] * carrying + [(decode, 0.0)] * (ranks - carrying)


def mean_round_s(prices: RankPrices, ranks: int, decode: float, chunk: float, share: float) -> float:
    """The mean round of ``ranks`` attention data-parallel ranks, each running ``decode`` sequences and taking a
    prompt chunk of ``chunk`` tokens in a ``share`` of its steps, independently of the others."""
    return sum(
        _binomial(ranks, share, n) * synced_round_s(prices, _loads(ranks, decode, chunk, n))[0]
        for n in range(ranks + 1)
    )


def chunk_out_s(prices: RankPrices, ranks: int, decode: float, chunk: float, share: float) -> float:
    """How long one rank's prompt chunk takes to come out: its lane's pass, with each other rank carrying a chunk
    of its own in the same step at ``share``."""
    return sum(
        _binomial(ranks - 1, share, n) * synced_round_s(prices, _loads(ranks, decode, chunk, n + 1))[1]
        for n in range(ranks)
    )
