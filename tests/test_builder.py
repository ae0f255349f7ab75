"""The DAG builder: every combination of TP, SP, PP and EP in both phases, checked with networkx.

Each built graph goes through the invariant checks of :mod:`builder_checks`; model-specific shapes, refusals
and the rank mapping are in :mod:`test_builder_shapes`. Models stay small or the workloads tiny so the whole
file runs in seconds.
"""

from __future__ import annotations

import re

import networkx as nx
import pytest
from builder_checks import DENSE, MOE, _build, _node, check_all

from shardplan.contracts.dag import DAG, CommNode, ComputeNode
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import StrategyError

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
