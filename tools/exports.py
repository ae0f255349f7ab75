"""Views of a parallel strategy DAG: the JSON contract, Mermaid and DOT drawings, a layer-collapsed graph
and a summary of counts.

A full DAG of a large model holds tens of thousands of nodes; :func:`collapse` folds it into one
representative layer per pipeline stage, microbatch 0, the first attention group or sequence shard and
the first expert rank, and records in each kept node's name how many copies it stands for. Drawings of
graphs above :data:`AUTO_COLLAPSE_NODES` nodes are collapsed unless asked otherwise.

All output is deterministic: the same DAG gives the same text, byte for byte.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable

from .contracts.dag import DAG, CommNode, ComputeNode, Edge, StateNode

__all__ = ["AUTO_COLLAPSE_NODES", "to_json", "to_mermaid", "to_dot", "collapse", "summarize", "rank_ranges"]

AUTO_COLLAPSE_NODES = 300
"""Drawings of DAGs with more nodes than this are collapsed when ``collapsed=None``."""

AnyNode = ComputeNode | CommNode | StateNode

_PHASES = ("prefill", "handoff", "decode")
_COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})
_POINT_TO_POINT = frozenset({"send", "recv", "kv_transfer"})
_COPY_SUFFIX = re.compile(r"/[gse]\d+$")

# Fill and stroke colours per node kind: compute blues and greens, communication oranges and reds,
# KV state purples, step boundaries grey.
_COLOURS: dict[str, tuple[str, str]] = {
    "embedding": ("#e0f2fe", "#0369a1"),
    "norm": ("#f1f5f9", "#475569"),
    "linear": ("#dbeafe", "#1d4ed8"),
    "attention": ("#dcfce7", "#15803d"),
    "expert": ("#fef9c3", "#a16207"),
    "router": ("#fde68a", "#92400e"),
    "sampler": ("#e0e7ff", "#4338ca"),
    "elementwise": ("#f8fafc", "#64748b"),
    "all_reduce": ("#fee2e2", "#b91c1c"),
    "all_gather": ("#ffedd5", "#c2410c"),
    "reduce_scatter": ("#fce7f3", "#be185d"),
    "all_to_all": ("#fecaca", "#991b1b"),
    "send": ("#fef3c7", "#b45309"),
    "recv": ("#fef3c7", "#b45309"),
    "kv_transfer": ("#ede9fe", "#6d28d9"),
    "kv_read": ("#f3e8ff", "#7e22ce"),
    "kv_write": ("#f3e8ff", "#7e22ce"),
    "step_boundary": ("#e5e7eb", "#111827"),
}
_DEFAULT_COLOUR = ("#ffffff", "#111827")


# ------------------------------------------------------------------------------------------ JSON


def to_json(dag: DAG) -> str:
    """The DAG as its JSON contract (``DAG.model_validate_json`` reads it back)."""
    return dag.model_dump_json()


# ------------------------------------------------------------------------------------- collapse


def _copy_key(node: AnyNode) -> str:
    """The node's id without microbatch and group/shard/expert-rank parts: copies share this key."""
    key = node.id.replace(f"/mb{node.microbatch}/", "/", 1)
    while _COPY_SUFFIX.search(key):
        key = _COPY_SUFFIX.sub("", key)
    return key


def _layer_span(layers: list[int]) -> str:
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

    >>> from shardplan.tools.models import load_model
    >>> from shardplan.tools.hardware import make_cluster
    >>> from shardplan.tools.contracts import parse_strategy, Workload
    >>> from shardplan.tools.builder import build_dag
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
            name += f" · {_layer_span(members)}"
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


# ---------------------------------------------------------------------------------------- helpers


def rank_ranges(ranks: Iterable[int]) -> str:
    """Ranks as compact ranges.

    >>> rank_ranges([0, 1, 2, 3, 8, 10, 11])
    '0-3,8,10-11'
    """
    values = sorted(set(ranks))
    runs: list[str] = []
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and values[end + 1] == values[end] + 1:
            end += 1
        runs.append(str(values[start]) if start == end else f"{values[start]}-{values[end]}")
        start = end + 1
    return ",".join(runs)


