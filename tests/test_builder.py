"""The DAG builder: every combination of TP, SP, PP and EP in both phases, checked with networkx.

Each built graph goes through the same invariant checks (acyclic, reductions before use, EP shape,
KV reads and writes in decode, ranks, microbatch isolation, SP only in prefill, forward-only pipeline,
TP placement). Models stay small or the workloads tiny so the whole file runs in seconds.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

import networkx as nx
import pytest
from cli_helpers import run_cli

from shardplan.contracts.arithmetic.feasibility import split_layers
from shardplan.contracts.dag import DAG, CommNode, ComputeNode, StateNode
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import StrategyError
from shardplan.tools.builder.build import build_dag, decode_context
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


# ------------------------------------------------------------------------------ the 15 combinations

# (dimensions, model, GPUs, plain spec). EP regroups a stage's adp x sp x tp GPUs, so "ep=2" alone is read
# as attention data parallelism (adp=2) that supplies the GPUs without adding TP, SP or PP.
COMBINATIONS = [
    ("TP", DENSE, 2, "tp=2"),
    ("SP", DENSE, 2, "sp=2"),
    ("PP", DENSE, 2, "pp=2"),
    ("EP", MOE, 2, "ep=2"),
    ("TP+SP", DENSE, 4, "sp=2,tp=2"),
    ("TP+PP", DENSE, 4, "tp=2,pp=2"),
    ("TP+EP", MOE, 2, "tp=2,ep=2"),
    ("SP+PP", DENSE, 4, "sp=2,pp=2"),
    ("SP+EP", MOE, 2, "sp=2,ep=2"),
    ("PP+EP", MOE, 4, "pp=2,ep=2"),
    ("TP+SP+PP", DENSE, 8, "pp=2,sp=2,tp=2"),
    ("TP+SP+EP", MOE, 4, "sp=2,tp=2,ep=4"),
    ("TP+PP+EP", MOE, 4, "pp=2,tp=2,ep=2"),
    ("SP+PP+EP", MOE, 4, "pp=2,sp=2,ep=2"),
    ("TP+SP+PP+EP", MOE, 8, "pp=2,sp=2,tp=2,ep=2"),
]


def test_the_table_covers_all_15_combinations() -> None:
    dims = {frozenset(dims.split("+")) for dims, *_ in COMBINATIONS}
    assert len(dims) == 15 and frozenset({"TP", "SP", "PP", "EP"}) in dims


def _evidence(dag: DAG, phase: str) -> set[str]:
    """Which of TP, SP, PP, EP the nodes of ``phase`` actually show."""
    nodes = [n for n in dag.nodes if n.phase == phase]
    found = set()
    if any(isinstance(n, ComputeNode) and n.parallel == "row" and len(n.ranks) > 1 for n in nodes):
        found.add("TP")
    if any(isinstance(n, CommNode) and n.purpose == "sp_kv_gather" for n in nodes):
        found.add("SP")
    if any(n.kind == "send" for n in nodes):
        found.add("PP")
    if any(isinstance(n, CommNode) and n.purpose == "ep_dispatch" for n in nodes):
        found.add("EP")
    return found


@pytest.mark.parametrize(("dims", "model", "gpus", "spec"), COMBINATIONS, ids=[c[0] for c in COMBINATIONS])
def test_combination_builds_in_both_phases(dims: str, model: str, gpus: int, spec: str) -> None:
    dag = _build(model, gpus, spec)
    check_all(dag)
    # The builder constructs nodes without validation; the full contract must accept what it made.
    assert DAG.model_validate_json(dag.model_dump_json()).model_dump() == dag.model_dump()
    wanted = set(dims.split("+"))
    assert _evidence(dag, "prefill") == wanted
    # SP exists only in prefill: its GPUs attend to separate sequences in decode (adp).
    assert _evidence(dag, "decode") == wanted - {"SP"}
    if "SP" in wanted:
        assert dag.meta.strategy.decode.sp == 1
        assert dag.meta.strategy.decode.adp == dag.meta.strategy.prefill.adp * dag.meta.strategy.prefill.sp
        assert any("/g1" in n.id for n in dag.nodes if n.phase == "decode")


@pytest.mark.parametrize(("dims", "model", "gpus", "spec"), COMBINATIONS, ids=[c[0] for c in COMBINATIONS])
def test_combination_with_microbatches(dims: str, model: str, gpus: int, spec: str) -> None:
    dag = _build(model, gpus, spec + ",mb=2", Workload(isl=32, osl=8, batch=8))
    check_all(dag)
    assert {n.microbatch for n in dag.nodes if n.kind != "step_boundary"} == {0, 1}


def test_ep_alone_runs_attention_as_data_parallel_groups() -> None:
    assert parse_strategy("ep=2").prefill == PhaseStrategy(adp=2, ep=2)
    assert parse_strategy("pp=2,ep=2").decode == PhaseStrategy(pp=2, adp=2, ep=2)
    assert parse_strategy("tp=2,ep=8").prefill == PhaseStrategy(adp=4, tp=2, ep=8)
    # SP shards count as the stage's GPUs; in decode they become attention groups next to the EP ones.
    assert parse_strategy("sp=2,ep=4").decode == PhaseStrategy(adp=4, ep=4)
    # A spec that names adp, or whose ep fits the stage, is left as written.
    assert parse_strategy("adp=2,ep=4").prefill == PhaseStrategy(adp=2, ep=4)
    assert parse_strategy("tp=4,ep=2").prefill == PhaseStrategy(tp=4, ep=2)


def test_ep_that_does_not_fit_the_stage_says_how_to_write_it() -> None:
    with pytest.raises(StrategyError, match="HIER-1") as caught:
        _build(MOE, 4, "adp=2,ep=4")
    assert "ep=2 is adp=2,ep=2" in (caught.value.fix or "")


@pytest.mark.parametrize(("model", "spec"), [(DENSE, "sp=4"), (MOE, "sp=4,ep=4")])
def test_one_long_prompt_under_colocated_sp_builds_with_idle_decode_groups(model: str, spec: str) -> None:
    from shardplan.validators.validate import validate

    one_prompt = Workload(isl=512, osl=8, batch=1)
    dag = _build(model, 4, spec, one_prompt)
    check_all(dag)
    # Prefill splits the one prompt four ways; decode has four attention groups and one sequence.
    assert {n.shard for n in dag.nodes if n.kind == "attention" and n.phase == "prefill"} == {0, 1, 2, 3}
    report = validate(dag)
    assert report.valid, [v.message for v in report.violations]
    idle = [v for v in report.violations if v.rule == "SP-6"]
    assert len(idle) == 1 and idle[0].severity == "info"
    assert "GPUs [1, 2, 3]" in idle[0].message
    assert idle[0].nodes and all(re.search(r"decode/.*/attention/g[123]$", n) for n in idle[0].nodes)
    # Disaggregated, the decode pool's groups are chosen freely: more groups than sequences is refused.
    with pytest.raises(StrategyError, match="MB-3"):
        _build(model, 8, f"prefill:{spec};decode:adp=4,ep={4 if model == MOE else 1};disagg", one_prompt)


def test_every_node_states_its_category_in_the_json() -> None:
    import json

    dag = _build(MOE, 4, "sp=2,tp=2,ep=2")
    nodes = json.loads(dag.model_dump_json())["nodes"]
    by_kind = {node["kind"]: node["category"] for node in nodes}
    assert by_kind["router"] == by_kind["kv_write"] == by_kind["step_boundary"] == "control"
    assert by_kind["all_to_all"] == by_kind["all_reduce"] == by_kind["all_gather"] == "communication"
    assert by_kind["linear"] == by_kind["attention"] == by_kind["expert"] == "compute"
    assert all("category" in node for node in nodes)
    # Read back, a missing category is derived and a contradicting one is refused.
    raw = json.loads(dag.model_dump_json())
    del raw["nodes"][0]["category"]
    assert DAG.model_validate(raw).nodes[0].category == nodes[0]["category"]
    raw["nodes"][1]["category"] = "communication" if nodes[1]["category"] != "communication" else "compute"
    with pytest.raises(ValueError, match="contradicts kind"):
        DAG.model_validate(raw)


# ------------------------------------------------------------------------- DP, microbatches, disagg


def test_data_parallel_draws_one_replica() -> None:
    dag = _build(DENSE, 8, "dp=2,tp=2,pp=2")
    check_all(dag)
    assert dag.meta.rank_pools == {"prefill": [0, 1, 2, 3], "decode": [0, 1, 2, 3]}
    assert dag.meta.strategy.prefill.dp == 2
    # 4 sequences over 2 replicas: each replica's nodes see 2.
    assert {n.shape["batch"] for n in dag.nodes if n.kind == "attention"} == {2}


def test_microbatches_are_independent_chains_with_their_own_kv() -> None:
    dag = _build(DENSE, 4, "tp=2,pp=2,mb=2")
    graph = check_all(dag)
    writes = [n for n in dag.nodes if n.kind == "kv_write" and n.phase == "decode"]
    assert {w.kv_state.split("/")[2] for w in writes} == {"mb0", "mb1"}
    # Without the step boundaries, the graph falls apart into one chain per phase and microbatch.
    chains = graph.subgraph([n.id for n in dag.nodes if n.kind != "step_boundary"])
    components = list(nx.weakly_connected_components(chains))
    assert len(components) == 2 * 2
    assert all(len({_node(graph, n).microbatch for n in part}) == 1 for part in components)
    # Each microbatch handles half the batch.
    assert {n.shape["batch"] for n in dag.nodes if n.kind == "attention"} == {2}


def test_disaggregated_pools_join_only_through_kv_transfer() -> None:
    dag = _build(DENSE, 6, "prefill:tp=2;decode:tp=4;disagg", gpus_per_node=2)
    graph = check_all(dag)
    assert dag.meta.rank_pools == {"prefill": [0, 1], "decode": [2, 3, 4, 5]}
    transfers = [n for n in dag.nodes if n.kind == "kv_transfer"]
    assert transfers and all(
        t.phase == "handoff" and t.ranks == [0, 1] and t.peers == [2, 3, 4, 5] for t in transfers
    )
    for src, dst in graph.edges():
        a, b = _node(graph, src).phase, _node(graph, dst).phase
        if a != b:
            assert "handoff" in (a, b), f"{src} -> {dst} joins the phases without a KV transfer (DAG-3)"
    # KV-2: every decode KV read depends on a KV transfer.
    for read in (n for n in dag.nodes if n.kind == "kv_read"):
        assert any(t.id in nx.ancestors(graph, read.id) for t in transfers)
    assert transfers[0].scope == "inter_node"


def test_disaggregated_with_pipelines_moves_each_stages_layers() -> None:
    dag = _build(DENSE, 8, "prefill:tp=2,pp=2;decode:tp=2,pp=2;disagg")
    check_all(dag)
    transfers = sorted((n for n in dag.nodes if n.kind == "kv_transfer"), key=lambda n: n.stage)
    assert [(t.ranks, t.peers) for t in transfers] == [([0, 1], [4, 5]), ([2, 3], [6, 7])]


def test_given_layer_split_places_stage_boundaries() -> None:
    dag = _build(DENSE, 4, "tp=2,pp=2,split=20/12")
    check_all(dag)
    assert [len(layers) for layers in dag.meta.stage_layers["decode"]] == [20, 12]
    sends = {n.layer for n in dag.nodes if n.kind == "send"}
    assert sends == {19}
    assert {n.stage for n in dag.nodes if n.layer == 20 and n.kind == "attention"} == {1}


# --------------------------------------------------------------------------- model-specific shapes


def test_deepseek_v3_mla_writes_the_latent_per_token() -> None:
    dag = _build("deepseek-v3", 8, "tp=8,ep=8", Workload(isl=32, osl=8, batch=2))
    check_all(dag)
    writes = [n for n in dag.nodes if n.kind == "kv_write"]
    assert writes
    per_sequence = dag.meta.workload.batch // (dag.meta.strategy.prefill.adp * dag.meta.strategy.prefill.mb)
    for write in writes:
        assert write.bytes / (per_sequence * write.tokens) == (512 + 64) * 2
    # DeepSeek-V3's first three layers are dense, the rest MoE with a shared expert.
    assert not any(n.kind == "router" and n.layer < 3 for n in dag.nodes)
    assert any(n.id.endswith("L3/shared_experts") for n in dag.nodes)


def test_gpt_oss_sliding_layers_cap_attention_at_the_window() -> None:
    spec = _model("gpt-oss-20b")
    assert spec.sliding_window == 128
    workload = Workload(isl=512, osl=64, batch=1)
    dag = build_dag(spec, make_cluster("H100", 1), parse_strategy("tp=1"), workload)
    check_all(dag)
    for node in dag.nodes:
        if node.kind != "attention":
            continue
        full = workload.isl if node.phase == "prefill" else decode_context(workload)
        expected = 128 if spec.layer_types[node.layer] == "sliding" else full
        assert node.shape["kv_len"] == expected, node.id
    reads = {n.layer: n.tokens for n in dag.nodes if n.kind == "kv_read"}
    assert {reads[layer] for layer, kind in enumerate(spec.layer_types) if kind == "sliding"} == {128}
    assert {reads[layer] for layer, kind in enumerate(spec.layer_types) if kind == "full"} == {
        decode_context(workload)
    }


def test_collectives_cross_nodes_only_where_the_layout_does() -> None:
    dag = _build(DENSE, 16, "tp=8,pp=2")
    check_all(dag)
    scopes = defaultdict(set)
    for node in dag.nodes:
        if isinstance(node, CommNode):
            scopes[node.kind].add(node.scope)
    assert scopes["all_reduce"] == {"intra_node"} and scopes["send"] == {"inter_node"}


def test_row_parallel_layers_are_reduced_by_the_right_collective() -> None:
    plain = _build(DENSE, 2, "tp=2")
    sharded = _build(DENSE, 4, "sp=2,tp=2")
    graph = _graph(sharded)
    for dag, kind in ((plain, "all_reduce"), (sharded, "reduce_scatter")):
        reductions = {
            n.id: n
            for n in dag.nodes
            if isinstance(n, CommNode)
            and n.phase == "prefill"
            and n.layer == 0
            and n.purpose in ("tp_reduce", "sp_reduce_scatter")
        }
        assert {n.kind for n in reductions.values()} == {kind}
    # Under SP + TP the token-sharded residual is all-gathered before the next GEMM.
    gathered = [n for n in sharded.nodes if isinstance(n, CommNode) and n.purpose == "sp_gather"]
    assert gathered and all(
        _node(graph, next(iter(graph.successors(g.id)))).kind in ("linear", "router")
        for g in gathered
        if "final_norm" not in g.id
    )


# ------------------------------------------------------------------------------------ refusals


REFUSALS = [
    ("tp=3", DENSE, 3, "tp=3", "TP-3"),
    ("sp-in-decode", DENSE, 2, "prefill:tp=2;decode:sp=2", "SP-1"),
    ("ep-on-dense", DENSE, 2, "tp=2,ep=2", "EP-3"),
    ("product", DENSE, 4, "tp=2", "HIER-2"),
]


@pytest.mark.parametrize(("case", "model", "gpus", "spec", "rule"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_unbuildable_strategies_are_refused_with_the_rule(
    case: str, model: str, gpus: int, spec: str, rule: str
) -> None:
    with pytest.raises(StrategyError, match=rule) as caught:
        _build(model, gpus, spec)
    assert caught.value.field == "strategy" and caught.value.fix


@pytest.mark.parametrize(("case", "model", "gpus", "spec", "rule"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_cli_build_refuses_with_one_line_and_exit_2(
    case: str, model: str, gpus: int, spec: str, rule: str, tmp_path: Path
) -> None:
    out = tmp_path / "dag.json"
    result = run_cli(
        "build", "--model", model, "--gpu", "H100", "--gpus", str(gpus), "--strategy", spec, "-o", str(out)
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and rule in lines[0] and "Traceback" not in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------- rank mapping


def test_rank_layout_places_tp_innermost() -> None:
    layout = RankLayout.of(PhaseStrategy(pp=2, sp=2, tp=2))
    assert layout.replica_size == 8 and layout.stage_size == 4
    assert layout.unit_ranks(stage=0, group=0, shard=1) == [2, 3]
    assert layout.unit_ranks(stage=1, group=0, shard=0) == [4, 5]
    assert layout.stage_ranks(1) == [4, 5, 6, 7]
    assert layout.sp_group_ranks(stage=1, group=0) == [4, 5, 6, 7]


def test_rank_layout_attention_groups_and_replicas() -> None:
    layout = RankLayout.of(PhaseStrategy(dp=2, pp=2, adp=2, tp=2))
    assert layout.unit_ranks(stage=0, group=1, shard=0) == [2, 3]
    assert layout.rank(stage=1, group=1, shard=0, tp_index=1, replica=1) == 8 + 4 + 2 + 1
    assert layout.replica_ranks(1) == list(range(8, 16))
    assert layout.pool() == list(range(16))


def test_rank_layout_expert_groups_regroup_the_stage() -> None:
    layout = RankLayout.of(PhaseStrategy(pp=2, sp=2, tp=4, ep=4))
    assert layout.etp == 2
    assert [layout.expert_ranks(1, e) for e in range(4)] == [[8, 9], [10, 11], [12, 13], [14, 15]]
    # Every expert group nests inside one stage, and together they cover it exactly once (HIER-1).
    assert sorted(r for e in range(4) for r in layout.expert_ranks(1, e)) == layout.stage_ranks(1)


def test_rank_layout_offset_for_a_disaggregated_pool() -> None:
    layout = RankLayout.of(PhaseStrategy(tp=4), offset=4)
    assert layout.unit_ranks(0, 0, 0) == [4, 5, 6, 7] and layout.pool() == [4, 5, 6, 7]


@pytest.mark.parametrize(
    "degrees",
    [
        dict(dp=2, pp=2, adp=2, sp=1, tp=2),
        dict(dp=1, pp=3, adp=1, sp=2, tp=4),
        dict(dp=3, pp=1, adp=4, sp=1, tp=1),
    ],
)
def test_rank_layout_is_a_bijection(degrees: dict[str, int]) -> None:
    layout = RankLayout.of(PhaseStrategy(**degrees))
    positions = [
        (r, s, g, k, t)
        for r in range(layout.dp)
        for s in range(layout.pp)
        for g in range(layout.adp)
        for k in range(layout.sp)
        for t in range(layout.tp)
    ]
    ranks = [layout.rank(s, g, k, t, replica=r) for r, s, g, k, t in positions]
    assert sorted(ranks) == list(range(len(positions)))
