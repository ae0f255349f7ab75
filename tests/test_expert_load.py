"""The roofline's routed-expert factor: the busiest rank's load everywhere, the fused kernel's per-rank EP cost only
where every rank's kernel sees every token (tensor-parallel attention), none without expert parallelism."""

from __future__ import annotations

import math

from shardplan.contracts.dag import ComputeNode
from shardplan.contracts.strategy import parse_strategy
from shardplan.tools.catalogs.gpus import gpu_catalog, make_cluster
from shardplan.tools.cost.op_time import expert_load_factor, node_time_s
from shardplan.tools.cost.pricing import Pricer
from shardplan.tools.cost.profiles import profile_for


def test_one_expert_rank_has_no_factor() -> None:
    gpu = gpu_catalog()["H200"]
    assert expert_load_factor(1, gpu) == 1.0
    assert expert_load_factor(1, gpu, dispatched=False) == 1.0


def test_the_fused_kernel_overhead_comes_on_top_of_the_load_only_without_a_dispatch() -> None:
    gpu = gpu_catalog()["H200"]
    moe = profile_for(gpu).moe
    assert moe.ep_overhead_per_doubling > 0.0  # the balanced rows of the H200 tables scale worse than 1/ep
    load = 1.0 + moe.imbalance_per_doubling * 3
    assert math.isclose(expert_load_factor(8, gpu), load)
    assert math.isclose(expert_load_factor(8, gpu, dispatched=False), load * (1.0 + moe.ep_overhead_per_doubling * 3))
    assert math.isclose(expert_load_factor(8, gpu, dispatched=False, skewed=False),
                        1.0 + moe.ep_overhead_per_doubling * 3)


def _experts_node() -> ComputeNode:
    return ComputeNode(id="l3/experts/e0", name="experts", phase="decode", ranks=[0], kind="expert",
                       op="routed_experts", dtype="fp8", shape={"m": 64, "n": 7168, "k": 2048, "experts": 30},
                       flops=2.0 * 64 * 3 * 7168 * 2048, bytes_read=30 * 3 * 7168 * 2048.0,
                       bytes_written=64 * 7168 * 2.0)


def test_the_pricer_charges_the_overhead_to_tensor_parallel_attention_only() -> None:
    cluster = make_cluster("H200", 8)
    node = _experts_node()
    plain = node_time_s(node, cluster)
    for strategy, dispatched in (("tp=8,ep=8", False), ("adp=8,ep=8", True)):
        pricer = Pricer(cluster, phases={"decode": parse_strategy(strategy).decode})
        expected = plain * expert_load_factor(8, cluster.gpu, dispatched=dispatched)
        assert math.isclose(pricer.node_time_s(node), expected), strategy
