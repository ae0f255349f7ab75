"""The simulated schedule, seen per GPU: an SVG timeline per phase and a Chrome/Perfetto trace.

Both come from :func:`~shardplan.tools.cost.schedule.schedule_dag`, the scheduler the cost model uses,
so what the page and the trace show is what the figures were computed from. A node's lane (compute or
communication stream) is read from the schedule itself: the stream whose busy list holds the node's
interval. Nodes that occupy no stream (a receive waiting for its send, KV reads, step boundaries) go to
a third lane, ``wait``.

GPUs whose timelines are identical (the ranks of one TP group) share one row, and bars closer than a
pixel merge, so the page stays light for graphs of tens of thousands of nodes: the decode step is drawn
node by node while it fits the bar budget, prefill is summarised at pixel resolution.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from shardplan.contracts.dag import DAG
from shardplan.contracts.dag_roles import BOUNDARY_ROLES, BoundaryRole, step_boundaries
from shardplan.contracts.plan import Plan
from shardplan.text import counted
from shardplan.tools.cost.schedule import Schedule, busy_overlap, schedule_dag
from shardplan.tools.report.svg import esc, fmt_ms, kind_colour, legend_items, nice_ticks, svg_open, text
from shardplan.tools.views.exports import rank_ranges

__all__ = ["PhaseWindow", "Bar", "planned_schedule", "phase_windows", "node_lanes", "gpu_time_breakdown",
           "merge_bars", "timeline_svg", "timeline_legend", "trace_events"]

LANES = ("compute", "comm", "wait")
_PHASE_BOUNDS: dict[str, tuple[BoundaryRole, BoundaryRole]] = {
    "prefill": ("prefill_start", "prefill_end"),
    "decode": ("decode_start", "decode_end"),
}
"""Per phase, the roles of the boundaries that open and close it."""


@dataclass(frozen=True)
class PhaseWindow:
    """The time span (seconds) of one phase in the schedule and the GPUs that work in it."""

    phase: str
    lo: float
    hi: float
    ranks: tuple[int, ...]
    title: str


@dataclass
class Bar:
    """One drawn bar: a node, or several nodes merged because they sit closer than the drawing resolves."""

    start: float
    end: float
    busy: dict[str, float] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """The kind that takes most of the bar's busy time."""
        return max(self.busy, key=self.busy.__getitem__)


def planned_schedule(plan: Plan) -> Schedule | None:
    """The schedule of the plan's DAG on its cluster, or None when the plan has no DAG or no cluster."""
    if plan.dag is None or plan.dag.meta.cluster is None:
        return None
    return schedule_dag(plan.dag, plan.dag.meta.cluster)


def phase_windows(dag: DAG, sched: Schedule) -> list[PhaseWindow]:
    """Prefill (with the KV handoff of disaggregated serving) and the decode step, as the cost model bounds them.

    A phase starts when its opening boundary finishes and ends when its closing boundary does (the
    boundaries found by their fields, :func:`step_boundaries`); a DAG without those boundaries is bounded
    by its nodes.
    """
    windows: list[PhaseWindow] = []
    found = step_boundaries(dag.nodes)
    for phase in ("prefill", "decode"):
        members = [n for n in dag.nodes if n.phase == phase or (phase == "prefill" and n.phase == "handoff")]
        if not members:
            continue
        opening, closing = _PHASE_BOUNDS[phase]
        opened = [sched.finish[b] for b in found[opening]]
        lo = min(opened) if opened else min(sched.start[n.id] for n in members)
        hi = max(sched.finish[n.id] for n in members)
        if phase == "decode" and found[closing]:
            hi = max(sched.finish[b] for b in found[closing])
        ranks = tuple(sorted({r for n in members for r in n.ranks}))
        handoff = any(n.phase == "handoff" for n in members)
        title = "prefill and KV handoff" if handoff else phase if phase == "prefill" else "one decode step"
        windows.append(PhaseWindow(phase, lo, max(hi, lo + 1e-12), ranks, title))
    return windows


