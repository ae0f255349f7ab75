"""Where replicas and workers go: the GPUs a replica or worker pair occupies and one replica of a deployment.
The node-packing arithmetic itself (which sizes pack, how many fit, where each worker starts) is
:mod:`shardplan.packing`."""

from __future__ import annotations

import math

from shardplan.contracts.hardware import Cluster
from shardplan.contracts.strategy import Strategy
from shardplan.packing import pools_pack

__all__ = ["worker_cluster", "occupied_cluster", "replica_strategy", "split_pools_fit"]


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
    it sits on (a GPU count is a budget: ``tp=8`` on 16 GPUs is priced on the 8 it uses, as ``plan`` does). On two
    GPU types, the nodes of its prefill worker and of its decode worker, each pool's part of them."""
    span = strategy.span(cluster.gpus_per_node, apart=cluster.mixed)
    if cluster.decode_pool is None:
        return cluster if span >= cluster.world_size else worker_cluster(cluster, span)
    # Two GPU types: the pair spans nodes of both types (more than a budget inside one node holds), and its decode
    # pool is the nodes from the decode worker's first one on.
    used = cluster if span == cluster.world_size else worker_cluster(cluster, span)
    start = strategy.decode_offset(cluster.gpus_per_node, apart=True)
    pool = cluster.decode_pool.model_copy(update={"gpus": used.world_size - start})
    return used.model_copy(update={"decode_pool": pool})


def split_pools_fit(cluster: Cluster, prefill: tuple[int, int], decode: tuple[int, int], budget: int) -> bool:
    """Whether ``(workers, GPUs each)`` prefill and decode pools fit ``budget`` GPUs of ``cluster``'s nodes, no
    worker split across nodes. One GPU type: both pools share the nodes (:func:`~shardplan.packing.pools_pack`).
    Two types: each pool packs on nodes of its own type, within its share of the budget
    (:meth:`~shardplan.contracts.hardware.Cluster.pool_budget`), and the GPUs of both stay within ``budget``;
    GPUs are counted, not nodes, as for one type (a pool's partly filled node leaves its other GPUs idle).

    >>> from shardplan.tools.catalogs.gpus import make_cluster, with_decode_pool
    >>> mixed = with_decode_pool(make_cluster("H200", 16), "H100", 8)
    >>> split_pools_fit(mixed, (2, 4), (1, 8), 16), split_pools_fit(mixed, (1, 4), (3, 4), 16)
    (True, False)
    """
    per_node = cluster.gpus_per_node
    if not cluster.mixed:
        return pools_pack((prefill, decode), budget, per_node)
    return (
        prefill[0] * prefill[1] + decode[0] * decode[1] <= budget
        and pools_pack((prefill,), min(budget, cluster.pool_budget("prefill")), per_node)
        and pools_pack((decode,), min(budget, cluster.pool_budget("decode")), per_node)
    )
