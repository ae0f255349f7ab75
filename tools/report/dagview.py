"""The DAG on the page: collapsed per phase, stage and run of identical layers, expandable to every node.

Three views, from coarse to fine:

* a block diagram per phase: one row per pipeline stage, one block per run of consecutive layers with
  the same structure (so DeepSeek's leading dense layers and its MoE layers are separate blocks), plus
  the embedding, the LM head and the KV handoff; clicking a block opens its details;
* per block, a ``<details>`` with the layered drawing and the node list of its representative layer
  (microbatch 0, every shard, group and expert rank);
* the layer-collapsed graph of :func:`~shardplan.tools.views.exports.collapse` (one layer per stage, with every
  edge), drawn as a layered graph.

Nodes are coloured by kind everywhere, with one legend.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, Edge, StateNode
from shardplan.text import counted
from shardplan.tools.report.svg import esc, kind_colour, kind_fill, legend_items, svg_open, text
from shardplan.tools.views.collapse import collapse
from shardplan.tools.views.exports import rank_ranges

__all__ = ["Block", "layer_blocks", "block_diagram_svg", "layered_svg", "dag_section"]

AnyNode = ComputeNode | CommNode | StateNode

_LAYER_PART = re.compile(r"/L\d+/")
_MB_PART = re.compile(r"/mb\d+/")


@dataclass
class Block:
    """A run of consecutive layers of one stage with the same structure, or a part outside the layers."""

    anchor: str
    phase: str
    stage: int
    title: str
    layers: list[int] = field(default_factory=list)
    nodes: list[AnyNode] = field(default_factory=list)
    per_copy: int = 0

    @property
    def kinds(self) -> Counter[str]:
        """Node count per kind in the representative part."""
        return Counter(n.kind for n in self.nodes)


def _role(node: AnyNode) -> str:
    """The node's id inside its layer, without phase, microbatch and layer: ``attention/g1``, ``moe.dispatch``."""
    tail = _MB_PART.split(node.id, maxsplit=1)[-1]
    return _LAYER_PART.split("/" + tail, maxsplit=1)[-1] if node.layer is not None else tail


def _part(node: AnyNode) -> str:
    """For a node outside layers, which part it belongs to: embed, head, boundary or handoff."""
    if node.phase == "handoff":
        return "KV handoff"
    if node.kind == "step_boundary":
        return "boundary"
    tail = _MB_PART.split(node.id, maxsplit=1)[-1]
    return tail.split("/", 1)[0]


def layer_blocks(dag: DAG) -> dict[str, list[list[Block]]]:
    """Per phase, per stage, its blocks in order: embedding or pipeline receive, runs of identical layers,
    LM head or pipeline send.

    Only microbatch 0 is kept (microbatches repeat the same nodes); handoff nodes form one block of
    their own phase. Boundaries are left out. A node of a layer that its stage does not hold (the
    receive of the previous stage's activations) belongs to the part ``pipeline recv``.
    """
    held = {(phase, stage): set(layers) for phase, stages in dag.meta.stage_layers.items()
            for stage, layers in enumerate(stages)}
    by_stage: dict[tuple[str, int], list[AnyNode]] = defaultdict(list)
    for node in dag.nodes:
        if node.microbatch == 0 and node.kind != "step_boundary":
            by_stage[(node.phase, node.stage)].append(node)
    result: dict[str, list[list[Block]]] = {}
    for (phase, stage) in sorted(by_stage, key=lambda k: (("prefill", "handoff", "decode").index(k[0]), k[1])):
        members = by_stage[(phase, stage)]
        blocks: list[Block] = []
        outside: dict[str, list[AnyNode]] = defaultdict(list)
        per_layer: dict[int, list[AnyNode]] = defaultdict(list)
        for node in members:
            if node.layer is not None and node.layer not in held.get((phase, stage), {node.layer}):
                outside["pipeline recv"].append(node)
            elif node.layer is None:
                outside[_part(node)].append(node)
            else:
                per_layer[node.layer].append(node)
        before = [part for part in outside if part in ("embed", "pipeline recv", "KV handoff")]
        after = [part for part in outside if part not in before]
        for part in before:
            blocks.append(Block("", phase, stage, part, nodes=outside[part]))
        run: list[int] = []
        signature: tuple[tuple[str, str], ...] | None = None
        for layer in sorted(per_layer):
            sig = tuple(sorted((_role(n), n.kind) for n in per_layer[layer]))
            if run and sig != signature:
                blocks.append(_layer_block(phase, stage, run, per_layer))
                run = []
            run.append(layer)
            signature = sig
        if run:
            blocks.append(_layer_block(phase, stage, run, per_layer))
        for part in after:
            blocks.append(Block("", phase, stage, part, nodes=outside[part]))
        for index, block in enumerate(blocks):
            block.anchor = f"dag-{phase}-s{stage}-b{index}"
        result.setdefault(phase, []).append(blocks)
    return result


