"""How deployments are ranked: target shortfall first, then the objective's metric; the Pareto frontier.

Plain functions over anything that carries the figures (search candidates, priced serving options), so the
search, the deployment evaluation and the planner rank alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from .contracts.workload import Workload

__all__ = ["Ranked", "shortfall", "rank_key", "pareto_front"]


class Ranked(Protocol):
    """What ranking reads of a deployment (read-only, so frozen options and candidates both qualify)."""

    @property
    def ttft_ms(self) -> float: ...

    @property
    def tpot_ms(self) -> float: ...

    @property
    def tokens_per_s(self) -> float: ...

    @property
    def tokens_per_s_per_gpu(self) -> float: ...

    @property
    def gpus_used(self) -> int: ...

    @property
    def requests_per_s(self) -> float: ...


def shortfall(workload: Workload, c: Ranked) -> float:
    """How far ``c`` misses the targets, as relative gaps summed (0 when it meets them all)."""
    gap = 0.0
    if workload.ttft_ms:
        gap += max(0.0, c.ttft_ms / workload.ttft_ms - 1)
    if workload.tpot_ms:
        gap += max(0.0, c.tpot_ms / workload.tpot_ms - 1)
    if workload.rate:
        gap += max(0.0, 1 - c.requests_per_s / workload.rate)
    return gap


def rank_key(objective: str, workload: Workload) -> Callable[[Ranked], tuple[float, ...]]:
    """The sort key of an objective: smaller is better (target misses first, then the objective's metric:
    fewest GPUs for a rate, end-to-end latency for ``latency``, total tokens/s on the budget otherwise)."""

    def key(c: Ranked) -> tuple[float, ...]:
        miss = shortfall(workload, c)
        e2e = c.ttft_ms + (workload.osl - 1) * c.tpot_ms
        gpus = float(c.gpus_used)
        if workload.rate is not None:
            # Among the fewest GPUs, the lightest load that still serves the rate: its operating point.
            return (miss, gpus, e2e, -c.tokens_per_s_per_gpu)
        if objective == "latency":
            return (miss, e2e, gpus, -c.tokens_per_s_per_gpu)
        # Throughput: the most tokens the budget serves (tokens/s per GPU of the budget, idle ones counting
        # as zero, as AIConfigurator ranks too); among equals the fewest GPUs. Ranking by tokens/s per GPU
        # used would leave GPUs idle for a slightly more efficient but smaller deployment.
        return (miss, -c.tokens_per_s, gpus, e2e)

    return key


class _Rated(Protocol):
    @property
    def tokens_per_s_per_gpu(self) -> float: ...

    @property
    def tokens_per_s_per_user(self) -> float: ...


_RatedT = TypeVar("_RatedT", bound=_Rated)


def pareto_front(candidates: list[_RatedT]) -> list[_RatedT]:
    """Candidates no other beats on both tokens/s/GPU and tokens/s/user, by ascending tokens/s/user."""
    ordered = sorted(candidates, key=lambda c: (-c.tokens_per_s_per_user, -c.tokens_per_s_per_gpu))
    front: list[_RatedT] = []
    best_gpu = -1.0
    for cand in ordered:
        if cand.tokens_per_s_per_gpu > best_gpu:
            front.append(cand)
            best_gpu = cand.tokens_per_s_per_gpu
    return front[::-1]
