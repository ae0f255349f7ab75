"""Where replicas and workers go: which sizes pack into nodes, how many fit a budget, their own cluster."""

from __future__ import annotations

import math

from ..contracts.hardware import Cluster
from ..contracts.strategy import Strategy

__all__ = ["packs", "max_workers", "worker_cluster", "pair_packs", "replica_strategy"]


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


def pair_packs(prefill_gpus: int, decode_gpus: int, per_node: int) -> bool:
    """Whether one prefill worker and one decode worker placed side by side (the DAG draws them so) keep
    each worker whole: both inside one node, or both on whole nodes."""
    if prefill_gpus + decode_gpus <= per_node:
        return True
    return prefill_gpus % per_node == 0 and decode_gpus % per_node == 0


def worker_cluster(cluster: Cluster, gpus: int) -> Cluster:
    """The part of ``cluster`` one worker (or one prefill and decode pair) occupies: ``gpus`` GPUs on the same
    GPU and links, inside one node when it fits there, else on whole nodes."""
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
