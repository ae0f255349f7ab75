"""Drawings of a DAG: Mermaid (deterministic, valid ids, grouped by phase and stage), DOT clusters, automatic
collapse of large graphs, and the text summary."""

from __future__ import annotations

import json
import re

from export_cases import MERMAID_ID, MERMAID_KEYWORDS, _dag, _llama_tp2_pp2, _model, _tiny_llama

from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.views.exports import AUTO_COLLAPSE_NODES, collapse, rank_ranges, summarize, to_dot, to_mermaid

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
