"""Latency distributions as the terminal shows them: mean and P50/P90/P95/P99 of TTFT, TPOT, request latency and
the queue, beside the steady state's means."""

from __future__ import annotations

from rich.table import Table

from shardplan.contracts.figures import Figures, LatencyMetric
from shardplan.contracts.simulation import SimulationSummary

__all__ = ["latency_table"]

_ROWS: tuple[tuple[str, LatencyMetric], ...] = (("TTFT", "ttft"), ("TPOT", "tpot"), ("request", "e2e"))


def _steady(figures: Figures | None, metric: LatencyMetric) -> str:
    return "-" if figures is None else f"{getattr(figures, f'{metric}_ms'):,.1f}"


def latency_table(run: SimulationSummary, steady_label: str) -> Table:
    """The simulated run's latency percentiles, one row per latency, with the steady state's mean last."""
    f = run.figures
    table = Table("latency, ms", "mean", "P50", "P90", "P95", "P99", steady_label)
    for label, metric in _ROWS:
        p = f.percentiles[metric]
        mean = getattr(f, f"{metric}_ms")
        table.add_row(label, *(f"{v:,.1f}" for v in (mean, p.p50_ms, p.p90_ms, p.p95_ms, p.p99_ms)),
                      _steady(run.analytic, metric))
    q = run.queue
    table.add_row("queue", *(f"{v:,.1f}" for v in (run.queue_ms, q.p50_ms, q.p90_ms, q.p95_ms, q.p99_ms)), "-")
    return table