def node_lanes(dag: DAG, sched: Schedule) -> dict[str, str]:
    """The lane of every node: ``compute`` or ``comm``, the stream whose busy list holds its interval, else ``wait``."""
    compute = {r: set(v) for r, v in sched.compute_busy.items()}
    comm = {r: set(v) for r, v in sched.comm_busy.items()}
    lanes: dict[str, str] = {}
    for node in dag.nodes:
        interval = (sched.start[node.id], sched.finish[node.id])
        rank = node.ranks[0] if node.ranks else -1
        if interval in compute.get(rank, ()):
            lanes[node.id] = "compute"
        elif interval in comm.get(rank, ()):
            lanes[node.id] = "comm"
        else:
            lanes[node.id] = "wait"
    return lanes


def gpu_time_breakdown(sched: Schedule, window: PhaseWindow) -> dict[str, float]:
    """Where an average GPU's time goes within ``window``, in ms: computing, communicating while not computing,
    and idle. The three add up to the phase's span; idle over span is the phase's bubble fraction."""
    lo, hi = window.lo, window.hi
    span = hi - lo
    totals = {"compute": 0.0, "communication": 0.0, "idle": 0.0}
    for rank in window.ranks:
        busy_c = _clipped_total(sched.compute_busy.get(rank, []), lo, hi)
        busy_m = _clipped_total(sched.comm_busy.get(rank, []), lo, hi)
        both = busy_overlap(sched.compute_busy.get(rank, []), sched.comm_busy.get(rank, []), lo, hi)
        totals["compute"] += busy_c
        totals["communication"] += busy_m - both
        totals["idle"] += max(0.0, span - busy_c - busy_m + both)
    count = max(len(window.ranks), 1)
    return {key: value / count * 1e3 for key, value in totals.items()}


