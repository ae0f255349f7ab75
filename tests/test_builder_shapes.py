"""The DAG builder on real model shapes (MLA, sliding windows, multi-node layouts), the strategies it refuses
with the rule they break, and the rank layout (TP innermost, a bijection onto the GPUs).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from builder_checks import DENSE, _build, _graph, _model, _node, check_all
from cli_helpers import run_here

from shardplan.contracts.dag import CommNode
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import StrategyError
from shardplan.tools.builder.build import build_dag, decode_context
from shardplan.tools.builder.ranks import RankLayout
from shardplan.tools.catalogs.gpus import make_cluster

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
    case: str, model: str, gpus: int, spec: str, rule: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dag.json"
    result = run_here(
        capsys, "build", "--model", model, "--gpu", "H100", "--gpus", str(gpus), "--strategy", spec, "-o", str(out)
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
