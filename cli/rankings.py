"""The ranked tables of the terminal: a plan's alternatives and Pareto frontier, the search's ranking.

Under each ranking goes one line when its leaders are within the cost model's stated error of each other
(:func:`~shardplan.tools.search.ranking.near_tie`): a ranking inside the model's error is not one to act on.
"""

from __future__ import annotations

from typing import Any, Literal

from rich.table import Table

from shardplan.cli.app import console
from shardplan.contracts.figures import Figures
from shardplan.contracts.plan import Plan
from shardplan.contracts.targets import SloPercentile, judged_latency
from shardplan.text import counted
from shardplan.tools.cost.estimate import stated_error_pct
from shardplan.tools.planning.rejections import rejection_summary
from shardplan.tools.search.deployments import SearchResult
from shardplan.tools.search.ranking import leading_within, near_tie_note

__all__ = ["print_alternatives", "print_frontier", "print_search", "frontier_note"]


def frontier_note(per_gpu: list[float], backend: str) -> str | None:
    """The line under a frontier whose points with the most tokens/s per GPU of the budget are within the model's
    stated error of each other, or None when the first two already differ by more."""
    error = stated_error_pct(backend, "tokens/s")
    top, spread = leading_within(sorted(per_gpu, reverse=True), error)
    if top < 2:
        return None
    return near_tie_note(f"the {top} frontier points with the most tokens/s per budget GPU", spread, error,
                         "tokens/s per budget GPU", backend)


def _note(out: Any, text: str | None) -> None:
    if text:
        out.print(f"[yellow]note[/yellow]: {text}")


def print_alternatives(plan: Plan) -> None:
    """A plan's runners-up; in a review, the strategies that beat the reviewed one and what it has against each
    (said once under the table when it is the same for all)."""
    if not plan.alternatives:
        return
    out = console()
    reviewing = any(m.startswith("reviewing") for m in plan.messages)
    whys = [a.why_not for a in plan.alternatives]
    # In a review a reason often belongs to the reviewed strategy alone (it misses a target): said once.
    common = max(set(whys), key=whys.count)
    shared = common if reviewing and whys.count(common) > 1 else None
    reviewed = plan.strategy.to_spec() if plan.strategy is not None else "strategy"
    columns = ["instead" if reviewing else "runner-up", "seqs", "GPUs", "TTFT ms", "TPOT ms", "tok/s/GPU"]
    if len(set(whys)) > 1 or shared is None:
        columns.append(f"why the reviewed {reviewed} loses" if reviewing else "why not")
    title = f"strategies that beat the reviewed strategy {reviewed}" if reviewing else "alternatives"
    table = Table(*columns, title=title)
    for a in plan.alternatives:
        f = a.figures
        cells = [
            a.strategy,
            str(a.concurrency or "-"),
            str(f.gpus_used),
            f"{f.ttft_ms:.1f}",
            f"{f.tpot_ms:.2f}",
            f"{f.tokens_per_s_per_gpu:.1f}",
        ]
        why = "" if a.why_not == shared else a.why_not
        table.add_row(*cells, *([why] if len(columns) > len(cells) else []))
    out.print(table)
    if shared is not None:
        rows = "each of them" if len(set(whys)) == 1 else "each row without a reason"
        out.print(f"why the reviewed {reviewed} loses to {rows}: {shared}")
    _note(out, plan.near_tie.note if plan.near_tie is not None else None)


