"""Wall time of `shardplan sweep` over the bundled example grid, on local processes and on a local Ray.

Run: .venv/bin/python benchmarks/bench_sweep.py [--runs N] [--workers W] [--grid GRID.yaml]
Each run starts from an empty output folder (no cell cached), so it plans every cell; a local Ray is started
and shut down inside each Ray run, its start-up included. Prints min / median / max wall seconds per backend,
and checks that both backends give the same rows (the planner is deterministic; the wall time per cell is
left out of the comparison). Ray runs are skipped with a message where Ray is not installed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from shardplan.executor import ExecutorChoice, ray_available
from shardplan.tools.fleet.cells import ROW_COLUMNS
from shardplan.tools.fleet.grid import bundled_grid, load_grid
from shardplan.tools.fleet.sweep import run_sweep


def timed(grid_path: Path, choice: ExecutorChoice, runs: int) -> tuple[list[float], list[dict[str, object]]]:
    grid = load_grid(grid_path)
    seconds, rows = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-sweep-") as out:
            began = time.perf_counter()
            result = run_sweep(grid, out, choice)
            seconds.append(time.perf_counter() - began)
            rows = [{c: r[c] for c in ROW_COLUMNS} for r in result.records]
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="local processes and local Ray CPUs")
    parser.add_argument("--grid", type=Path, default=bundled_grid())
    args = parser.parse_args()
    grid = load_grid(args.grid)
    choices = [ExecutorChoice("processes", workers=args.workers)]
    if ray_available():
        choices.append(ExecutorChoice("ray", workers=args.workers))
    else:
        print('Ray is not installed (pip install "shardplan[ray]"): local processes only')
    print(f"grid {grid.name}: {grid.cell_count} cells, {args.runs} run(s) each, every cell planned afresh")
    print("| backend | runs | min s | median s | max s | s per cell (median) |")
    print("| --- | --- | --- | --- | --- | --- |")
    results = []
    for choice in choices:
        seconds, rows = timed(args.grid, choice, args.runs)
        results.append(rows)
        median = statistics.median(seconds)
        print(f"| {choice.describe()} | {len(seconds)} | {min(seconds):.1f} | {median:.1f} | {max(seconds):.1f} | "
              f"{median / grid.cell_count:.2f} |")
    if len(results) == 2:
        print("rows identical on both backends:", results[0] == results[1])


if __name__ == "__main__":
    main()