def _layer_block(phase: str, stage: int, run: list[int], per_layer: dict[int, list[AnyNode]]) -> Block:
    title = f"L{run[0]}" if len(run) == 1 else f"L{run[0]}–L{run[-1]}"
    nodes = per_layer[run[0]]
    return Block("", phase, stage, title, layers=list(run), nodes=nodes, per_copy=len(nodes))


def _describe(block: Block) -> str:
    kinds = block.kinds
    if kinds.get("expert"):
        flavour = "MoE"
    elif block.layers:
        flavour = "dense"
    else:
        flavour = ""
    if block.layers:
        return f"{counted(len(block.layers), 'layer')} · {flavour} · {counted(len(block.nodes), 'node')}"
    return counted(len(block.nodes), "node")


# ------------------------------------------------------------------------------------ block diagram


def block_diagram_svg(phase: str, stages: list[list[Block]]) -> str:
    """One phase as rows of clickable blocks (a row per pipeline stage), pipeline hops drawn between rows."""
    bw, bh, gx, gy, left = 150, 50, 14, 22, 70
    width = left + max(len(row) for row in stages) * (bw + gx) + 10
    height = len(stages) * (bh + gy) + 8
    out = [svg_open(width, height, "dag-blocks", f"{phase} blocks per stage")]
    arrow = f"arrow-{phase}"
    out.append(f'<defs><marker id="{arrow}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
               'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#94a3b8"/></marker></defs>')
    previous_last: tuple[float, float] | None = None
    for row, blocks in enumerate(stages):
        y = 4 + row * (bh + gy)
        label = "" if not blocks else "handoff" if blocks[0].phase == "handoff" else f"stage {blocks[0].stage}"
        out.append(text(4, y + bh / 2 + 4, label, size=11, weight="bold"))
        for col, block in enumerate(blocks):
            x = left + col * (bw + gx)
            if col:
                out.append(f'<line x1="{x - gx:.0f}" y1="{y + bh / 2:.0f}" x2="{x - 2:.0f}" y2="{y + bh / 2:.0f}" '
                           f'class="flow" marker-end="url(#{arrow})"/>')
            elif previous_last is not None:
                px, py = previous_last
                out.append(f'<path d="M{px:.0f},{py:.0f} C{px:.0f},{py + gy:.0f} {x + bw / 2:.0f},{y - gy:.0f} '
                           f'{x + bw / 2:.0f},{y - 1:.0f}" class="flow pipeline" marker-end="url(#{arrow})"/>')
            out.append(_block_svg(block, x, y, bw, bh))
            previous_last = (x + bw / 2, y + bh)
    out.append("</svg>")
    return "".join(out)


def _block_svg(block: Block, x: float, y: float, w: float, h: float) -> str:
    kinds = block.kinds
    main = max(kinds, key=kinds.__getitem__) if kinds else "linear"
    parts = [f'<g class="block" data-open="{esc(block.anchor)}" tabindex="0">',
             f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{h:.0f}" rx="6" fill="{kind_fill(main, 0.1)}" '
             f'stroke="{kind_colour(main)}"/>',
             text(x + 8, y + 16, block.title, size=12, weight="bold"),
             text(x + 8, y + 30, _describe(block), size=9, fill="#475569")]
    total = sum(kinds.values()) or 1
    bx = x + 8
    for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
        seg = (w - 16) * count / total
        parts.append(f'<rect x="{bx:.1f}" y="{y + h - 13:.0f}" width="{seg:.1f}" height="6" '
                     f'fill="{kind_colour(kind)}"><title>{esc(kind)}: {count}</title></rect>')
        bx += seg
    parts.append(f"<title>{esc(block.title)}: {esc(_describe(block))} (click for the nodes)</title></g>")
    return "".join(parts)


# ------------------------------------------------------------------------------------ layered drawing


