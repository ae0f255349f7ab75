"""Run a sweep: every cell of a grid planned once, on local processes or Ray, resumable after a kill.

The cells already in ``OUT/cells`` (same request, same version) are read back; the others are planned on the
chosen backend, and each finished cell is written to the cache at once, in the calling process, before the next
result is taken. A sweep killed halfway therefore reruns exactly the cells that had not finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardplan.errors import InputError
from shardplan.executor import ExecutorChoice, run_calls
from shardplan.tools.fleet.cells import cell_key, read_cached, run_cell, write_cached
from shardplan.tools.fleet.grid import Cell, SweepGrid, grid_cells
from shardplan.tools.fleet.outputs import write_outputs

__all__ = ["SweepResult", "run_sweep", "cell_record", "CELLS_FOLDER"]

CELLS_FOLDER = "cells"
"""The cache folder inside a sweep's output folder: one JSON record a finished cell."""

Progress = Callable[[dict[str, Any], int, int], None]
"""Called after each finished cell with its record, the cells done so far and the total (cached ones counted)."""


@dataclass
class SweepResult:
    """What a sweep did: every cell's record in grid order, how many were planned now or read back, the files."""

    records: list[dict[str, Any]]
    planned: int
    cached: int
    seconds: float
    backend: str
    files: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def cell_record(cell: Cell, key: str, results: dict[str, Any]) -> dict[str, Any]:
    """A cell's row: its coordinates (the grid's axes), its key, then its results."""
    return {"cell": key, "model": cell.model, "gpu": cell.gpu, "gpu_count": cell.request.gpus,
            "engine": cell.engine, "isl": cell.isl, "osl": cell.osl, "workload": cell.workload, "rate": cell.rate,
            "ttft_target_ms": cell.ttft_target_ms, "tpot_target_ms": cell.tpot_target_ms, **results}


def _out_folder(out: Path) -> Path:
    try:
        (out / CELLS_FOLDER).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {out}: {exc.strerror}", field="out", fix="choose a writable folder") from None
    return out / CELLS_FOLDER


def run_sweep(grid: SweepGrid, out: str | Path | None, choice: ExecutorChoice | None = None,
              on_result: Progress | None = None, cells: list[Cell] | None = None) -> SweepResult:
    """Plan every cell of ``grid`` not yet in ``out`` on ``choice``'s backend (local processes by default),
    then write the tables and plots of all of them into ``out``; with ``out`` None, plan them all and write
    nothing (the records are the answer). ``cells``: the grid's cells when the caller has expanded them already.

    Raises:
        InputError: a malformed grid (unknown model or GPU...), an output folder that cannot be made, Ray asked
            for and missing.
    """
    began = time.perf_counter()
    choice = choice or ExecutorChoice()
    folder = _out_folder(Path(out)) if out is not None else None
    cells = cells if cells is not None else grid_cells(grid)
    keys = [cell_key(cell.request) for cell in cells]
    records: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(keys):  # a cell that appears twice in a grid is planned once
        cached = read_cached(folder, key) if folder is not None else None
        if cached is not None:
            records[key] = cached
    cached_count = len(records)
    first = {key: i for i, key in reversed(list(enumerate(keys)))}  # a cell's first place in the grid
    todo = [i for key, i in first.items() if key not in records]
    todo.sort()
    total = len(set(keys))
    done = cached_count
    for position, results in run_calls(run_cell, [cells[i].request.model_dump_json() for i in todo], choice):
        index = todo[position]
        record = cell_record(cells[index], keys[index], results)
        if folder is not None:
            write_cached(folder, record)
        records[keys[index]] = record
        done += 1
        if on_result is not None:
            on_result(record, done, total)
    ordered = [records[key] for key in keys]
    files, notes = write_outputs(ordered, Path(out), grid.name) if out is not None else ({}, [])
    return SweepResult(records=ordered, planned=done - cached_count, cached=cached_count,
                       seconds=time.perf_counter() - began, backend=choice.describe(), files=files, notes=notes)
