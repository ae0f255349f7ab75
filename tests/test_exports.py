"""Exports of a DAG: JSON round trip, the collapsed view, Mermaid and DOT drawings, the build command.

The Mermaid drawing of Llama-3.1-8B under TP2 x PP2 is pinned in ``tests/snapshots``; a change in the
graph's shape shows up as a diff there. ``SHARDPLAN_UPDATE_SNAPSHOTS=1`` rewrites the snapshot.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path

import networkx as nx
import pytest
from cli_helpers import run_cli
from test_builder import COMBINATIONS

from shardplan.contracts.dag import DAG
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.views.exports import (
    AUTO_COLLAPSE_NODES,
    collapse,
    rank_ranges,
    summarize,
    to_dot,
    to_json,
    to_mermaid,
)

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
MERMAID_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MERMAID_KEYWORDS = {
    "end",
    "graph",
    "subgraph",
    "flowchart",
    "class",
    "classDef",
    "style",
    "click",
    "direction",
}


@cache
def _model(name: str) -> ModelSpec:
    return load_model(name)


@cache
def _dag(model: str, gpus: int, spec: str, isl: int = 512, osl: int = 64, batch: int = 1) -> DAG:
    return build_dag(
        _model(model),
        make_cluster("H100", gpus),
        parse_strategy(spec),
        Workload(isl=isl, osl=osl, batch=batch),
    )


def _llama_tp2_pp2() -> DAG:
    return _dag("llama-3.1-8b", 4, "tp=2,pp=2")


def _tiny_llama() -> DAG:
    """Two layers of Llama-3.1-8B: a DAG small enough to be drawn in full by default."""
    spec = _model("llama-3.1-8b").model_copy(update={"num_layers": 2, "layer_types": ["full", "full"]})
    return build_dag(spec, make_cluster("H100", 2), parse_strategy("tp=2"), Workload(isl=64, osl=8))


def _graph(dag: DAG) -> nx.MultiDiGraph:
    graph = nx.MultiDiGraph()
    graph.add_nodes_from(n.id for n in dag.nodes)
    for edge in dag.edges:
        assert edge.src in graph and edge.dst in graph
        graph.add_edge(edge.src, edge.dst, kind=edge.kind)
    return graph


# ------------------------------------------------------------------------------------------ snapshot


def test_mermaid_snapshot_llama_tp2_pp2() -> None:
    text = to_mermaid(_llama_tp2_pp2(), collapsed=True)
    path = SNAPSHOTS / "llama-3.1-8b_tp2_pp2.mmd"
    if os.environ.get("SHARDPLAN_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no snapshot {path}; run with SHARDPLAN_UPDATE_SNAPSHOTS=1 to create it"
    assert text == path.read_text(), (
        f"the Mermaid drawing changed; if intended, rerun with SHARDPLAN_UPDATE_SNAPSHOTS=1 and review {path}"
    )


# -------------------------------------------------------------------------------------------- JSON


def test_json_export_round_trips_through_the_contract() -> None:
    dag = _dag("mixtral-8x7b-v0.1", 4, "pp=2,tp=2,ep=2", batch=2)
    text = to_json(dag)
    back = DAG.model_validate_json(text)
    assert back.model_dump() == dag.model_dump()
    assert to_json(back) == text
    first = json.loads(text)["nodes"][0]
    assert list(first)[:2] == ["id", "name"], "nodes serialise in contract field order"


def test_collapsed_dag_is_a_valid_contract_too() -> None:
    small = collapse(_llama_tp2_pp2())
    back = DAG.model_validate_json(to_json(small))
    assert back.meta.collapsed and back.model_dump() == small.model_dump()


# ---------------------------------------------------------------------------------------- collapse


def test_collapse_keeps_one_layer_per_stage_and_records_the_folding() -> None:
    dag = _llama_tp2_pp2()
    small = collapse(dag)
    assert small.meta.collapsed and not dag.meta.collapsed
    assert len(small.nodes) * 5 < len(dag.nodes)
    layers = {
        (n.phase, n.layer) for n in small.nodes if n.layer is not None and n.kind not in ("send", "recv")
    }
    assert layers == {("prefill", 0), ("prefill", 16), ("decode", 0), ("decode", 16)}
    names = {n.id: n.name for n in small.nodes}
    assert names["prefill/mb0/L0/attention"] == "attention · layers 0-15 (16)"
    assert names["decode/mb0/L16/o_proj.all_reduce"] == "o_proj.all_reduce · layers 16-31 (16)"
    assert names["decode/mb0/head/sampler"] == "sampler"
    # Send/recv of each stage boundary stay; the whole chain still runs from start to end.
    assert {"prefill/mb0/L15/pp.send", "prefill/mb0/L15/pp.recv"} <= set(names)
    graph = _graph(small)
    assert nx.is_directed_acyclic_graph(graph)
    for start, end in (("prefill/start", "prefill/end"), ("decode/step_t", "decode/step_t+1")):
        phase = start.split("/")[0]
        assert nx.has_path(graph, start, f"{phase}/mb0/head/sampler")
        assert nx.has_path(graph, f"{phase}/mb0/head/sampler", end)
    synthetic = {(e.src, e.dst) for e in small.edges} - {(e.src, e.dst) for e in dag.edges}
    assert synthetic == {
        ("prefill/mb0/L0/ffn.residual_add", "prefill/mb0/L15/pp.send"),
        ("prefill/mb0/L16/ffn.residual_add", "prefill/mb0/head/final_norm"),
        ("decode/mb0/L0/ffn.residual_add", "decode/mb0/L15/pp.send"),
        ("decode/mb0/L16/ffn.residual_add", "decode/mb0/head/final_norm"),
    }
    assert all(e.kind == "data" for e in small.edges if (e.src, e.dst) in synthetic)


def test_collapse_folds_microbatches_shards_and_expert_ranks() -> None:
    dag = _dag("mixtral-8x7b-v0.1", 8, "sp=2,tp=2,ep=4,mb=2,pp=2", isl=64, osl=8, batch=4)
    small = collapse(dag)
    assert {n.microbatch for n in small.nodes} == {0}
    names = {n.id: n.name for n in small.nodes}
    assert names["prefill/mb0/L0/experts/e0"] == "experts x4 · mb x2 · layers 0-15 (16)"
    assert names["prefill/mb0/L0/attention/s0"] == "attention x2 · mb x2 · layers 0-15 (16)"
    assert names["decode/mb0/L16/attention/g0"] == "attention x2 · mb x2 · layers 16-31 (16)"
    assert not any(
        "/e1" in node_id or node_id.endswith("/s1") for node_id in names if "/head/" not in node_id
    )
    # Under SP the LM head runs on the shard holding the last prompt tokens; the view keeps it.
    assert "prefill/mb0/head/lm_head/s1" in names
    graph = _graph(small)
    assert nx.is_directed_acyclic_graph(graph)
    assert nx.has_path(graph, "prefill/start", "prefill/mb0/head/sampler/s1")


def test_collapse_draws_each_layer_kind_of_a_stage() -> None:
    # DeepSeek-V3: three dense layers, then MoE; the view keeps one of each per stage and joins them.
    deepseek = _dag("deepseek-v3", 16, "pp=2,tp=8,ep=8", isl=32, osl=8, batch=2)
    small = collapse(deepseek)
    drawn = sorted(
        {(n.phase, n.layer) for n in small.nodes if n.layer is not None and n.kind not in ("send", "recv")}
    )
    assert drawn == [(phase, layer) for phase in ("decode", "prefill") for layer in (0, 3, 31)]
    names = {n.id: n.name for n in small.nodes}
    assert names["decode/mb0/L0/gate_up_proj"] == "gate_up_proj · layers 0-2 (3)"
    assert names["decode/mb0/L3/experts/e0"] == "experts x8 · layers 3-30 (28)"
    assert names["decode/mb0/L31/moe.dispatch"] == "moe.dispatch · layers 31-60 (30)"
    synthetic = {(e.src, e.dst) for e in small.edges} - {(e.src, e.dst) for e in deepseek.edges}
    assert ("decode/mb0/L0/ffn.residual_add", "decode/mb0/L3/input_norm") in synthetic
    assert ("decode/mb0/L3/ffn.residual_add", "decode/mb0/L30/pp.send") in synthetic
    graph = _graph(small)
    assert nx.is_directed_acyclic_graph(graph)
    assert nx.has_path(graph, "decode/mb0/L0/attention", "decode/mb0/L3/moe.dispatch")
    # gpt-oss alternates sliding-window and full attention: both stay, the sliding one capped.
    oss = collapse(_dag("gpt-oss-20b", 2, "tp=2", isl=512, osl=8))
    attention = {
        n.name: n.shape["kv_len"] for n in oss.nodes if n.kind == "attention" and n.phase == "prefill"
    }
    assert attention == {"attention · layers 0,2,…,22 (12)": 128, "attention · layers 1,3,…,23 (12)": 512}


@pytest.mark.parametrize(("dims", "model", "gpus", "spec"), COMBINATIONS, ids=[c[0] for c in COMBINATIONS])
def test_collapse_of_every_combination_is_acyclic_and_connected(
    dims: str, model: str, gpus: int, spec: str
) -> None:
    dag = _dag(model, gpus, spec, isl=64, osl=8, batch=4)
    small = collapse(dag)
    graph = _graph(small)
    assert nx.is_directed_acyclic_graph(graph)
    assert len(small.nodes) < len(dag.nodes)
    samplers = [n.id for n in small.nodes if n.kind == "sampler"]
    assert len(samplers) == 2
    for sampler in samplers:
        start, end = (
            ("prefill/start", "prefill/end")
            if sampler.startswith("prefill")
            else ("decode/step_t", "decode/step_t+1")
        )
        assert nx.has_path(graph, start, sampler) and nx.has_path(graph, sampler, end), sampler
    assert collapse(small) is small


# ----------------------------------------------------------------------------------------- Mermaid


def _mermaid_nodes(text: str) -> list[str]:
    return re.findall(r"^\s+(\S+?)(?:\[|\(|\{)", text, flags=re.M)


def _mermaid_edges(text: str) -> list[tuple[str, str, str]]:
    return re.findall(r"^\s+(\S+) (-->\|kv\||-->|==>|-\.->) (\S+)$", text, flags=re.M)


def test_mermaid_is_deterministic() -> None:
    first = to_mermaid(_dag("mixtral-8x7b-v0.1", 4, "pp=2,tp=2,ep=2", batch=2))
    second = to_mermaid(
        build_dag(
            _model("mixtral-8x7b-v0.1"),
            make_cluster("H100", 4),
            parse_strategy("pp=2,tp=2,ep=2"),
            Workload(isl=512, osl=64, batch=2),
        )
    )
    assert first == second


def test_mermaid_ids_are_sanitised_and_every_node_and_edge_is_drawn() -> None:
    small = collapse(_llama_tp2_pp2())
    text = to_mermaid(small)
    assert text.splitlines()[1] == "flowchart TD"
    ids = [i for i in _mermaid_nodes(text) if not i.startswith("sg_")]
    assert len(ids) == len(set(ids)) == len(small.nodes)
    for node_id in ids:
        assert MERMAID_ID.match(node_id) and node_id not in MERMAID_KEYWORDS, node_id
    assert "n_decode_step_tplus1" in ids  # '+', '/' and '.' never reach Mermaid
    edges = _mermaid_edges(text)
    assert len(edges) == len(small.edges)
    arrows = {"data": "-->", "pipeline": "==>", "sync": "-.->", "state": "-->|kv|"}
    for kind, arrow in arrows.items():
        assert sum(1 for _, a, _ in edges if a == arrow) == sum(1 for e in small.edges if e.kind == kind)


def test_mermaid_groups_phases_and_stages_and_shapes_by_category() -> None:
    dag = _dag("llama-3.1-8b", 8, "prefill:tp=2,pp=2;decode:tp=4;disagg", batch=1)
    text = to_mermaid(dag, collapsed=True)
    for subgraph in (
        "sg_prefill",
        "sg_prefill_s0",
        "sg_prefill_s1",
        "sg_handoff",
        "sg_decode",
        "sg_decode_s0",
    ):
        assert f"subgraph {subgraph}[" in text
    assert text.count("subgraph ") == text.count("\n    end\n") + text.count("\n  end\n")
    assert 'n_prefill_start{"' in text  # step boundary: rhombus
    assert 'n_decode_mb0_L0_kv_read[("' in text  # KV state: cylinder
    assert 'n_decode_mb0_L0_o_proj_all_reduce(["' in text  # collective: stadium
    assert 'n_prefill_mb0_L15_pp_send{{"' in text  # point to point: hexagon
    assert 'n_handoff_kv_transfer_stage0{{"' in text
    assert 'n_decode_mb0_L0_attention["' in text  # compute: rectangle
    assert "classDef all_reduce " in text and re.search(
        r"^  class \S*n_decode_mb0_L0_attention\S* attention$", text, flags=re.M
    )


def test_drawings_collapse_automatically_only_when_large() -> None:
    big = _llama_tp2_pp2()
    assert len(big.nodes) > AUTO_COLLAPSE_NODES
    assert to_mermaid(big) == to_mermaid(big, collapsed=True) != to_mermaid(big, collapsed=False)
    assert to_dot(big) == to_dot(big, collapsed=True)
    tiny = _tiny_llama()
    assert len(tiny.nodes) <= AUTO_COLLAPSE_NODES
    assert to_mermaid(tiny) == to_mermaid(tiny, collapsed=False)
    assert len([i for i in _mermaid_nodes(to_mermaid(tiny)) if not i.startswith("sg_")]) == len(tiny.nodes)


# --------------------------------------------------------------------------------------------- DOT


def test_dot_has_clusters_per_phase_and_stage_and_every_node_and_edge() -> None:
    small = collapse(_llama_tp2_pp2())
    text = to_dot(small)
    assert text == to_dot(collapse(_llama_tp2_pp2()))
    assert text.count("{") == text.count("}")
    for cluster in ("cluster_prefill", "cluster_prefill_s0", "cluster_prefill_s1", "cluster_decode_s1"):
        assert f"subgraph {cluster} {{" in text
    defined = re.findall(r'^\s+("(?:[^"\\]|\\.)*") \[label=', text, flags=re.M)
    assert sorted(json.loads(d) for d in defined) == sorted(n.id for n in small.nodes)
    assert len(re.findall(r"^\s+\"[^\"]+\" -> \"[^\"]+\"", text, flags=re.M)) == len(small.edges)
    assert '"prefill/mb0/L15/pp.send" -> "prefill/mb0/L15/pp.recv" [style=bold' in text
    assert '"decode/step_t" [label="decode step t\\nstep_boundary r0-3", shape=diamond' in text


# ----------------------------------------------------------------------------------------- summary


def test_summary_counts_match_the_graph() -> None:
    dag = _dag("llama-3.1-8b", 16, "tp=8,pp=2", isl=64, osl=8)
    facts = summarize(dag)
    assert facts["nodes"] == len(dag.nodes) and facts["edges"] == len(dag.edges)
    assert sum(facts["nodes_per_kind"].values()) == sum(facts["nodes_per_phase"].values()) == len(dag.nodes)
    assert facts["ranks"] == {"prefill": list(range(16)), "decode": list(range(16))}
    step = facts["decode_step"]
    # 32 layers x 2 all-reduces, the embedding's all-reduce and the LM head's gather; TP stays in a node.
    assert step["collectives"] == 32 * 2 + 2 and step["collectives_inter_node"] == 0
    assert step["point_to_point"] == 2 and step["point_to_point_inter_node"] == 2


def test_rank_ranges() -> None:
    assert rank_ranges([3, 1, 2, 0, 7]) == "0-3,7"
    assert rank_ranges([5]) == "5" and rank_ranges([]) == ""


# ------------------------------------------------------------------------------------ the command


def test_cli_build_writes_a_dag_file_that_validates(tmp_path: Path) -> None:
    out = tmp_path / "dag.json"
    result = run_cli(
        "build",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "H100",
        "--gpus",
        "4",
        "--strategy",
        "tp=2,pp=2",
        "--isl",
        "512",
        "--osl",
        "64",
        "-o",
        str(out),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["written"] == str(out) and summary["format"] == "json"
    dag = DAG.model_validate_json(out.read_text())
    assert dag.model_dump() == _llama_tp2_pp2().model_dump()
    assert summary["nodes"] == len(dag.nodes) and summary["decode_step"]["collectives"] == 66
    assert [p.name for p in tmp_path.iterdir()] == ["dag.json"], "no temporary file is left behind"


def test_cli_build_prints_mermaid_and_infers_the_format_from_the_suffix(tmp_path: Path) -> None:
    args = [
        "build",
        "-m",
        "llama-3.1-8b",
        "--gpu",
        "H100",
        "--gpus",
        "4",
        "-s",
        "tp=2,pp=2",
        "--isl",
        "512",
        "--osl",
        "64",
    ]
    printed = run_cli(*args, "--format", "mermaid")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == (SNAPSHOTS / "llama-3.1-8b_tp2_pp2.mmd").read_text()
    written = run_cli(*args, "-o", str(tmp_path / "dag.dot"), "--full")
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "dag.dot").read_text() == to_dot(_llama_tp2_pp2(), collapsed=False)


def test_cli_build_summary_and_cluster_file() -> None:
    cluster = Path(__file__).resolve().parents[1] / "tools" / "data" / "clusters" / "h100-2x8-ib.yaml"
    result = run_cli(
        "build",
        "-m",
        "llama-3.1-8b",
        "--cluster",
        str(cluster),
        "-s",
        "tp=8,pp=2",
        "--isl",
        "64",
        "--osl",
        "8",
    )
    assert result.returncode == 0, result.stderr
    assert "16x H100" in result.stdout and "2 send/recv, 2 cross nodes" in result.stdout
    half = run_cli(
        "build",
        "-m",
        "llama-3.1-8b",
        "--cluster",
        str(cluster),
        "--gpus",
        "8",
        "-s",
        "tp=8",
        "--isl",
        "64",
        "--osl",
        "8",
        "--json",
    )
    assert half.returncode == 0, half.stderr
    assert json.loads(half.stdout)["gpus"] == 8


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu", "H100", "--gpus", "4", "--isl", "0"],
        ["--gpu", "H100"],
        ["--gpu", "H999", "--gpus", "4"],
        ["--gpu", "H100", "--gpus", "4", "--format", "svg"],
        ["--gpu", "H100", "--gpus", "4", "-o", "/no/such/folder/dag.json"],
    ],
    ids=["isl", "no-gpu-count", "unknown-gpu", "format", "folder"],
)
def test_cli_build_bad_options_give_one_line_and_exit_2(args: list[str]) -> None:
    result = run_cli("build", "-m", "llama-3.1-8b", "-s", "tp=2,pp=2", *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
