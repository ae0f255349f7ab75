"""A layer-collapsed view of a DAG: one representative of each folded set of copies.

A full DAG of a large model holds tens of thousands of nodes; :func:`collapse` folds it into one
representative layer per pipeline stage, microbatch 0, the first attention group or sequence shard and the
first expert rank, and records in each kept node's name how many copies it stands for; where folding cuts a
stage's residual chain, synthetic edges join the drawn layers again. The drawings (:mod:`.exports`) and the
report draw collapsed DAGs.
"""

from __future__ import annotations

import re
from collections import defaultdict

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, Edge, StateNode

__all__ = ["collapse", "layer_span"]

AnyNode = ComputeNode | CommNode | StateNode

_COPY_SUFFIX = re.compile(r"/[gse]\d+$")


def _copy_key(node: AnyNode) -> str:
    """The node's id without microbatch and group/shard/expert-rank parts: copies share this key."""
    key = node.id.replace(f"/mb{node.microbatch}/", "/", 1)
    while _COPY_SUFFIX.search(key):
        key = _COPY_SUFFIX.sub("", key)
    return key


def layer_span(layers: list[int]) -> str:
    """``L3``, ``layers 0-15 (16)``, or for layers that are not consecutive ``layers 0,2,…,22 (12)``."""
    if len(layers) == 1:
        return f"L{layers[0]}"
    if layers[-1] - layers[0] + 1 == len(layers):
        return f"layers {layers[0]}-{layers[-1]} ({len(layers)})"
    shown = layers if len(layers) <= 3 else [layers[0], layers[1], "…", layers[-1]]
    return f"layers {','.join(map(str, shown))} ({len(layers)})"


def _drawn_layers(dag: DAG) -> dict[tuple[str, int], dict[int, list[int]]]:
    """Per phase and stage, the layers a collapsed view draws, each with the layers it stands for: the
    first layer of each kind in the stage, where the kind is the FFN (dense or MoE) and the attention
    (full or sliding window), so DeepSeek-V3's leading dense layers and gpt-oss's sliding layers stay
    visible beside the others."""
    model = dag.meta.model
    drawn: dict[tuple[str, int], dict[int, list[int]]] = {}
    for phase, stages in dag.meta.stage_layers.items():
        for stage, layers in enumerate(stages):
            kinds: dict[tuple[bool, str], list[int]] = {}
            for layer in layers:
                kinds.setdefault((model.is_moe_layer(layer), model.layer_types[layer]), []).append(layer)
            drawn[(phase, stage)] = {members[0]: members for members in kinds.values()}
    return drawn


def collapse(dag: DAG) -> DAG:
    """A layer-collapsed view of ``dag`` for reading and drawing.

    Kept: every node outside layers (boundaries, embedding, head, KV transfer) and the pipeline send/recv
    pairs; per phase and stage only the first layer of the stage (and the first of each other layer kind
    in it: a MoE layer after dense ones, a full-attention layer beside sliding-window ones); of all
    copies of a node only microbatch 0, the first attention group / sequence shard and expert rank 0 (for
    the LM head under SP, the shard that holds the last prompt tokens). A kept node's name says how many
    copies and layers it stands for, e.g. ``experts x64 · layers 3-60 (58)``. Edges between kept nodes
    stay; where folding cut the residual chain of a stage, a synthetic ``data`` edge joins a drawn layer
    to the next drawn layer, or the last one to the stage's hop (send) or to the LM head. The result is
    acyclic and has ``meta.collapsed`` set.

    A DAG that is already collapsed is returned unchanged.

    >>> from shardplan.tools.catalogs.models import load_model
    >>> from shardplan.tools.catalogs.gpus import make_cluster
    >>> from shardplan.contracts.strategy import parse_strategy
    >>> from shardplan.contracts.workload import Workload
    >>> from shardplan.tools.builder.build import build_dag
    >>> dag = build_dag(load_model("llama-3.1-8b"), make_cluster("H100", 4), parse_strategy("tp=2,pp=2"),
    ...                 Workload(isl=512, osl=64))
    >>> small = collapse(dag)
    >>> small.meta.collapsed, len(small.nodes) < len(dag.nodes) // 5
    (True, True)
    """
    if dag.meta.collapsed:
        return dag
    drawn = _drawn_layers(dag)

    def in_scope(node: AnyNode) -> bool:
        if node.kind in ("step_boundary", "kv_transfer", "send", "recv") or node.layer is None:
            return True
        return node.layer in drawn.get((node.phase, node.stage), {})

    # Copies of one node (same phase and key, the key naming the layer): keep the lowest microbatch,
    # then shard, then id.
    copies: dict[tuple[str, str], list[AnyNode]] = defaultdict(list)
    for node in dag.nodes:
        if in_scope(node):
            copies[(node.phase, _copy_key(node))].append(node)
    keep: dict[str, str] = {}
    for group in copies.values():
        chosen = min(group, key=lambda n: (n.microbatch, -1 if n.shard is None else n.shard, n.id))
        keep[chosen.id] = _folded_name(chosen, group, drawn)
    nodes = [node.model_copy(update={"name": keep[node.id]}) for node in dag.nodes if node.id in keep]

    edges: list[Edge] = []
    seen: set[tuple[str, str, str]] = set()

    def add(src: str, dst: str, kind: str) -> None:
        if (src, dst, kind) not in seen:
            seen.add((src, dst, kind))
            edges.append(Edge(src=src, dst=dst, kind=kind))  # type: ignore[arg-type]

    for edge in dag.edges:
        if edge.src in keep and edge.dst in keep:
            add(edge.src, edge.dst, edge.kind)
    for src, dst in _cut_chains(dag, nodes, drawn, keep):
        add(src, dst, "data")
    meta = dag.meta.model_copy(update={"collapsed": True})
    return DAG.model_construct(schema_version=dag.schema_version, meta=meta, nodes=nodes, edges=edges)


