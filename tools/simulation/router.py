"""Which replica (or decode worker) takes the next request: small named functions, one per routing policy."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shardplan.contracts.simulation import Router
from shardplan.tools.simulation.engine import Engine, Replica

__all__ = ["round_robin", "least_outstanding", "least_loaded_rank", "ROUTES"]


def round_robin(engines: Sequence[Replica], now: float, turn: int) -> int:
    """The engines in turn: the ``turn``-th request goes to engine ``turn mod len(engines)``.

    >>> round_robin([None, None, None], 0.0, 7)  # type: ignore[list-item]
    1
    """
    return turn % len(engines)


def least_outstanding(engines: Sequence[Replica], now: float, turn: int) -> int:
    """The engine with the fewest requests routed to it and not finished by ``now``; the first on a tie."""
    best, fewest = 0, engines[0].outstanding_at(now)
    for index in range(1, len(engines)):
        count = engines[index].outstanding_at(now)
        if count < fewest:
            best, fewest = index, count
    return best


def least_loaded_rank(ranks: Sequence[Engine]) -> int:
    """The attention data-parallel rank of a replica with the lowest ``4 x waiting + running``, the first on a
    tie: vLLM's data-parallel load balancer, which weighs a waiting request four times a running one (it reads
    counts the ranks publish every 100 ms; the simulation reads them exact)."""
    best, lowest = 0, 4 * len(ranks[0].waiting) + ranks[0].running
    for index in range(1, len(ranks)):
        score = 4 * len(ranks[index].waiting) + ranks[index].running
        if score < lowest:
            best, lowest = index, score
    return best


ROUTES: dict[Router, Callable[[Sequence[Replica], float, int], int]] = {
    "round_robin": round_robin,
    "least_outstanding": least_outstanding,
}
"""Each router of :data:`shardplan.contracts.simulation.Router` by name."""