def layered_svg(nodes: Sequence[AnyNode], edges: Sequence[Edge], label: str, *, cap: int = 6,
                open_target: dict[str, str] | None = None) -> str:
    """A left-to-right layered drawing of a small graph: column = longest path from a source.

    Columns with more than ``cap`` nodes show ``cap - 1`` of them and a ``+N more`` box. ``open_target``
    maps node ids to the anchor a click on the node opens.
    """
    ids = {n.id: n for n in nodes}
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    kept = [e for e in edges if e.src in ids and e.dst in ids]
    for e in kept:
        preds[e.dst].append(e.src)
        succs[e.src].append(e.dst)
    depth: dict[str, int] = {}
    waiting = {nid: len(preds[nid]) for nid in ids}
    queue = [nid for nid in ids if waiting[nid] == 0]
    while queue:
        nid = queue.pop(0)
        depth[nid] = max((depth[p] + 1 for p in preds[nid]), default=0)
        for s in succs[nid]:
            waiting[s] -= 1
            if waiting[s] == 0:
                queue.append(s)
    columns: dict[int, list[str]] = defaultdict(list)
    for nid in ids:
        columns[depth.get(nid, 0)].append(nid)
    bw, bh, gx, gy, pad = 138, 34, 34, 10, 8
    row_of: dict[str, float] = {}
    visible: dict[str, tuple[float, float]] = {}
    boxes: list[str] = []
    tallest = 0
    for col in sorted(columns):
        members = sorted(columns[col], key=lambda n: sum(row_of.get(p, 0.0) for p in preds[n]) / max(len(preds[n]), 1))
        shown = members if len(members) <= cap else members[:cap - 1]
        for row, nid in enumerate(shown):
            row_of[nid] = row
            x, y = pad + col * (bw + gx), pad + row * (bh + gy)
            visible[nid] = (x, y)
            boxes.append(_node_svg(ids[nid], x, y, bw, bh, (open_target or {}).get(nid)))
        if len(shown) < len(members):
            hidden = members[len(shown):]
            row_of.update(dict.fromkeys(hidden, float(len(shown))))
            x, y = pad + col * (bw + gx), pad + len(shown) * (bh + gy)
            common = Counter(ids[n].kind for n in hidden).most_common(1)[0][0]
            boxes.append(f'<g class="more"><rect x="{x}" y="{y}" width="{bw}" height="{bh}" rx="5" '
                         f'fill="#f8fafc" stroke="{kind_colour(common)}" stroke-dasharray="4 3"/>'
                         + text(x + bw / 2, y + 21, f"+{len(hidden)} more ({common})", size=10, anchor="middle")
                         + "</g>")
            shown = shown + ["+more"]
        tallest = max(tallest, len(shown))
    width = pad * 2 + (max(columns, default=0) + 1) * (bw + gx) - gx
    height = pad * 2 + tallest * (bh + gy) - gy
    paths = []
    for e in kept:
        if e.src in visible and e.dst in visible:
            (x1, y1), (x2, y2) = visible[e.src], visible[e.dst]
            x1, y1, x2, y2 = x1 + bw, y1 + bh / 2, x2, y2 + bh / 2
            mid = (x1 + x2) / 2
            paths.append(f'<path d="M{x1:.0f},{y1:.0f} C{mid:.0f},{y1:.0f} {mid:.0f},{y2:.0f} {x2:.0f},{y2:.0f}" '
                         f'class="edge {esc(e.kind)}"/>')
    return svg_open(width, height, "dag-graph", label) + "".join(paths) + "".join(boxes) + "</svg>"


def _node_svg(node: AnyNode, x: float, y: float, w: float, h: float, target: str | None) -> str:
    name = node.name if len(node.name) <= 22 else node.name[:21] + "…"
    detail = f"{node.kind} · r{rank_ranges(node.ranks)}"
    if len(detail) > 26:
        detail = detail[:25] + "…"
    attrs = f' data-open="{esc(target)}" tabindex="0"' if target else ""
    return (f'<g class="node"{attrs}><rect x="{x:.0f}" y="{y:.0f}" width="{w}" height="{h}" rx="5" '
            f'fill="{kind_fill(node.kind)}" stroke="{kind_colour(node.kind)}"/>'
            + text(x + 6, y + 14, name, size=10, weight="bold")
            + text(x + 6, y + 27, detail, size=9, fill="#475569")
            + f"<title>{esc(node.id)}\n{esc(_facts(node))}</title></g>")


def _facts(node: AnyNode) -> str:
    where = (f"phase {node.phase}, stage {node.stage}, layer {node.layer}, mb {node.microbatch}, "
             f"ranks {rank_ranges(node.ranks)}")
    if isinstance(node, ComputeNode):
        return f"{node.kind} {node.op} ({node.parallel}); {node.flops:.3g} FLOP, {node.bytes_read:.3g} B read; {where}"
    if isinstance(node, CommNode):
        return f"{node.kind} for {node.purpose}, {node.message_bytes:.3g} B, {node.scope}; {where}"
    return f"{node.kind}, {node.bytes:.3g} B; {where}"