def _folded_name(
    node: AnyNode, group: list[AnyNode], drawn: dict[tuple[str, int], dict[int, list[int]]]
) -> str:
    """``name xN`` for N folded copies per microbatch, the microbatches, and the layers it stands for."""
    per_microbatch = sum(1 for other in group if other.microbatch == node.microbatch)
    microbatches = len({other.microbatch for other in group})
    name = node.name + (f" x{per_microbatch}" if per_microbatch > 1 else "")
    if microbatches > 1:
        name += f" · mb x{microbatches}"
    if node.layer is not None and node.kind not in ("send", "recv"):
        members = drawn.get((node.phase, node.stage), {}).get(node.layer, [])
        if len(members) > 1:
            name += f" · {layer_span(members)}"
    return name


def _cut_chains(
    dag: DAG, nodes: list[AnyNode], drawn: dict[tuple[str, int], dict[int, list[int]]], keep: dict[str, str]
) -> list[tuple[str, str]]:
    """Synthetic edges where folding cut a stage's residual chain.

    In each stage, the outputs of a drawn layer (its kept compute and communication nodes that lost
    every consumer) feed the next drawn layer's inputs (its kept nodes that lost a producer in an
    earlier layer); the last drawn layer's outputs feed the kept nodes after the layers that lost their
    producer: the stage's send, or the LM head's final norm.
    """
    by_id = {node.id: node for node in dag.nodes}
    successors: dict[str, list[str]] = defaultdict(list)
    predecessors: dict[str, list[str]] = defaultdict(list)
    for edge in dag.edges:
        successors[edge.src].append(edge.dst)
        predecessors[edge.dst].append(edge.src)
    outputs: dict[tuple[str, int, int | None], list[str]] = defaultdict(list)
    inputs: dict[tuple[str, int, int | None], list[str]] = defaultdict(list)
    for node in nodes:
        where = (node.phase, node.stage)
        if node.kind in ("step_boundary", "kv_transfer") or where not in drawn:
            continue
        lost = [by_id[p] for p in predecessors[node.id] if p not in keep]
        if node.kind in ("send", "recv") or node.layer is None:
            if lost:
                inputs[(*where, None)].append(node.id)
            continue
        if not isinstance(node, StateNode) and not any(s in keep for s in successors[node.id]):
            outputs[(*where, node.layer)].append(node.id)
        if any(p.layer is not None and p.layer < node.layer for p in lost):
            inputs[(*where, node.layer)].append(node.id)
    links: list[tuple[str, str]] = []
    for (phase, stage), layers in drawn.items():
        order: list[int | None] = [*sorted(layers), None]
        for layer, following in zip(order, order[1:], strict=False):
            for src in outputs.get((phase, stage, layer), []):
                links.extend((src, dst) for dst in inputs.get((phase, stage, following), []))
    return links
