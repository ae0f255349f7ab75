"""Which replica (or decode worker) takes the next request: small named functions, one per routing policy."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shardplan.contracts.simulation import Router
from shardplan.tools.simulation.engine import Engine
from shardplan.tools.simulation.replica import Replica

__all__ = ["round_robin", "least_outstanding", "cache_affinity", "least_loaded_rank", "ROUTES"]

CACHE_THRESHOLD = 0.3
"""Share of a request's prefix a replica must hold for the cache to pick it (SGLang's model gateway, SMG:
``--cache-threshold`` 0.3 by default)."""
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
"""The load is out of balance, and the least loaded replica takes the request whatever it caches, when the busiest
replica has more than 64 requests above the least loaded and more than 1.5 times as many (SMG's
``--balance-abs-threshold`` 64 and ``--balance-rel-threshold`` 1.5 by default)."""


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


def cache_affinity(engines: Sequence[Replica], now: float, group: int, prefix: int) -> int:
    """The replica whose prefix cache holds most of the request's ``prefix`` tokens of ``group``, when it holds at
    least :data:`CACHE_THRESHOLD` of them and the load is in balance; otherwise the least outstanding one (SGLang's
    cache-aware routing, as its model gateway runs it; its fallback is the replica with the smallest cache, the
    least loaded here).

    >>> class Stub:
    ...     def __init__(self, load, held): self.load, self.held = load, held
    ...     def outstanding_at(self, now): return self.load
    ...     def cached_tokens(self, group): return self.held
    >>> holding, idle = Stub(5, 512), Stub(3, 0)
    >>> cache_affinity([idle, holding], 0.0, 7, 1024), cache_affinity([idle, Stub(90, 512)], 0.0, 7, 1024)
    (1, 0)
    """
    loads = [engine.outstanding_at(now) for engine in engines]
    fewest, most = min(loads), max(loads)
    balanced = most - fewest <= BALANCE_ABS_THRESHOLD or most <= BALANCE_REL_THRESHOLD * fewest
    if balanced and group >= 0 and prefix > 0:
        held = [engine.cached_tokens(group) for engine in engines]
        best = max(range(len(engines)), key=lambda index: (held[index], -loads[index]))
        if held[best] >= CACHE_THRESHOLD * prefix:
            return best
    return loads.index(fewest)


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
