"""Where replicas and workers go: which sizes pack into nodes, how many fit a budget, their own cluster."""

from __future__ import annotations

import math
from functools import lru_cache

from ..contracts.hardware import Cluster
from ..contracts.strategy import Strategy

__all__ = [
    "packs",
    "max_workers",
    "worker_cluster",
    "place_workers",
    "pools_pack",
    "occupied_cluster",
    "replica_strategy",
]


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


def worker_cluster(cluster: Cluster, gpus: int) -> Cluster:
    """The part of ``cluster`` one worker (or one prefill and decode pair, ``Strategy.span`` GPUs) occupies:
    ``gpus`` GPUs on the same GPU and links, inside one node when it fits there, else on whole nodes."""
    if gpus <= cluster.gpus_per_node:
        per_node, nodes = gpus, 1
    else:
        per_node, nodes = cluster.gpus_per_node, -(-gpus // cluster.gpus_per_node)
    return cluster.model_copy(
        update={"gpus_per_node": per_node, "nodes": nodes, "name": f"{cluster.name} ({gpus} of its GPUs)"}
    )


def replica_strategy(strategy: Strategy) -> Strategy:
    """One replica (or one prefill and one decode worker) of a deployment.

    Split pools: every ``dp`` set to 1. Shared GPUs: both phases' ``dp`` divided by the replicas they have in
    common, so a prefill that spans several decode replicas (``prefill:sp=4;decode:dp=4``, SP turning into
    data parallelism in decode) stays one replica of four GPUs with four decode groups inside it.
    """
    if strategy.disaggregated:
        prefill_dp = decode_dp = 1
    else:
        shared = math.gcd(strategy.prefill.dp, strategy.decode.dp)
        prefill_dp, decode_dp = strategy.prefill.dp // shared, strategy.decode.dp // shared
    return Strategy(
        prefill=strategy.prefill.model_copy(update={"dp": prefill_dp}),
        decode=strategy.decode.model_copy(update={"dp": decode_dp}),
        disaggregated=strategy.disaggregated,
    )


def occupied_cluster(cluster: Cluster, strategy: Strategy) -> Cluster:
    """The GPUs ``strategy`` occupies on ``cluster``: the whole cluster when it uses every GPU, else the part
    it sits on (a GPU count is a budget: ``tp=8`` on 16 GPUs is priced on the 8 it uses, as ``plan`` does)."""
    span = strategy.span(cluster.gpus_per_node)
    return cluster if span >= cluster.world_size else worker_cluster(cluster, span)
