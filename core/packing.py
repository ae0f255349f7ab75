"""Packing workers into nodes: plain integer arithmetic, no contracts, so the strategy contract (where the DAG
draws a split deployment's decode pool) and the serving model (which sizings fit a budget) share one rule:
a worker sits inside one node, or on whole nodes of its own.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["packs", "max_workers", "place_workers", "pools_pack"]


def packs(gpus: int, per_node: int) -> bool:
    """Whether a worker of ``gpus`` GPUs sits on nodes of ``per_node`` without splitting one unevenly:
    inside one node, or on whole nodes.

    >>> packs(2, 3), packs(4, 3), packs(6, 3)
    (True, False, True)
    """
    return gpus <= per_node or gpus % per_node == 0


def max_workers(budget: int, per_node: int, gpus: int) -> int:
    """How many workers of ``gpus`` GPUs fit on ``budget`` GPUs of ``per_node``-GPU nodes, none split
    across nodes (a worker smaller than a node stays inside one).

    >>> max_workers(12, 3, 2), max_workers(16, 8, 8), max_workers(16, 8, 3)
    (4, 2, 4)
    """
    if gpus > per_node:
        return budget // gpus if gpus % per_node == 0 else 0
    full, rest = divmod(budget, per_node)
    return full * (per_node // gpus) + rest // gpus


def place_workers(workers: list[tuple[int, int]], budget: int, per_node: int) -> list[list[int]] | None:
    """First GPU of every worker of pools of ``(count, gpus)`` workers on ``budget`` GPUs of ``per_node``-GPU
    nodes, each worker inside one node or on whole nodes of its own; one list per pool, in the given order.
    None when they do not fit.

    Workers go first fit in the pools' order (the prefill pool first, as the DAG draws it), or, when that
    leaves one out, largest first. Two 4-GPU prefill workers share a node beside an 8-GPU decode worker; two
    3-GPU workers and a 2-GPU worker do not fit two 4-GPU nodes, though 8 GPUs is the budget.

    >>> place_workers([(2, 4), (1, 8)], 16, 8), place_workers([(2, 3), (1, 2)], 8, 4)
    ([[0, 4], [8]], None)
    """
    given = list(range(len(workers)))
    for order in (given, sorted(given, key=lambda i: -workers[i][1])):
        starts = _first_fit(workers, order, budget, per_node)
        if starts is not None:
            return starts
    return None


def _first_fit(workers: list[tuple[int, int]], order: list[int], budget: int, per_node: int) -> list[list[int]] | None:
    nodes = -(-budget // per_node)
    used = [0] * nodes
    room = [min(per_node, budget - n * per_node) for n in range(nodes)]
    starts: list[list[int]] = [[] for _ in workers]
    for pool in order:
        count, gpus = workers[pool]
        for _ in range(count):
            if gpus > per_node:
                whole = gpus // per_node
                empty = {n for n in range(nodes) if used[n] == 0 and room[n] == per_node}
                run = next((n for n in sorted(empty) if all(n + k in empty for k in range(whole))), None)
                if gpus % per_node or run is None:
                    return None
                for k in range(whole):
                    used[run + k] = per_node
                starts[pool].append(run * per_node)
                continue
            node = next((n for n in range(nodes) if room[n] - used[n] >= gpus), None)
            if node is None:
                return None
            starts[pool].append(node * per_node + used[node])
            used[node] += gpus
    return starts


@lru_cache(maxsize=4096)
def pools_pack(workers: tuple[tuple[int, int], ...], budget: int, per_node: int) -> bool:
    """Whether pools of ``(count, gpus)`` workers all fit (see :func:`place_workers`); memoised, since the search
    asks the same sizings for every batch of a pair of layouts.

    >>> pools_pack(((2, 4), (1, 8)), 16, 8), pools_pack(((1, 4), (2, 8)), 16, 8)
    (True, False)
    """
    return place_workers(list(workers), budget, per_node) is not None