def print_frontier(plan: Plan, limit: int = 12) -> None:
    """The Pareto frontier of tokens/s per GPU of the budget against tokens/s/user, the chosen deployment marked;
    tokens/s per GPU used beside it."""
    d = plan.deployment
    if d is None or not d.frontier:
        return
    table = Table(
        "",
        "deployment",
        "seqs",
        "GPUs",
        "TTFT ms",
        "TPOT ms",
        "tok/s/user",
        "tok/s/budget GPU",
        "tok/s/GPU used",
        "targets",
        title="Pareto frontier (tokens/s per GPU of the budget, what the throughput objective ranks, against "
        "tokens/s/user)",
    )
    points = d.frontier
    if len(points) > limit:  # keep the ends, the chosen point and evenly spaced ones between
        step = (len(points) - 1) / (limit - 1)
        keep = {round(i * step) for i in range(limit)} | {i for i, p in enumerate(points) if p.chosen}
        points = [p for i, p in enumerate(points) if i in keep]
    for p in points:
        f = p.figures
        table.add_row(
            "*" if p.chosen else "",
            p.strategy,
            str(p.concurrency),
            str(f.gpus_used),
            f"{f.ttft_ms:.0f}",
            f"{f.tpot_ms:.2f}",
            f"{f.tokens_per_s_per_user:.1f}",
            f"{f.tokens_per_s_per_budget_gpu:.1f}",
            f"{f.tokens_per_s_per_gpu:.1f}",
            "met" if p.meets_targets else "missed",
        )
    out = console()
    out.print(table)
    cost = plan.dag_cost
    backend = cost.pricing.backend if cost is not None and cost.pricing is not None else "roofline"
    _note(out, frontier_note([p.figures.tokens_per_s_per_budget_gpu for p in d.frontier], backend))


def _latency_cells(figures: Figures, percentile: SloPercentile) -> list[str]:
    """TTFT and TPOT as the targets judge them: the percentile where the figures were simulated, else the mean
    (marked so when a percentile was asked for)."""
    cells = []
    shown: tuple[tuple[Literal["ttft", "tpot"], int], ...] = (("ttft", 1), ("tpot", 2))
    for metric, digits in shown:
        value, label = judged_latency(figures, metric, percentile)
        cells.append(f"{value:.{digits}f}" + (" (mean)" if "not simulated" in label else ""))
    return cells


def print_search(result: SearchResult, backend: str, percentile: SloPercentile = "mean") -> None:
    """The search's ranking (TTFT and TPOT at the percentile the targets name, where simulated), its Pareto
    frontier, what it simulated and what it set aside before pricing, in words."""
    out = console()
    stat = "" if percentile == "mean" else f"{percentile.upper()} "
    table = Table(
        "#",
        "deployment",
        "seqs",
        "GPUs",
        f"{stat}TTFT ms",
        f"{stat}TPOT ms",
        "tok/s/GPU",
        "tok/s/user",
        "GB/GPU",
        "figures",
        title=f"{counted(result.evaluated, 'deployment')} in {result.seconds:.2f} s, objective {result.objective}",
    )
    for i, c in enumerate(result.candidates, 1):
        f = c.figures
        table.add_row(
            str(i),
            c.spec,
            str(c.concurrency),
            f"{f.gpus_used} of {f.gpu_budget}",
            *_latency_cells(f, percentile),
            f"{f.tokens_per_s_per_gpu:.1f}",
            f"{f.tokens_per_s_per_user:.1f}",
            f"{f.memory_per_gpu_gb:.1f}",
            f.source.replace("_", " ") + ("" if c.meets_targets else " (misses)"),
        )
    out.print(table)
    for note in result.notes:
        _note(out, note)
    _note(out, result.near_tie.note if result.near_tie is not None else None)
    _note(out, result.simpler_preferred)
    front = Table("deployment", "seqs", "tok/s/user", "tok/s/budget GPU", "tok/s/GPU used", title="Pareto frontier")
    for c in result.frontier:
        f = c.figures
        front.add_row(c.spec, str(c.concurrency), f"{f.tokens_per_s_per_user:.1f}",
                      f"{f.tokens_per_s_per_budget_gpu:.1f}", f"{f.tokens_per_s_per_gpu:.1f}")
    out.print(front)
    _note(out, frontier_note([c.figures.tokens_per_s_per_budget_gpu for c in result.frontier], backend))
    if result.rejected:
        out.print(f"layouts set aside before pricing: {rejection_summary(result.rejected)}")