def _clipped_total(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(min(e, hi) - max(s, lo) for s, e in intervals if e > lo and s < hi)


# ---------------------------------------------------------------------------------------------- bars


def merge_bars(items: list[tuple[float, float, str, str]], gap: float, mixed: bool) -> list[Bar]:
    """Bars from ``(start, end, kind, node_id)`` items sorted by start: neighbours closer than ``gap`` seconds
    merge (only of the same kind unless ``mixed``).

    >>> [len(b.nodes) for b in merge_bars([(0, 1, "linear", "a"), (1, 2, "linear", "b"), (5, 6, "norm", "c")], 0.5,
    ...                                   False)]
    [2, 1]
    """
    bars: list[Bar] = []
    for start, end, kind, node in items:
        last = bars[-1] if bars else None
        if last is not None and start - last.end <= gap and (mixed or kind in last.busy):
            last.end = max(last.end, end)
        else:
            last = Bar(start, end)
            bars.append(last)
        last.busy[kind] = last.busy.get(kind, 0.0) + (end - start)
        last.nodes.append(node)
    return bars


def _intersections(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intervals where two sorted, disjoint interval lists are both busy."""
    out: list[tuple[float, float]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass
class _Row:
    ranks: list[int]
    lanes: dict[str, list[tuple[float, float, str, str]]]


def _rows(dag: DAG, sched: Schedule, window: PhaseWindow, lanes: dict[str, str]) -> list[_Row]:
    """Per GPU of the window, its items per lane; GPUs with identical timelines share a row."""
    per_rank: dict[int, dict[str, list[tuple[float, float, str, str]]]] = defaultdict(lambda: defaultdict(list))
    for node in dag.nodes:
        start, end = sched.start[node.id], sched.finish[node.id]
        if end <= start or end <= window.lo or start >= window.hi:
            continue
        for rank in node.ranks:
            per_rank[rank][lanes[node.id]].append((max(start, window.lo), min(end, window.hi), node.kind, node.id))
    rows: dict[tuple[object, ...], _Row] = {}
    for rank in window.ranks:
        items = {lane: sorted(per_rank[rank].get(lane, [])) for lane in LANES}
        key = tuple((lane, tuple((round(s * 1e10), round(e * 1e10), k) for s, e, k, _ in items[lane]))
                    for lane in LANES)
        if key in rows:
            rows[key].ranks.append(rank)
        else:
            rows[key] = _Row([rank], items)
    return list(rows.values())


# -------------------------------------------------------------------------------------------- drawing

_LABEL_W = 150
_LANE_H = {"compute": 11, "comm": 8, "wait": 4}
_ROW_GAP = 6
_MAX_ROWS = 48


def timeline_svg(dag: DAG, sched: Schedule, window: PhaseWindow, lanes: dict[str, str], *, width: int = 1180,
                 budget: int | None = None, detailed: bool = True) -> tuple[str, str]:
    """The per-GPU timeline of ``window`` as an SVG, and one line describing what it shows.

    One row per distinct GPU timeline (identical GPUs share it), with a compute lane, a communication
    lane whose stretches that ran while the same GPU computed are striped (overlap), and a thin lane of
    waits. ``detailed`` draws node by node while the bars stay within ``budget`` (default 2,500 bars;
    800 when not detailed); otherwise, and for larger graphs, bars closer than a pixel (then two, four,
    ...) merge.
    """
    budget = budget if budget is not None else 2500 if detailed else 800
    rows = _rows(dag, sched, window, lanes)
    shown = rows[:_MAX_ROWS]
    plot_w = width - _LABEL_W - 10
    span = window.hi - window.lo
    per_px = span / plot_w
    levels = ([(0.0, False)] if detailed else []) + [(per_px, False)]
    levels += [(px * per_px, True) for px in (1, 2, 4, 8, 16, 32)]
    bars: list[dict[str, list[Bar]]] = []
    gap, mixed = 0.0, False
    for gap, mixed in levels:
        bars = [{lane: merge_bars(row.lanes[lane], gap, mixed) for lane in LANES} for row in shown]
        if sum(len(b) for row in bars for b in row.values()) <= budget:
            break
    row_h = sum(_LANE_H.values()) + 2 * 2 + _ROW_GAP
    axis_h = 26
    height = axis_h + row_h * len(shown) + 8
    out = [svg_open(width, height, "timeline", f"{window.title} per-GPU timeline")]
    pattern = f"hidden-comm-{window.phase}"
    out.append(f'<defs><pattern id="{pattern}" width="5" height="5" patternUnits="userSpaceOnUse" '
               'patternTransform="rotate(45)"><rect width="2.2" height="5" fill="#ffffff" opacity="0.75"/>'
               "</pattern></defs>")
    x0 = _LABEL_W

    def x_of(t: float) -> float:
        return x0 + (t - window.lo) / span * plot_w

    for tick in nice_ticks(span * 1e3, 8):
        t = window.lo + tick / 1e3
        if t > window.hi + 1e-12:
            break
        x = x_of(t)
        out.append(f'<line x1="{x:.1f}" y1="{axis_h - 6}" x2="{x:.1f}" y2="{height - 4}" class="grid"/>')
        out.append(text(x, axis_h - 10, fmt_ms(tick) if tick else "0", size=10, anchor="middle", fill="#475569"))
    drawn = 0
    for index, (row, row_bars) in enumerate(zip(shown, bars, strict=True)):
        y = axis_h + index * row_h
        label = f"GPU {rank_ranges(row.ranks)}"
        out.append(text(6, y + 12, label, size=11, weight="bold"))
        if len(row.ranks) > 1:
            out.append(text(6, y + 24, f"{counted(len(row.ranks), 'GPU')} alike", size=9, fill="#64748b"))
        lane_y = y + 2
        for lane in LANES:
            h = _LANE_H[lane]
            out.append(f'<rect x="{x0}" y="{lane_y}" width="{plot_w}" height="{h}" class="lane"/>')
            for bar in row_bars[lane]:
                x, w = x_of(bar.start), max((bar.end - bar.start) / span * plot_w, 0.6)
                out.append(f'<rect x="{x:.2f}" y="{lane_y}" width="{w:.2f}" height="{h}" '
                           f'fill="{kind_colour(bar.kind)}"><title>{esc(_bar_title(bar))}</title></rect>')
                drawn += 1
            if lane == "comm":
                compute = [(s, e) for s, e, _, _ in row.lanes["compute"]]
                comm = [(s, e) for s, e, _, _ in row.lanes["comm"]]
                hidden = merge_bars([(s, e, "hidden", "") for s, e in _intersections(compute, comm)], per_px, True)
                for bar in hidden:
                    x, w = x_of(bar.start), max((bar.end - bar.start) / span * plot_w, 0.6)
                    out.append(f'<rect x="{x:.2f}" y="{lane_y}" width="{w:.2f}" height="{h}" '
                               f'fill="url(#{pattern})" class="hidden-comm"/>')
            lane_y += h + 2
    out.append("</svg>")
    nodes = sum(len(items) for row in shown for items in row.lanes.values())
    mixing = ", coloured by the kind that takes most time" if mixed else ""
    if gap == 0.0:
        merged = "node by node (back-to-back nodes of one kind share a bar)"
    elif drawn >= nodes:
        merged = "node by node"
    else:
        merged = f"as {drawn:,} bars (neighbours closer than {gap / per_px:.0f} px merged{mixing})"
    more = f"; first {len(shown)} of {len(rows)} distinct rows" if len(rows) > len(shown) else ""
    gpus = counted(len(window.ranks), "GPU")
    caption = (f"{window.title}: {fmt_ms((window.hi - window.lo) * 1e3)} on {gpus}, "
               f"{counted(len(rows), 'distinct timeline')}, {nodes:,} node intervals drawn "
               f"{merged}{more}.")
    return "".join(out), caption


def _bar_title(bar: Bar) -> str:
    busy_ms = sum(bar.busy.values()) * 1e3
    if len(bar.nodes) == 1:
        return f"{bar.nodes[0]} · {bar.kind} · {fmt_ms(busy_ms)}"
    return f"{counted(len(bar.nodes), 'node')}, {fmt_ms(busy_ms)} busy: {bar.nodes[0]} … {bar.nodes[-1]}"


def timeline_legend(dag: DAG) -> str:
    """HTML legend of the kinds in the timeline and of the striped overlap marker."""
    kinds = sorted({n.kind for n in dag.nodes if n.kind != "step_boundary"})
    return (legend_items(kinds) + '<span class="chip"><i class="striped"></i>communication hidden behind compute '
            "on the same GPU</span>")


# ---------------------------------------------------------------------------------------------- trace


def trace_events(plan: Plan) -> dict[str, object]:
    """The plan's simulated schedule as a Chrome/Perfetto trace (JSON object format).

    One process per GPU (``pid`` = rank), threads ``compute`` (tid 0), ``communication`` (tid 1) and
    ``wait`` (tid 2, nodes that hold no stream); a complete event (``ph: "X"``, ``ts``/``dur`` in µs)
    per node and rank it runs on, named by node id; instant events at the phase boundaries. A plan
    without a DAG or cluster gives an empty trace.
    """
    sched = planned_schedule(plan)
    if plan.dag is None or sched is None:
        return {"traceEvents": [], "displayTimeUnit": "ms", "otherData": {"status": plan.status}}
    dag = plan.dag
    lanes = node_lanes(dag, sched)
    per_node = dag.meta.gpus_per_node
    events: list[dict[str, object]] = []
    ranks = sorted({r for n in dag.nodes for r in n.ranks})
    for rank in ranks:
        events.append({"ph": "M", "name": "process_name", "pid": rank,
                       "args": {"name": f"GPU {rank} (node {rank // per_node})"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}})
        for tid, name in enumerate(("compute", "communication", "wait")):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": name}})
    tids = {lane: i for i, lane in enumerate(LANES)}
    for node in dag.nodes:
        start, end = sched.start[node.id], sched.finish[node.id]
        if end <= start:
            continue
        args = {"kind": node.kind, "phase": node.phase, "layer": node.layer, "stage": node.stage,
                "microbatch": node.microbatch, "ranks": rank_ranges(node.ranks)}
        for rank in node.ranks:
            events.append({"name": node.id, "cat": f"{node.phase},{node.kind}", "ph": "X",
                           "ts": round(start * 1e6, 4), "dur": round((end - start) * 1e6, 4),
                           "pid": rank, "tid": tids[lanes[node.id]], "args": args})
    found = step_boundaries(dag.nodes)
    for role in BOUNDARY_ROLES:
        for boundary in found[role]:
            events.append({"name": boundary, "ph": "i", "s": "g", "ts": round(sched.finish[boundary] * 1e6, 4),
                           "pid": ranks[0] if ranks else 0, "tid": 0})
    meta = dag.meta
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": meta.model.name, "gpu": meta.gpu, "strategy": meta.strategy.to_spec(),
                          "status": plan.status}}