def _resolve(dag: DAG, collapsed: bool | None) -> DAG:
    if collapsed is None:
        collapsed = len(dag.nodes) > AUTO_COLLAPSE_NODES
    return collapse(dag) if collapsed else dag


def _detail(node: AnyNode) -> str:
    """Second label line: what the node is and where it runs."""
    if isinstance(node, ComputeNode):
        plain = node.parallel in ("replicated", "none", node.kind)
        what = node.kind if plain else f"{node.kind} {node.parallel}"
        if node.partial:
            what += " partial"
    elif isinstance(node, CommNode):
        what = node.kind if node.purpose == node.kind else f"{node.kind} {node.purpose}"
        if node.scope == "inter_node":
            what += " inter-node"
        if node.peers:
            arrow = "←" if node.kind == "recv" else "→"
            return f"{what} r{rank_ranges(node.ranks)}{arrow}{rank_ranges(node.peers)}"
    else:
        what = node.kind
    return f"{what} r{rank_ranges(node.ranks)}"


def _sections(dag: DAG) -> dict[str, list[tuple[int | None, list[AnyNode]]]]:
    """Per phase, what to draw in order: opening boundaries and handoff nodes (stage ``None``, outside any
    stage), each pipeline stage, then closing boundaries."""
    opening: dict[str, list[AnyNode]] = defaultdict(list)
    closing: dict[str, list[AnyNode]] = defaultdict(list)
    staged: dict[str, dict[int, list[AnyNode]]] = defaultdict(lambda: defaultdict(list))
    for node in dag.nodes:
        if isinstance(node, StateNode) and node.boundary == "step_end":
            closing[node.phase].append(node)
        elif node.kind == "step_boundary" or node.phase == "handoff":
            opening[node.phase].append(node)
        else:
            staged[node.phase][node.stage].append(node)
    sections: dict[str, list[tuple[int | None, list[AnyNode]]]] = {}
    for phase in _PHASES:
        parts: list[tuple[int | None, list[AnyNode]]] = []
        if opening[phase]:
            parts.append((None, opening[phase]))
        parts.extend((stage, staged[phase][stage]) for stage in sorted(staged[phase]))
        if closing[phase]:
            parts.append((None, closing[phase]))
        if parts:
            sections[phase] = parts
    return sections


def _stage_title(dag: DAG, phase: str, stage: int, nodes: list[AnyNode]) -> str:
    layers = dag.meta.stage_layers.get(phase, [])
    span = _layer_span(layers[stage]) if stage < len(layers) and layers[stage] else "no layers"
    ranks = rank_ranges(r for node in nodes for r in node.ranks)
    return f"stage {stage}: {span}, ranks {ranks}"


def _phase_title(dag: DAG, phase: str) -> str:
    if phase == "handoff":
        return "handoff: KV transfer"
    degrees = dag.meta.strategy.prefill if phase == "prefill" else dag.meta.strategy.decode
    title = f"{phase}: {degrees.to_spec()}"
    if degrees.dp > 1:
        title += f" (1 of {degrees.dp} replicas drawn)"
    return title


def _header(dag: DAG) -> str:
    meta = dag.meta
    view = "collapsed" if meta.collapsed else "full"
    return (
        f"shardplan DAG {meta.model.name} on {meta.gpus}x {meta.gpu}, {meta.strategy.to_spec()}, "
        f"isl={meta.workload.isl} osl={meta.workload.osl} batch={meta.workload.sequences}, {view} view"
    )


# ------------------------------------------------------------------------------------------ Mermaid


