"""The latencies a simulated plan's requests saw, beside its targets: one CDF per latency, hand-drawn in SVG.

A plan whose figures come from replaying its traffic through the engine simulator (``plan.simulation``) carries
each latency at fixed percentiles (``distribution``). Each panel draws that curve, the share of requests served
within a latency on a scale of nines (as latency percentile plots are drawn: P90, P99 and P99.9 evenly spaced,
since targets are judged in the tail), with the target as a vertical line and the percentile the target names (or
the mean) marked on the curve, so a reader sees at once how far the tail sits from the target and what share of
requests meets it. A table beside gives the mean, P50, P90, P95 and P99 and the steady state the simulation replaced.
"""

from __future__ import annotations

import math
from typing import Literal

from shardplan.contracts.figures import Figures, LatencyMetric
from shardplan.contracts.plan import Plan
from shardplan.contracts.simulation import DISTRIBUTION_PERCENTS, SimulationSummary
from shardplan.contracts.targets import SloPercentile, judged_latency
from shardplan.text import counted
from shardplan.tools.report.svg import esc, fmt_ms, fmt_num, nice_ticks, svg_open, text

__all__ = ["share_within", "nines", "latency_cdf_svg", "latency_html"]

_NAMES: dict[LatencyMetric, str] = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "request latency"}


def share_within(values_ms: list[float], limit_ms: float) -> float:
    """The share of requests at or under ``limit_ms``, read off the curve (linear between its percentiles).

    >>> share_within([0.0, 1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.5, 99.0,
    ...               99.9, 100.0], 45.0)
    0.45
    """
    points = list(zip(values_ms, DISTRIBUTION_PERCENTS, strict=True))
    if limit_ms < points[0][0]:
        return 0.0
    if limit_ms >= points[-1][0]:
        return 1.0
    for (v0, p0), (v1, p1) in zip(points, points[1:], strict=False):
        if v0 <= limit_ms < v1:
            return round((p0 + (p1 - p0) * (limit_ms - v0) / (v1 - v0)) / 100, 6)
    return 1.0


_NINES_TOP = 3.0
"""The plot's top: 99.9% of requests (three nines)."""


def nines(share: float) -> float:
    """A share of requests on the plot's vertical scale, -log10(1 - share): 90% is one nine, 99% two, 99.9%
    three, so the tail where targets are judged gets as much room as the body (capped at three nines).

    >>> nines(0.0), nines(0.9), round(nines(0.99), 6)
    (0.0, 1.0, 2.0)
    """
    return min(-math.log10(max(1.0 - share, 10 ** -_NINES_TOP)), _NINES_TOP)


def latency_cdf_svg(metric: LatencyMetric, values_ms: list[float], target_ms: float | None,
                    judged: tuple[str, float] | None, width: int = 400, height: int = 250) -> str:
    """The distribution of one latency: the share of requests served within a latency (up, on a scale of nines,
    so P90, P99 and P99.9 are evenly spaced) against the latency (across), the target as a dashed line and the
    judged statistic (``(label, ms)``) as a dot on the curve."""
    left, right, top, bottom = 50, 14, 12, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    curve_points = [(v, p / 100) for v, p in zip(values_ms, DISTRIBUTION_PERCENTS, strict=True) if p < 100]
    high = max(curve_points[-1][0], target_ms or 0.0) * 1.05
    xs = nice_ticks(high)

    def px(ms: float) -> float:
        return left + ms / xs[-1] * plot_w

    def py(share: float) -> float:
        return top + plot_h * (1 - nines(share) / _NINES_TOP)

    name = _NAMES[metric]
    out = [svg_open(width, height, f"cdf cdf-{metric}", f"share of requests against {name}")]
    for tick in xs:
        out.append(f'<line x1="{px(tick):.1f}" y1="{top}" x2="{px(tick):.1f}" y2="{top + plot_h}" class="grid"/>')
        out.append(text(px(tick), top + plot_h + 14, fmt_num(tick), size=10, anchor="middle", fill="#475569"))
    for share, label in ((0.0, "0%"), (0.5, "50%"), (0.9, "90%"), (0.99, "99%"), (0.999, "99.9%")):
        out.append(f'<line x1="{left}" y1="{py(share):.1f}" x2="{left + plot_w}" y2="{py(share):.1f}" class="grid"/>')
        out.append(text(left - 6, py(share) + 3, label, size=10, anchor="end", fill="#475569"))
    out.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="frame"/>')
    out.append(text(left + plot_w / 2, height - 8, f"{name}, ms →", size=11, anchor="middle"))
    curve = " ".join(f"{px(v):.1f},{py(share):.1f}" for v, share in curve_points)
    out.append(f'<polyline points="{curve}" fill="none" stroke="#2563eb" stroke-width="2" class="curve"/>')
    if target_ms is not None:
        within = share_within(values_ms, target_ms)
        x = px(target_ms)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#dc2626" '
                   f'stroke-dasharray="5 4" stroke-width="1.5" class="target">'
                   f"<title>target {esc(fmt_ms(target_ms))}: {within:.1%} of requests within it</title></line>")
        right_half = x > left + plot_w * 0.6
        out.append(text(x + (-4 if right_half else 4), top + plot_h - 6, f"target {fmt_ms(target_ms)}", size=10,
                        anchor="end" if right_half else "start", fill="#b91c1c"))
    if judged is not None:
        label, ms = judged
        share = share_within(values_ms, ms)
        x, y = px(ms), py(share)
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="#b91c1c" class="judged">'
                   f"<title>{esc(label)}: {esc(fmt_ms(ms))}</title></circle>")
        right_half = x > left + plot_w * 0.6
        out.append(text(x + (-8 if right_half else 8), y + 4, f"{label} {fmt_ms(ms)}", size=10,
                        anchor="end" if right_half else "start", fill="#b91c1c", weight="bold"))
    out.append("</svg>")
    return "".join(out)


