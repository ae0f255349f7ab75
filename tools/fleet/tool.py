"""The sweep as a capability (the MCP server's ``sweep`` tool, and a plain function from Python): a small grid
planned in the call, answered with the best cell per question and a compact table of every cell.

The grid is inline (the mapping a grid YAML holds) or the name of a bundled grid; it is checked whole, its cells
counted against :data:`~shardplan.limits.MAX_TOOL_SWEEP_CELLS` before any is planned, and its models and traces
read under the allowed folders as every tool's are. The cells are planned one after another in the calling
process (on MCP, the call's worker, under its time and memory limits): nothing is written, nothing is cached.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from shardplan.errors import InputError
from shardplan.executor import ExecutorChoice
from shardplan.limits import MAX_TOOL_SWEEP_CELLS
from shardplan.text import counted
from shardplan.tools.api.registry import capability
from shardplan.tools.api.request_args import Args
from shardplan.tools.api.results import Result
from shardplan.tools.fleet.grid import SweepGrid, bundled_grid, grid_cells, load_grid, parse_grid
from shardplan.tools.fleet.outputs import best_rows
from shardplan.tools.fleet.sweep import run_sweep

__all__ = ["SweepArgs", "SweepRow", "SweepSummary", "BUNDLED_GRIDS", "sweep", "sweep_text"]

BUNDLED_GRIDS = {"example": bundled_grid}
"""Bundled grids by the name the tool takes."""

_GRID_FIX = ("give a grid mapping (models, gpus, gpu_count, engines, lengths or workloads, rates, targets, prices) "
             f"or a bundled grid's name: {', '.join(BUNDLED_GRIDS)}")


class SweepArgs(Args):
    """A grid of plans to run in one call."""

    grid: str | dict[str, Any] = Field(
        description="The grid: a mapping as a sweep YAML holds it, e.g. {'models': ['llama-3.1-8b'], 'gpus': "
        "['H100', 'H200'], 'gpu_count': 1, 'engines': 'auto', 'lengths': [{'isl': 512, 'osl': 64}], 'rates': [2], "
        "'targets': [{'ttft_ms': 2000, 'tpot_ms': 50}], 'prices': {'H100': 2.5}}, or the name of a bundled grid "
        f"('example': 3 models x 3 GPU types x 3 rates). At most {MAX_TOOL_SWEEP_CELLS} cells.",
    )


class SweepRow(Result):
    """One cell's answer, compactly: where it ran and what it gives."""

    model: str
    gpu: str
    engine: str
    traffic: str = Field(description="isl/osl, or the workload trace.")
    rate: float | None = Field(description="Requests/s asked; None: no rate.")
    status: str = Field(description="ok, targets_missed, infeasible, error; none_meets_targets in best.")
    gpus_used: int | None = None
    layout: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tokens_per_s_per_gpu: float | None = None
    usd_per_million_output_tokens: float | None = None
    pricing: str | None = Field(default=None, description="measured (the engine's kernel tables for the GPU) or "
                                "roofline.")
    error: str | None = Field(default=None, description="Why a cell has no plan, or what a question tried.")


class SweepSummary(Result):
    """A grid's plans: the best per question and every cell, compactly."""

    grid: str = Field(description="The grid's name.")
    cells: int = Field(description="Cells planned.")
    statuses: dict[str, int] = Field(description="Cells by status.")
    best: list[SweepRow] = Field(description="Per question (a model with its traffic and targets): the cheapest "
                                 "cell that meets the targets, over the GPU types and engines swept.")
    rows: list[SweepRow] = Field(description="Every cell, in the grid's order.")
    seconds: float = Field(description="Wall time of the sweep.")


def _grid(value: str | dict[str, Any]) -> SweepGrid:
    """The grid an argument names or holds.

    Raises:
        InputError: an unknown bundled name, or a malformed grid (the field named).
    """
    if isinstance(value, str):
        path = BUNDLED_GRIDS.get(value.strip().lower())
        if path is None:
            raise InputError(f"grid: no bundled grid named {value[:40]!r}", field="grid", fix=_GRID_FIX)
        return load_grid(path())
    return parse_grid(value, "grid", _GRID_FIX)


def _row(record: dict[str, Any]) -> SweepRow:
    traffic = record.get("workload") or f"{record.get('isl')}/{record.get('osl')}"
    values = {name: record.get(name) for name in SweepRow.model_fields if name != "traffic"}
    return SweepRow.model_validate(values | {"traffic": traffic, "gpu": record.get("gpu") or "-",
                                             "engine": record.get("engine") or "-"})


@capability(SweepArgs)
def sweep(args: SweepArgs) -> SweepSummary:
    """Plan a small grid (models x GPU types x engines x traffic x rates x targets; at most 64 cells) and answer
    with the cheapest cell per question that meets the targets, and a compact row per cell (GPUs, layout, TTFT,
    TPOT, tokens/s per GPU, dollars per 1M output tokens, measured or roofline pricing). engines may be 'auto'.
    For larger grids use the command line, shardplan sweep (parallel, resumable, on Ray)."""
    grid = _grid(args.grid)
    if grid.cell_count > MAX_TOOL_SWEEP_CELLS:
        raise InputError(f"grid has {counted(grid.cell_count, 'cell', spec=',')}, more than the "
                         f"{MAX_TOOL_SWEEP_CELLS} one call plans",
                         field="grid", fix="send fewer models, GPU types, engines, rates or targets, or run "
                                           "shardplan sweep on the command line")
    try:
        cells = grid_cells(grid)
    except InputError as exc:  # an unknown model or GPU in the grid: named as the grid's
        reason = str(exc).removesuffix(f"; {exc.fix}") if exc.fix else str(exc)
        raise InputError(f"grid: {reason}", field="grid", fix=exc.fix or _GRID_FIX) from None
    result = run_sweep(grid, None, ExecutorChoice("threads", workers=1), cells=cells)
    statuses: dict[str, int] = {}
    for record in result.records:
        statuses[record["status"]] = statuses.get(record["status"], 0) + 1
    return SweepSummary(grid=grid.name, cells=len(result.records), statuses=statuses,
                        best=[_row(r) for r in best_rows(result.records)], rows=[_row(r) for r in result.records],
                        seconds=round(result.seconds, 3))


def sweep_text(data: dict[str, Any]) -> str:
    """The sweep's answer in a few lines: the cells by status, then the best per question."""
    summary = SweepSummary.model_validate(data)
    counts = ", ".join(f"{n} {status}" for status, n in summary.statuses.items())
    lines = [f"sweep {summary.grid}: {counted(summary.cells, 'cell')} ({counts}) in {summary.seconds:.1f} s; best per "
             f"question:"]
    for row in summary.best:
        rate = f" at {row.rate:g} req/s" if row.rate is not None else ""
        if row.status != "ok":
            lines.append(f"- {row.model} {row.traffic}{rate}: none meets the targets ({row.error})")
            continue
        price = (f"${row.usd_per_million_output_tokens:,.3f} per 1M output tokens"
                 if row.usd_per_million_output_tokens is not None else "no price")
        lines.append(f"- {row.model} {row.traffic}{rate}: {row.gpu} {row.engine}, {counted(row.gpus_used, 'GPU')} as "
                     f"{row.layout}, {price} ({row.pricing} pricing)")
    return "\n".join(lines)