def _mermaid_ids(dag: DAG) -> dict[str, str]:
    """Node ids made safe for Mermaid (letters, digits and ``_``; never a keyword), unique in the DAG."""
    ids: dict[str, str] = {}
    used: set[str] = set()
    for node in dag.nodes:
        base = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node.id.replace("+", "plus"))
        safe, suffix = base, 1
        while safe in used:
            suffix += 1
            safe = f"{base}_{suffix}"
        used.add(safe)
        ids[node.id] = safe
    return ids


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def _mermaid_shape(node: AnyNode, label: str) -> str:
    if node.kind == "step_boundary":
        return '{"' + label + '"}'
    if node.kind in ("kv_read", "kv_write"):
        return '[("' + label + '")]'
    if node.kind in _POINT_TO_POINT:
        return '{{"' + label + '"}}'
    if node.kind in _COLLECTIVES:
        return '(["' + label + '"])'
    return '["' + label + '"]'


_MERMAID_ARROWS = {"data": "-->", "pipeline": "==>", "sync": "-.->", "state": "-->|kv|"}


def to_mermaid(dag: DAG, collapsed: bool | None = None) -> str:
    """A Mermaid ``flowchart TD`` of the DAG.

    One subgraph per phase (prefill, handoff, decode), nested per pipeline stage. Shapes by category:
    compute as rectangles, collectives as stadiums, send/recv/KV transfer as hexagons, KV reads and
    writes as cylinders, step boundaries as rhombi; a colour class per node kind. Edges: data ``-->``,
    pipeline ``==>``, sync ``-.->``, state ``-->|kv|``.

    ``collapsed``: True draws :func:`collapse` of the DAG, False every node, None collapses graphs with
    more than :data:`AUTO_COLLAPSE_NODES` nodes.
    """
    dag = _resolve(dag, collapsed)
    ids = _mermaid_ids(dag)
    lines = [f"%% {_header(dag)}", "flowchart TD"]
    for phase, sections in _sections(dag).items():
        lines.append(f'  subgraph sg_{phase}["{_mermaid_text(_phase_title(dag, phase))}"]')
        lines.append("    direction TB")
        for stage, members in sections:
            indent = "    "
            if stage is not None:
                title = _mermaid_text(_stage_title(dag, phase, stage, members))
                lines.append(f'    subgraph sg_{phase}_s{stage}["{title}"]')
                lines.append("      direction TB")
                indent = "      "
            for node in members:
                label = _mermaid_text(node.name) + "<br/>" + _mermaid_text(_detail(node))
                lines.append(f"{indent}{ids[node.id]}{_mermaid_shape(node, label)}")
            if stage is not None:
                lines.append("    end")
        lines.append("  end")
    for edge in dag.edges:
        lines.append(f"  {ids[edge.src]} {_MERMAID_ARROWS[edge.kind]} {ids[edge.dst]}")
    by_kind: dict[str, list[str]] = defaultdict(list)
    for node in dag.nodes:
        by_kind[node.kind].append(ids[node.id])
    for kind in sorted(by_kind):
        fill, stroke = _COLOURS.get(kind, _DEFAULT_COLOUR)
        lines.append(f"  classDef {kind} fill:{fill},stroke:{stroke},color:#111827")
    for kind in sorted(by_kind):
        lines.append(f"  class {','.join(by_kind[kind])} {kind}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- DOT


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_DOT_SHAPES = {"step_boundary": "diamond", "kv_read": "cylinder", "kv_write": "cylinder"}
_DOT_EDGES = {
    "data": "",
    "pipeline": ' [style=bold, penwidth=2.5, color="#b45309"]',
    "sync": " [style=dotted]",
    "state": ' [label="kv", color="#7e22ce", fontcolor="#7e22ce"]',
}


def _dot_node(node: AnyNode) -> str:
    if node.kind in _DOT_SHAPES:
        shape, style = _DOT_SHAPES[node.kind], "filled"
    elif node.kind in _POINT_TO_POINT:
        shape, style = "hexagon", "filled"
    elif node.kind in _COLLECTIVES:
        shape, style = "box", "filled,rounded"
    else:
        shape, style = "box", "filled"
    fill, stroke = _COLOURS.get(node.kind, _DEFAULT_COLOUR)
    label = _dot_quote(f"{node.name}\n{_detail(node)}")
    return (
        f'{_dot_quote(node.id)} [label={label}, shape={shape}, style="{style}", '
        f'fillcolor="{fill}", color="{stroke}"]'
    )


def to_dot(dag: DAG, collapsed: bool | None = None) -> str:
    """A Graphviz DOT digraph of the DAG: a cluster per phase with a cluster per pipeline stage inside,
    shapes and colours by node kind, edge styles by edge kind (as in :func:`to_mermaid`).

    ``collapsed`` as in :func:`to_mermaid`.
    """
    dag = _resolve(dag, collapsed)
    lines = [
        f"// {_header(dag)}",
        "digraph shardplan {",
        "  rankdir=TB;",
        "  compound=true;",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    for phase, sections in _sections(dag).items():
        lines.append(f"  subgraph cluster_{phase} {{")
        lines.append(f"    label={_dot_quote(_phase_title(dag, phase))};")
        lines.append('    style="rounded"; color="#94a3b8";')
        for stage, members in sections:
            indent = "    "
            if stage is not None:
                lines.append(f"    subgraph cluster_{phase}_s{stage} {{")
                lines.append(f"      label={_dot_quote(_stage_title(dag, phase, stage, members))};")
                lines.append('      style="dashed"; color="#cbd5e1";')
                indent = "      "
            for node in members:
                lines.append(f"{indent}{_dot_node(node)};")
            if stage is not None:
                lines.append("    }")
        lines.append("  }")
    for edge in dag.edges:
        lines.append(f"  {_dot_quote(edge.src)} -> {_dot_quote(edge.dst)}{_DOT_EDGES[edge.kind]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ summary


def summarize(dag: DAG) -> dict[str, object]:
    """Counts that describe a DAG at a glance: nodes and edges (per kind and phase), the ranks each phase
    uses, and the communication of one decode step (collectives, point-to-point, how many cross nodes).

    Figures are for the drawn replica, all microbatches.
    """
    meta = dag.meta
    decode_comm = [n for n in dag.nodes if isinstance(n, CommNode) and n.phase == "decode"]
    collectives = [n for n in decode_comm if n.kind in _COLLECTIVES]
    point_to_point = [n for n in decode_comm if n.kind in _POINT_TO_POINT]
    ranks: dict[str, set[int]] = defaultdict(set)
    for node in dag.nodes:
        ranks[node.phase].update(node.ranks)
    return {
        "model": meta.model.name,
        "gpu": meta.gpu,
        "gpus": meta.gpus,
        "gpus_per_node": meta.gpus_per_node,
        "strategy": meta.strategy.to_spec(),
        "workload": {"isl": meta.workload.isl, "osl": meta.workload.osl, "batch": meta.workload.sequences},
        "collapsed": meta.collapsed,
        "nodes": len(dag.nodes),
        "edges": len(dag.edges),
        "nodes_per_kind": dict(sorted(Counter(n.kind for n in dag.nodes).items())),
        "nodes_per_phase": {
            phase: count for phase in _PHASES if (count := sum(1 for n in dag.nodes if n.phase == phase))
        },
        "edges_per_kind": dict(sorted(Counter(e.kind for e in dag.edges).items())),
        "ranks": {phase: sorted(ranks[phase]) for phase in _PHASES if ranks[phase]},
        "stage_layers": {
            phase: [len(layers) for layers in stages] for phase, stages in meta.stage_layers.items()
        },
        "decode_step": {
            "collectives": len(collectives),
            "collectives_inter_node": sum(1 for n in collectives if n.scope == "inter_node"),
            "collectives_per_kind": dict(sorted(Counter(n.kind for n in collectives).items())),
            "point_to_point": len(point_to_point),
            "point_to_point_inter_node": sum(1 for n in point_to_point if n.scope == "inter_node"),
        },
    }
