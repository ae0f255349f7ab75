"""The chosen deployment among the searched ones: tokens/s per GPU of the budget against tokens/s per user,
hand-drawn in SVG.

The points are the deployment search's Pareto frontier over layouts and concurrency (from the plan's
``deployment.frontier``), the runners-up, and the chosen deployment. The vertical axis is the figure the
throughput objective ranks, output tokens/s per GPU of the budget (idle GPUs count as zero), so the
deployment that objective chooses is never drawn below one that beats it; tokens/s per GPU used is in
each point's tooltip.

A point is on the Pareto frontier when no other point is at least as good on both axes and better on
one. The frontier is drawn as a step line; the chosen strategy is ringed and labelled. Both axes start at
zero, so that a gap of a few percent looks like one, and a shaded box around the chosen point spans the
model's stated error on each axis: points inside it are not told apart by the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardplan.contracts.figures import Figures
from shardplan.contracts.plan import Plan
from shardplan.text import counted
from shardplan.tools.report.svg import esc, fmt_num, nice_ticks, svg_open, text

__all__ = ["Point", "plan_points", "dominates", "pareto_front", "pareto_svg"]


@dataclass(frozen=True)
class Point:
    """One strategy on the plot."""

    spec: str
    per_user: float
    per_gpu: float
    """Tokens/s per GPU of the budget (the plotted figure)."""
    chosen: bool
    why_not: str = ""
    per_gpu_used: float = 0.0


def _label(spec: str, concurrency: int | None) -> str:
    return f"{spec} @{concurrency}" if concurrency else spec


def plan_points(plan: Plan) -> list[Point]:
    """The chosen deployment (first), the searched Pareto frontier and the alternatives of ``plan``, each
    labelled with its layout and sequences in flight; empty when the plan has no cost."""
    if plan.strategy is None or plan.figures is None:
        return []
    d = plan.deployment
    chosen = _label(plan.strategy.to_spec(), d.concurrency if d else None)
    points = [_point(chosen, plan.figures, True)]
    for frontier_point in d.frontier if d else []:
        f = frontier_point.figures
        why = f"TTFT {f.ttft_ms:.0f} ms, TPOT {f.tpot_ms:.2f} ms on {counted(f.gpus_used, 'GPU')}" + (
            "" if frontier_point.meets_targets else "; misses the targets")
        points.append(_point(_label(frontier_point.strategy, frontier_point.concurrency), f, False, why))
    points += [_point(_label(a.strategy, a.concurrency), a.figures, False, a.why_not) for a in plan.alternatives]
    seen: set[str] = set()
    unique = []
    for point in points:
        if point.spec not in seen:
            seen.add(point.spec)
            unique.append(point)
    return unique


def _point(spec: str, figures: Figures, chosen: bool, why_not: str = "") -> Point:
    return Point(spec, figures.tokens_per_s_per_user, figures.tokens_per_s_per_budget_gpu, chosen, why_not,
                 figures.tokens_per_s_per_gpu)


def dominates(q: Point, p: Point) -> bool:
    """Whether ``q`` is at least as good as ``p`` on both axes and better on one."""
    return (q.per_user >= p.per_user and q.per_gpu >= p.per_gpu
            and (q.per_user > p.per_user or q.per_gpu > p.per_gpu))


def pareto_front(points: list[Point]) -> list[Point]:
    """The non-dominated points (higher is better on both axes), by increasing tokens/s per user.

    >>> front = pareto_front([Point("a", 1, 9, False), Point("b", 5, 5, False), Point("c", 4, 4, False)])
    >>> [p.spec for p in front]
    ['a', 'b']
    """
    front = [p for p in points if not any(dominates(q, p) for q in points)]
    return sorted(front, key=lambda p: (p.per_user, -p.per_gpu))


def pareto_svg(
    points: list[Point], width: int = 520, height: int = 330, error_pct: tuple[float, float] | None = None
) -> str:
    """The scatter of ``points`` with the frontier and the chosen point marked, both axes from zero;
    ``error_pct`` (tokens/s per user, per GPU) draws the model's error around the chosen point."""
    left, right, top, bottom = 58, 16, 14, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    grow = 1 + (max(error_pct) / 100 if error_pct else 0.0)  # room for the error box above the chosen point
    chosen = [p for p in points if p.chosen]
    xs = nice_ticks(max([p.per_user for p in points] + [c.per_user * grow for c in chosen]) * 1.05)
    ys = nice_ticks(max([p.per_gpu for p in points] + [c.per_gpu * grow for c in chosen]) * 1.05)

    def px(v: float) -> float:
        return left + (v - xs[0]) / (xs[-1] - xs[0]) * plot_w

    def py(v: float) -> float:
        return top + plot_h - (v - ys[0]) / (ys[-1] - ys[0]) * plot_h

    out = [svg_open(width, height, "pareto", "tokens per second per GPU against per user")]
    for tick in xs:
        out.append(f'<line x1="{px(tick):.1f}" y1="{top}" x2="{px(tick):.1f}" y2="{top + plot_h}" class="grid"/>')
        out.append(text(px(tick), top + plot_h + 14, fmt_num(tick), size=10, anchor="middle", fill="#475569",
                        css_class="x-tick"))
    for tick in ys:
        out.append(f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + plot_w}" y2="{py(tick):.1f}" class="grid"/>')
        out.append(text(left - 6, py(tick) + 3, fmt_num(tick), size=10, anchor="end", fill="#475569",
                        css_class="y-tick"))
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="frame"/>')
    out.append(text(left + plot_w / 2, height - 8, "tokens/s per user (interactivity) →", size=11, anchor="middle"))
    out.append(f'<text x="14" y="{top + plot_h / 2:.0f}" font-size="11" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + plot_h / 2:.0f})">tokens/s per GPU of the budget (throughput) →'
               "</text>")
    for c in chosen:
        if error_pct is None:
            break
        ex, ey = error_pct[0] / 100, error_pct[1] / 100
        x0, x1 = px(c.per_user * (1 - ex)), px(c.per_user * (1 + ex))
        y0, y1 = py(c.per_gpu * (1 + ey)), py(c.per_gpu * (1 - ey))
        out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" '
                   f'class="error-band" fill="#fca5a5" fill-opacity="0.18" stroke="#f87171" stroke-dasharray="3 3">'
                   f"<title>the model's stated error around the chosen point: ±{error_pct[0]:.1f}% tokens/s per "
                   f"user, ±{error_pct[1]:.1f}% tokens/s per GPU</title></rect>")
    front = pareto_front(points)
    if len(front) > 1:
        steps = " ".join(f"{px(p.per_user):.1f},{py(p.per_gpu):.1f}" for p in front)
        out.append(f'<polyline points="{steps}" class="frontier"/>')
    on_front = {p.spec for p in front}
    for number, p in sorted(enumerate(points, 1), key=lambda item: item[1].chosen):
        x, y = px(p.per_user), py(p.per_gpu)
        tip = (f"{number}. {p.spec}: {p.per_gpu:.1f} tok/s per budget GPU ({p.per_gpu_used:.1f} per GPU used), "
               f"{p.per_user:.1f} tok/s/user") + (
            " (chosen)" if p.chosen else f" — {p.why_not}")
        if p.chosen:
            out.append(f'<g class="chosen"><circle cx="{x:.1f}" cy="{y:.1f}" r="9" class="ring"/>'
                       f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" class="dot chosen-dot"/><title>{esc(tip)}</title></g>')
        else:
            cls = "dot front-dot" if p.spec in on_front else "dot"
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" class="{cls}"><title>{esc(tip)}</title></circle>')
        # Points are numbered as in the table beside the plot; long SPEC labels would collide.
        label = f"{number} chosen" if p.chosen else str(number)
        out.append(text(x + 9, y - 6, label, size=11, weight="bold" if p.chosen else "normal",
                        fill="#b91c1c" if p.chosen else "#334155"))
    out.append("</svg>")
    return "".join(out)
