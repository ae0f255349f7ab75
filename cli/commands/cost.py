"""``shardplan cost``: the cost report of a DAG or plan file, or of a strategy for a request."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from shardplan.cli.app import app, console, emit_json, fail
from shardplan.cli.common import JsonFlag, request_options
from shardplan.cli.files import read_dag, require_valid
from shardplan.cli.progress import working
from shardplan.contracts.figures import headline
from shardplan.contracts.reports import CostReport
from shardplan.contracts.strategy import parse_strategy
from shardplan.tools.cost.estimate import estimate_cost
from shardplan.tools.planning.evaluation import price_on_budget
from shardplan.tools.planning.planner import resolve_request
from shardplan.tools.views.phase_columns import PHASE_COLUMNS, column_label, phase_columns_help

_COST_HELP = (
    "Cost report of a DAG/plan FILE, or of --model and --strategy.\n\nThe schedule table's columns, per phase:\n\n"
    + phase_columns_help()
)


@app.command("cost", help=_COST_HELP)
@request_options(optional=True)
def cost_command(
    request: Any,
    file: Annotated[Path | None, typer.Argument(help="A DAG or plan JSON file to price.")] = None,
    strategy: Annotated[str | None, typer.Option("--strategy", "-s", help="SPEC, e.g. tp=4,pp=2.")] = None,
    as_json: JsonFlag = False,
) -> None:
    with working("pricing", quiet=as_json) as step:
        if file is not None:
            step.status(f"reading {file}")
            dag = require_valid(read_dag(file), file)
            step.status("scheduling")
            report = estimate_cost(dag)
        else:
            if request is None or strategy is None:
                fail("give a DAG/plan FILE, or --model and --strategy")
            spec, cl = resolve_request(request)
            step.status(f"building and scheduling {strategy}")
            report = price_on_budget(spec, cl, parse_strategy(strategy), request.workload.with_batch())
    if as_json:
        emit_json(report)
        return
    print_cost(report)


def print_cost(report: CostReport) -> None:
    """A cost report as tables: headline figures, per-phase schedule, memory, critical path summary."""
    out = console()
    out.print(f"{headline(report.figures)} | fits: {report.figures.fits}")
    phases = Table("phase", *(column_label(c) for c in PHASE_COLUMNS), title="schedule (columns: see --help)")
    for name in ("prefill", "decode"):
        p = getattr(report, name)
        phases.add_row(name, *(c.show(getattr(p, c.field)) for c in PHASE_COLUMNS))
    out.print(phases)
    mem = Table(
        "pool",
        "weights",
        "KV",
        "activations",
        "workspace",
        "total",
        "capacity",
        "max batch",
        title="memory per GPU (GB)",
    )
    for m in report.memory:
        mem.add_row(
            m.pool,
            f"{m.weights_gb:.1f}",
            f"{m.kv_cache_gb:.1f}",
            f"{m.activations_gb:.1f}",
            f"{m.workspace_gb:.1f}",
            f"{m.total_gb:.1f}",
            f"{m.capacity_gb:g}",
            str(m.max_batch),
        )
    out.print(mem)
    for name in ("prefill", "decode"):
        by_kind: Counter[str] = Counter()
        for step in getattr(report, name).critical_path:
            by_kind[step.kind] += step.ms
        top = ", ".join(f"{k} {v:.2f} ms" for k, v in by_kind.most_common(5))
        out.print(f"{name} critical path: {top}")
    for miss in report.misses:
        out.print(f"[red]misses[/red] {miss.message}")
    for note in report.notes:
        out.print(f"[dim]note: {note}[/dim]")
