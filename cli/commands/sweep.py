"""``shardplan sweep GRID.yaml``: a grid of plans (models x GPU types x traffic x engines), resumable, locally or on
Ray, with a results table, the best deployment per question and a cost-against-rate plot per model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.cli.app import app, console, emit_json
from shardplan.cli.price_options import GpuPriceOption, PricesOption, given_prices
from shardplan.cli.progress import working
from shardplan.cli.ray_option import BareRayFlag, RayOption, executor_choice
from shardplan.text import counted
from shardplan.tools.fleet.grid import bundled_grid, load_grid
from shardplan.tools.fleet.outputs import best_rows
from shardplan.tools.fleet.sweep import run_sweep


@app.command("sweep", cls=BareRayFlag)
def sweep_command(
    grid: Annotated[str, typer.Argument(help="Grid YAML (models, gpus, engines, lengths or workloads, rates, "
                                              "targets), or 'example' for the bundled one.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the results and the cell cache.")] = Path(
        "sweep-results"),
    ray: RayOption = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-w", help="Local processes (or the CPUs of a local Ray); default: the CPUs.")] = None,
    gpu_price: GpuPriceOption = None,
    prices: PricesOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Plan every cell of a grid (models x GPU types x traffic x engines); finished cells are cached in --out."""

    spec = load_grid(bundled_grid() if grid == "example" else grid)
    given = given_prices(gpu_price, prices)
    if given:
        spec = spec.model_copy(update={"prices": spec.prices | {g: p.usd_per_gpu_hour for g, p in given.items()}})
    choice = executor_choice(ray, workers)
    with working(f"sweep {spec.name}", total=spec.cell_count, quiet=as_json, transient=False,
                 remaining=True) as step:
        def advance(record: dict[str, Any], done: int, total: int) -> None:
            step.status(f"{record['model']} on {record['gpu']} at {record['rate']} req/s: {record['status']}",
                        completed=done)

        result = run_sweep(spec, out, choice, on_result=advance)
    summary = {"grid": spec.name, "cells": len(result.records), "planned": result.planned, "cached": result.cached,
               "seconds": round(result.seconds, 2), "backend": result.backend,
               "files": {kind: str(path) for kind, path in result.files.items()}, "notes": result.notes}
    if as_json:
        emit_json(summary)
        return
    _print_best(result.records)
    screen = console()
    screen.print(f"{counted(len(result.records), 'cell')} ({result.planned} planned on {result.backend}, "
                 f"{result.cached} from "
                 f"the cache) in {result.seconds:.1f} s; results in {out / 'results.csv'}, best per question in "
                 f"{out / 'best.csv'}")
    for note in result.notes:
        screen.print(f"[dim]{note}[/dim]")


def _print_best(records: list[dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table("model", "traffic", "rate", "best GPU", "engine", "GPUs", "layout", "$/h", "$/1M out",
                  "J/token", title="cheapest deployment meeting the targets, per question")

    def money(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    for row in best_rows(records):
        traffic = row.get("workload") or f"{row['isl']}/{row['osl']}"
        if row["status"] != "ok":
            table.add_row(row["model"], traffic, str(row.get("rate")), "none meets the targets", "", "", "",
                          "", "", "")
            continue
        table.add_row(row["model"], traffic, str(row.get("rate")), row["gpu"], row["engine"], str(row["gpus_used"]),
                      row["layout"], money(row["usd_per_hour"], 2), money(row["usd_per_million_output_tokens"], 3),
                      money(row["joules_per_output_token"], 2))
    console().print(table)
