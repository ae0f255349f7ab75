"""Where replicas and workers go: the GPUs a replica or worker pair occupies and one replica of a deployment.
The node-packing arithmetic itself (which sizes pack, how many fit, where each worker starts) is
:mod:`shardplan.packing`."""

from __future__ import annotations

import math

from shardplan.contracts.hardware import Cluster
from shardplan.contracts.strategy import Strategy

__all__ = ["worker_cluster", "occupied_cluster", "replica_strategy"]


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
