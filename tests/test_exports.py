"""Exports of a DAG: the pinned snapshot, the JSON round trip and the collapsed view.

The Mermaid drawing of Llama-3.1-8B under TP2 x PP2 is pinned in ``tests/snapshots``; a change in the
graph's shape shows up as a diff there. ``SHARDPLAN_UPDATE_SNAPSHOTS=1`` rewrites the snapshot. The drawings
are tested in :mod:`test_export_drawings`, the ``build`` command in :mod:`test_cli_build`.
"""

from __future__ import annotations

import json
import os

import networkx as nx
import pytest
from export_cases import SNAPSHOTS, _dag, _graph, _llama_tp2_pp2
from test_builder import COMBINATIONS

from shardplan.contracts.dag import DAG
from shardplan.tools.views.exports import collapse, to_json, to_mermaid

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
