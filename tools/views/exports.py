"""Views of a parallel strategy DAG: the JSON contract, Mermaid and DOT drawings and a summary of counts.

Drawings of graphs above :data:`AUTO_COLLAPSE_NODES` nodes are collapsed (:func:`shardplan.tools.views.collapse.
collapse`: one representative layer per pipeline stage, each kept node naming how many copies it stands
for) unless asked otherwise; ``collapse`` is re-exported here.

All output is deterministic: the same DAG gives the same text, byte for byte.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, StateNode
from shardplan.text import counted
from shardplan.tools.views.collapse import collapse, layer_span

__all__ = ["AUTO_COLLAPSE_NODES", "to_json", "to_mermaid", "to_dot", "collapse", "summarize", "rank_ranges"]

AUTO_COLLAPSE_NODES = 300
"""Drawings of DAGs with more nodes than this are collapsed when ``collapsed=None``."""

AnyNode = ComputeNode | CommNode | StateNode

_PHASES = ("prefill", "handoff", "decode")
_COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})
_POINT_TO_POINT = frozenset({"send", "recv", "kv_transfer"})

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
    span = layer_span(layers[stage]) if stage < len(layers) and layers[stage] else "no layers"
    ranks = rank_ranges(r for node in nodes for r in node.ranks)
    return f"stage {stage}: {span}, ranks {ranks}"


def _phase_title(dag: DAG, phase: str) -> str:
    if phase == "handoff":
        return "handoff: KV transfer"
    degrees = dag.meta.strategy.prefill if phase == "prefill" else dag.meta.strategy.decode
    title = f"{phase}: {degrees.to_spec()}"
    if degrees.dp > 1:
        title += f" (1 of {counted(degrees.dp, 'replica')} drawn)"
    return title


def _header(dag: DAG) -> str:
    meta = dag.meta
    view = "collapsed" if meta.collapsed else "full"
    return (
        f"shardplan DAG {meta.model.name} on {meta.gpus}x {meta.gpu}"
        + (f" (decode pool {meta.decode_gpu})" if meta.decode_gpu else "")
        + f", {meta.strategy.to_spec()}, "
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
