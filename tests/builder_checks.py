"""Invariant checks for builder DAGs, shared by the builder test modules.

Each built graph goes through the same checks (acyclic, reductions before use, EP shape, KV reads and writes
in decode, ranks, microbatch isolation, SP only in prefill, forward-only pipeline, TP placement), written with
networkx so they do not share code with the validators they stand beside.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import cache

import networkx as nx

from shardplan.contracts.arithmetic.feasibility import split_layers
from shardplan.contracts.dag import DAG, CommNode, ComputeNode, StateNode
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.builder.ranks import RankLayout
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model

DENSE = "llama-3.1-8b"
MOE = "mixtral-8x7b-v0.1"
SMALL = Workload(isl=64, osl=16, batch=4)

AnyNode = ComputeNode | CommNode | StateNode


@cache
def _model(name: str) -> ModelSpec:
    return load_model(name)


def _build(
    model: str, gpus: int, spec: str, workload: Workload = SMALL, gpus_per_node: int | None = None
) -> DAG:
    return build_dag(_model(model), make_cluster("H100", gpus, gpus_per_node), parse_strategy(spec), workload)


# ---------------------------------------------------------------------------------------- invariants


def _graph(dag: DAG) -> nx.MultiDiGraph:
    graph = nx.MultiDiGraph()
    for node in dag.nodes:
        graph.add_node(node.id, node=node)
    for edge in dag.edges:
        assert edge.src in graph and edge.dst in graph, f"edge {edge.src} -> {edge.dst} names a missing node"
        graph.add_edge(edge.src, edge.dst, kind=edge.kind)
    return graph


def _node(graph: nx.MultiDiGraph, node_id: str) -> AnyNode:
    return graph.nodes[node_id]["node"]


def _phase(dag: DAG, name: str) -> PhaseStrategy:
    return dag.meta.strategy.prefill if name == "prefill" else dag.meta.strategy.decode


def _layout(dag: DAG, name: str) -> RankLayout:
    strategy = dag.meta.strategy
    offset = strategy.prefill.gpus if name == "decode" and strategy.disaggregated else 0
    return RankLayout.of(_phase(dag, name), offset)


def _footprint(node: AnyNode) -> set[int]:
    return set(node.ranks) | set(node.peers if isinstance(node, CommNode) else ())


def check_acyclic_and_unique(dag: DAG, graph: nx.MultiDiGraph) -> None:
    assert len({node.id for node in dag.nodes}) == len(dag.nodes), "node ids repeat"
    assert nx.is_directed_acyclic_graph(graph), nx.find_cycle(graph)


def check_partials_reduced(graph: nx.MultiDiGraph) -> None:
    """A row-parallel partial sum meets a reduction first (TP-2); expert partials may meet combine/scatter."""
    for node_id, data in graph.nodes(data=True):
        node = data["node"]
        if not (isinstance(node, ComputeNode) and node.partial):
            continue
        users = list(graph.successors(node_id))
        assert users, f"partial output of {node_id} is never reduced"
        for user_id in users:
            user = _node(graph, user_id)
            assert isinstance(user, CommNode), f"{user_id} reads the partial sum of {node_id} unreduced"
            reduces = user.kind in ("all_reduce", "reduce_scatter")
            expert_exit = node.kind == "expert" and user.purpose in ("ep_combine", "adp_scatter")
            assert reduces or expert_exit, (
                f"{node_id} -> {user_id} ({user.kind}/{user.purpose}) is no reduction"
            )


def check_reductions_before_residual(graph: nx.MultiDiGraph) -> None:
    """Residual adds and norms read reduced tensors only (TP-4)."""
    for node_id, data in graph.nodes(data=True):
        node = data["node"]
        if isinstance(node, ComputeNode) and node.kind in ("elementwise", "norm"):
            for src in graph.predecessors(node_id):
                producer = _node(graph, src)
                assert not (isinstance(producer, ComputeNode) and producer.partial), (
                    f"{node_id} reads partial {src}"
                )


def check_expert_parallel(dag: DAG, graph: nx.MultiDiGraph) -> None:
    """EP-1, EP-2: router -> dispatch all-to-all -> one expert node per expert rank -> combine all-to-all."""
    for name in ("prefill", "decode"):
        phase, layout = _phase(dag, name), _layout(dag, name)
        dispatches = [
            n for n in dag.nodes if isinstance(n, CommNode) and n.phase == name and n.purpose == "ep_dispatch"
        ]
        moe_layers = [
            layer for layer in range(dag.meta.model.num_layers) if dag.meta.model.is_moe_layer(layer)
        ]
        if phase.ep == 1:
            assert not dispatches
            continue
        assert len(dispatches) == len(moe_layers) * phase.mb
        for dispatch in dispatches:
            assert dispatch.kind == "all_to_all"
            assert dispatch.ranks == layout.stage_ranks(dispatch.stage), "dispatch leaves its stage (EP-2)"
            routers = [_node(graph, p) for p in graph.predecessors(dispatch.id)]
            assert routers and all(r.kind == "router" for r in routers)
            assert len(routers) == phase.adp * phase.sp
            experts = [_node(graph, s) for s in graph.successors(dispatch.id)]
            assert all(e.kind == "expert" for e in experts)
            assert sorted(e.shard for e in experts) == list(range(phase.ep)), (
                "one expert node per expert rank"
            )
            combines = set()
            for expert in experts:
                assert expert.ranks == layout.expert_ranks(expert.stage, expert.shard)
                assert len(expert.ranks) == phase.etp
                assert 1 <= expert.shape["experts"] <= dag.meta.model.moe.num_experts // phase.ep
                out = expert.id
                if phase.etp > 1:
                    (out,) = graph.successors(expert.id)
                    assert _node(graph, out).kind == "all_reduce"
                for user in graph.successors(out):
                    combines.add(user)
            assert len(combines) == 1
            combine = _node(graph, combines.pop())
            assert (combine.kind, combine.purpose) == ("all_to_all", "ep_combine")
            assert combine.ranks == dispatch.ranks and combine.layer == dispatch.layer


def check_kv_and_steps(dag: DAG, graph: nx.MultiDiGraph) -> None:
    """DEC-1, DEC-2, DEC-5, KV-1, PH-1: KV read before decode attention, writes per layer, boundaries wait."""
    model = dag.meta.model
    for name, end in (("prefill", "prefill/end"), ("decode", "decode/step_t+1")):
        phase = _phase(dag, name)
        units = phase.adp * phase.sp
        attention = [n for n in dag.nodes if n.phase == name and n.kind == "attention"]
        writes = [n for n in dag.nodes if n.phase == name and n.kind == "kv_write"]
        samplers = [n for n in dag.nodes if n.phase == name and n.kind == "sampler"]
        assert len(attention) == len(writes) == model.num_layers * phase.mb * units
        assert len(samplers) == phase.mb * phase.adp
        assert len({w.kv_state for w in writes}) == len(writes), "each KV write owns its cache slice (MB-2)"
        feeding = set(graph.predecessors(end))
        assert {n.id for n in writes + samplers} <= feeding, (
            "the boundary must wait for samplers and KV writes"
        )
        for attn in attention:
            kinds = {(_node(graph, p).kind, k["kind"]) for p, _, k in graph.in_edges(attn.id, data=True)}
            if name == "decode":
                assert ("kv_read", "state") in kinds, f"{attn.id} does not read the KV cache"
                assert attn.shape["q_len"] == 1
            else:
                assert not any(kind == "kv_read" for kind, _ in kinds)
        for write in writes:
            assert write.tokens == (1 if name == "decode" else math.ceil(dag.meta.workload.isl / phase.sp))
    assert ("prefill/end", "decode/step_t") in graph.edges or any(
        n.kind == "kv_transfer" for n in dag.nodes
    ), "decode must start after prefill"
    assert _node(graph, "decode/step_t+1").step == 1


def check_ranks(dag: DAG) -> None:
    """HIER-2, DAG-4: each phase uses exactly its replica's GPUs, inside the world."""
    world = dag.meta.gpus
    for name in ("prefill", "decode"):
        phase = _phase(dag, name)
        used = set().union(*(set(n.ranks) for n in dag.nodes if n.phase == name))
        assert used == set(dag.meta.rank_pools[name]) == set(_layout(dag, name).replica_ranks())
        assert len(used) == phase.gpus // phase.dp == phase.replica_gpus
    for node in dag.nodes:
        assert node.ranks and all(0 <= r < world for r in _footprint(node)), node.id


