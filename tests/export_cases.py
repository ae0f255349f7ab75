"""The DAGs the export tests draw, built once per session, and the snapshot folder they are pinned in."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import networkx as nx

from shardplan.contracts.dag import DAG
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model

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