def _judged(figures: Figures, metric: Literal["ttft", "tpot"], percentile: SloPercentile) -> tuple[str, float]:
    """The statistic a target of ``percentile`` bounds, named for the plot: P99, or the mean."""
    value, _ = judged_latency(figures, metric, percentile)
    return ("mean" if percentile == "mean" else percentile.upper()), value


def _table(run: SimulationSummary) -> str:
    figures, steady = run.figures, run.analytic
    rows = []
    metrics: tuple[LatencyMetric, ...] = ("ttft", "tpot", "e2e")
    for metric in metrics:
        spread = figures.percentiles[metric]
        mean = {"ttft": figures.ttft_ms, "tpot": figures.tpot_ms, "e2e": figures.e2e_ms}[metric]
        steady_mean = {"ttft": steady.ttft_ms, "tpot": steady.tpot_ms, "e2e": steady.e2e_ms}[metric] if steady else None
        cells = [mean, spread.p50_ms, spread.p90_ms, spread.p95_ms, spread.p99_ms]
        rows.append(f"<tr><td>{_NAMES[metric]}</td>" + "".join(f"<td>{esc(fmt_ms(v))}</td>" for v in cells)
                    + f"<td>{esc(fmt_ms(steady_mean)) if steady_mean is not None else '-'}</td></tr>")
    return ('<table class="figures"><thead><tr><th>latency</th><th>mean</th><th>P50</th><th>P90</th><th>P95</th>'
            f"<th>P99</th><th>steady state</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def latency_html(plan: Plan) -> str:
    """The section's body: the TTFT and TPOT CDFs beside their targets, the percentile table, what was replayed
    and the goodput; empty when the plan was not simulated."""
    run = plan.simulation
    if run is None:
        return ""
    percentile = run.targets.percentile
    panels = []
    bounded: tuple[tuple[Literal["ttft", "tpot"], float | None], ...] = (
        ("ttft", run.targets.ttft_ms), ("tpot", run.targets.tpot_ms))
    for metric, target in bounded:
        values = run.distribution.get(metric)
        if not values:
            continue
        judged = _judged(run.figures, metric, percentile) if target is not None else None
        panels.append(f"<div><h3>{_NAMES[metric]}</h3>{latency_cdf_svg(metric, values, target, judged)}</div>")
    wanted = "both targets" if run.targets.ttft_ms and run.targets.tpot_ms else "the target"
    queue = {True: "; the queue settled", False: "; the queue did not settle", None: ""}[run.settled]
    caption = (f"Replayed {esc(run.workload)} (seed {run.seed}) through the engine's scheduler: {run.goodput:.1%} "
               f"met {wanted}; {counted(run.preemptions, 'preemption', spec=',')}{queue}. Each curve is the share of "
               f"requests served "
               "within a latency, on a scale of nines (90%, 99%, 99.9% evenly spaced); the dashed line is the "
               "target, the dot the statistic it bounds.")
    grid = f'<div class="grid2">{"".join(panels)}</div>' if panels else ""
    return f'<p class="muted">{caption}</p>{grid}{_table(run)}'