def check_microbatches_isolated(dag: DAG, graph: nx.MultiDiGraph) -> None:
    """MB-1: no edge joins two microbatches, step boundaries and KV transfers aside."""
    exempt = {"step_boundary", "kv_transfer"}
    for src, dst in graph.edges():
        a, b = _node(graph, src), _node(graph, dst)
        if a.kind in exempt or b.kind in exempt:
            continue
        assert a.microbatch == b.microbatch, f"{src} -> {dst} crosses microbatches"


def check_sequence_parallel(dag: DAG) -> None:
    """SP-1, SP-2, SP-3: token shards and their gathers in prefill only, inside one stage."""
    decode = [n for n in dag.nodes if n.phase == "decode"]
    assert not any(isinstance(n, CommNode) and n.purpose.startswith("sp_") for n in decode)
    assert not any(re.search(r"/s\d+$", n.id) for n in decode), "decode has token shards"
    prefill = _phase(dag, "prefill")
    gathers = [n for n in dag.nodes if isinstance(n, CommNode) and n.purpose == "sp_kv_gather"]
    if prefill.sp == 1:
        assert not gathers
        return
    layout = _layout(dag, "prefill")
    assert len(gathers) == dag.meta.model.num_layers * prefill.mb * prefill.adp
    for gather in gathers:
        assert gather.kind == "all_gather"
        assert set(gather.ranks) <= set(layout.stage_ranks(gather.stage)), "SP sync leaves its stage (SP-3)"