# ------------------------------------------------------------------------------------------ section


def _node_table(block: Block, limit: int = 80) -> str:
    rows = []
    for node in block.nodes[:limit]:
        rows.append(f'<tr><td><span class="dot" style="background:{kind_colour(node.kind)}"></span>{esc(node.kind)}'
                    f"</td><td><code>{esc(node.id)}</code></td><td>{esc(rank_ranges(node.ranks))}</td>"
                    f"<td>{esc(_facts(node).split(';')[0])}</td></tr>")
    more = (f'<tr><td colspan="4">… and {len(block.nodes) - limit} more nodes of this part</td></tr>'
            if len(block.nodes) > limit else "")
    return ('<table class="nodes"><thead><tr><th>kind</th><th>node id</th><th>ranks</th><th>what</th></tr></thead>'
            f"<tbody>{''.join(rows)}{more}</tbody></table>")


def dag_section(dag: DAG) -> str:
    """The DAG part of the report: legend, block diagrams, expandable blocks, and the collapsed graph."""
    blocks = layer_blocks(dag)
    meta = dag.meta
    out = [f'<p class="legend">{legend_items([n.kind for n in dag.nodes])}</p>',
           f"<p class=\"muted\">{counted(len(dag.nodes), 'node', spec=',')} and "
           f"{counted(len(dag.edges), 'edge', spec=',')} in the drawn replica; "
           "microbatch 0 shown (other microbatches repeat it). Click a block to open its nodes.</p>"]
    for phase, stages in blocks.items():
        if phase == "handoff":
            continue
        degrees = meta.strategy.prefill if phase == "prefill" else meta.strategy.decode
        out.append(f'<h3>{esc(phase)} <span class="muted">{esc(degrees.to_spec())} · {degrees.mb} microbatch'
                   f"{'es' if degrees.mb > 1 else ''}</span></h3>")
        rows = stages + (blocks.get("handoff", []) if phase == "prefill" else [])
        out.append(f'<div class="scroll">{block_diagram_svg(phase, rows)}</div>')
        for stage_blocks in rows:
            for block in stage_blocks:
                out.append(_block_details(dag, block))
    small = collapse(dag)
    out.append('<details class="collapsed-graph"><summary>Layer-collapsed graph (one representative layer per '
               "stage, every edge; copies folded into one node)</summary>")
    anchors = _anchor_by_layer(blocks)
    for phase in ("prefill", "handoff", "decode"):
        members = [n for n in small.nodes if n.phase == phase]
        if not members:
            continue
        targets = {n.id: anchors.get((n.phase, n.stage, n.layer), "") for n in members}
        out.append(f"<h4>{esc(phase)}</h4><div class=\"scroll\">"
                   f"{layered_svg(members, small.edges, f'{phase} collapsed graph', open_target=targets)}</div>")
    out.append("</details>")
    return "".join(out)


def _anchor_by_layer(blocks: dict[str, list[list[Block]]]) -> dict[tuple[str, int, int | None], str]:
    anchors: dict[tuple[str, int, int | None], str] = {}
    for stages in blocks.values():
        for stage_blocks in stages:
            for block in stage_blocks:
                layers: list[int | None] = list(block.layers) or [None]
                for layer in layers:
                    anchors.setdefault((block.phase, block.stage, layer), block.anchor)
    return anchors


def _block_details(dag: DAG, block: Block) -> str:
    chips = legend_items(list(block.kinds.elements()))
    counts = ", ".join(f"{count} {kind}" for kind, count in block.kinds.most_common())
    ranks = rank_ranges(r for n in block.nodes for r in n.ranks)
    where = f"{block.phase} · stage {block.stage}"
    drawing = layered_svg(block.nodes, dag.edges, f"{where} {block.title}")
    layers = ""
    if len(block.layers) > 1:
        layers = f" per layer ({counted(len(block.layers), 'layer')} alike; L{block.layers[0]} shown)"
    return (f'<details class="block-details" id="{esc(block.anchor)}"><summary><b>{esc(where)} · {esc(block.title)}'
            f"</b> — {esc(_describe(block))}{esc(layers)}, ranks {esc(ranks)}</summary>"
            f'<p class="legend">{chips}</p><p class="muted">{esc(counts)}</p>'
            f'<div class="scroll">{drawing}</div>{_node_table(block)}</details>')