def check_pipeline(dag: DAG, graph: nx.MultiDiGraph) -> None:
    """PP-1, PP-2, PP-3: stages of consecutive layers, send/recv at each boundary, edges only s -> s+1."""
    for name in ("prefill", "decode"):
        phase = _phase(dag, name)
        stages = dag.meta.stage_layers[name]
        assert stages == split_layers(dag.meta.model.num_layers, phase.pp, phase.layer_split)
        assert [layer for stage in stages for layer in stage] == list(range(dag.meta.model.num_layers))
        sends = Counter((n.microbatch, n.stage) for n in dag.nodes if n.phase == name and n.kind == "send")
        recvs = Counter((n.microbatch, n.stage) for n in dag.nodes if n.phase == name and n.kind == "recv")
        units = phase.adp * phase.sp
        assert sends == {(mb, s): units for mb in range(phase.mb) for s in range(phase.pp - 1)}
        assert recvs == {(mb, s + 1): units for mb in range(phase.mb) for s in range(phase.pp - 1)}
        for node in dag.nodes:
            if node.phase == name and node.layer is not None and node.kind not in ("recv",):
                assert node.layer in stages[node.stage], (
                    f"{node.id} runs layer {node.layer} on stage {node.stage}"
                )
    for src, dst, data in graph.edges(data=True):
        a, b = _node(graph, src), _node(graph, dst)
        if data["kind"] == "pipeline":
            assert (a.kind, b.kind) == ("send", "recv") and b.stage == a.stage + 1, f"{src} -> {dst}"
            assert a.peers == b.ranks and b.peers == a.ranks
        elif "step_boundary" not in (a.kind, b.kind) and "kv_transfer" not in (a.kind, b.kind):
            assert a.stage == b.stage, f"{src} -> {dst} crosses stages without a pipeline edge"


def check_tp_placement(dag: DAG) -> None:
    """TP-1, TP-5, HIER-1: a TP operator runs on consecutive ranks of one node when tp fits in a node."""
    per_node = dag.meta.gpus_per_node
    for node in dag.nodes:
        if not isinstance(node, ComputeNode) or node.parallel not in ("column", "row", "vocab"):
            continue
        if node.kind == "expert":
            continue
        phase = _phase(dag, node.phase)
        assert len(node.ranks) == phase.tp, node.id
        assert node.ranks == list(range(node.ranks[0], node.ranks[0] + phase.tp))
        if per_node % phase.tp == 0:
            assert len({r // per_node for r in node.ranks}) == 1, f"{node.id} straddles nodes"


def check_data_edges_share_ranks(dag: DAG, graph: nx.MultiDiGraph) -> None:
    """DAG-5: a data edge never joins two nodes whose rank sets are disjoint."""
    for src, dst, data in graph.edges(data=True):
        if data["kind"] == "data":
            assert _footprint(_node(graph, src)) & _footprint(_node(graph, dst)), (
                f"{src} -> {dst} moves data silently"
            )


def check_all(dag: DAG) -> nx.MultiDiGraph:
    graph = _graph(dag)
    check_acyclic_and_unique(dag, graph)
    check_partials_reduced(graph)
    check_reductions_before_residual(graph)
    check_expert_parallel(dag, graph)
    check_kv_and_steps(dag, graph)
    check_ranks(dag)
    check_microbatches_isolated(dag, graph)
    check_sequence_parallel(dag)
    check_pipeline(dag, graph)
    check_tp_placement(dag)
    check_data_edges_share_ranks(dag, graph)
    return graph
