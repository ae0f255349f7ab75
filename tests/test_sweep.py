"""shardplan sweep: the grid, the cell cache and resume after a kill, the outputs, local processes against Ray."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import SHARDPLAN, run_cli

from shardplan.errors import InputError
from shardplan.executor import ExecutorChoice, ray_available, run_calls
from shardplan.tools.fleet.cells import ROW_COLUMNS, cell_key
from shardplan.tools.fleet.grid import SweepGrid, bundled_grid, grid_cells, load_grid
from shardplan.tools.fleet.outputs import best_rows
from shardplan.tools.fleet.sweep import CELLS_FOLDER, run_sweep

# Llama-3.1-70B on 8 H100s at a rate is one of the quickest plans of the catalog (few layouts fit its memory).
_TINY = {"name": "tiny", "models": ["meta-llama/Llama-3.1-70B"], "gpus": ["H100"], "gpu_count": 8,
         "rates": [1, 2], "targets": [{"tpot_ms": 60}]}


def _grid(**changes) -> SweepGrid:
    return SweepGrid.model_validate(_TINY | changes)


def _results(records):
    """What must be equal however the cells ran (the wall time is not)."""
    return [{c: r[c] for c in ROW_COLUMNS} for r in records]


# ------------------------------------------------------------------------------------------------- the grid


def test_bundled_grid_is_3_models_by_3_gpus_by_3_rates():
    grid = load_grid(bundled_grid())
    cells = grid_cells(grid)
    assert len(grid.models) >= 3 and len(grid.gpus) >= 3 and len(grid.rates) >= 3
    assert len(cells) == grid.cell_count == len({cell_key(c.request) for c in cells})
    assert {c.gpu for c in cells} == set(grid.gpus)


def test_cells_carry_their_coordinates_into_the_request():
    cells = grid_cells(_grid(engines=["vllm", "sglang"], lengths=[{"isl": 1024, "osl": 128}]))
    assert len(cells) == 4
    for cell in cells:
        w = cell.request.workload
        assert (w.rate, w.engine, w.isl, w.osl, w.tpot_ms) == (cell.rate, cell.engine, 1024, 128, 60)
        assert cell.request.gpus == 8 and w.objective == "throughput"


def test_a_grid_price_reaches_the_request_and_changes_the_key():
    plain, priced = grid_cells(_grid())[0], grid_cells(_grid(prices={"h100": 1.25}))[0]
    assert priced.request.price.usd_per_gpu_hour == 1.25 and plain.request.price is None
    assert cell_key(plain.request) != cell_key(priced.request)


@pytest.mark.parametrize("changes, words", [
    ({"gpus": ["H999"]}, "unknown GPU"), ({"models": ["no-such-model-xyz"]}, "model"),
    ({"prices": {"H999": 1}}, "unknown GPU"),
])
def test_a_bad_grid_is_refused_before_any_cell_runs(changes, words):
    with pytest.raises(InputError) as caught:
        grid_cells(_grid(**changes))
    assert words in str(caught.value)


@pytest.mark.parametrize("text, field", [
    ("models: []\ngpus: [H100]\n", "models"), ("models: [a]\ngpus: [H100]\nrates: [0]\n", "grid"),
    ("models: [a]\ngpus: [H100]\ncolour: red\n", "colour"), ("- a\n", "grid"),
])
def test_a_malformed_grid_file_names_the_field(tmp_path, text, field):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_grid(path)
    assert field in caught.value.field


def test_lengths_take_the_pairs_people_write(tmp_path):
    """'[1024, 256]' and '"1024/256"' were refused as not a mapping; they are the lengths {isl, osl}."""
    path = tmp_path / "grid.yaml"
    path.write_text('models: [a]\ngpus: [H100]\nlengths: [[1024, 256], "2048/128", {isl: 512, osl: 64}]\n')
    assert [(x.isl, x.osl) for x in load_grid(path).lengths] == [(1024, 256), (2048, 128), (512, 64)]
    path.write_text('models: [a]\ngpus: [H100]\nlengths: ["a/b"]\n')
    with pytest.raises(InputError) as caught:
        load_grid(path)
    assert caught.value.field == "grid.lengths.0.isl"


def test_cli_refuses_a_bad_grid_with_exit_2(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text("models: [meta-llama/Llama-3.1-8B]\ngpus: [H999]\n")
    done = run_cli("sweep", str(path), "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and "unknown GPU" in done.stderr and "Traceback" not in done.stderr


# ----------------------------------------------------------------------------------------- the executor


def test_run_calls_gives_every_result_once_on_each_local_backend():
    for backend in ("threads", "processes"):
        got = sorted(run_calls(abs, [-3, 1, -7, 0], ExecutorChoice(backend, workers=2)))
        assert got == [(0, 3), (1, 1), (2, 7), (3, 0)]


def test_run_calls_raises_a_call_s_error():
    with pytest.raises(TypeError):
        list(run_calls(abs, [1, "x"], ExecutorChoice("threads", workers=1)))


def test_ray_asked_for_but_missing_is_an_input_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(InputError) as caught:
        list(run_calls(abs, [1], ExecutorChoice("ray")))
    assert "shardplan[ray]" in caught.value.fix


# --------------------------------------------------------------------------------- a sweep and its cache


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    return out, run_sweep(_grid(), out, ExecutorChoice("processes", workers=2))


def test_sweep_writes_every_table_and_a_plot_per_model(local_sweep):
    out, result = local_sweep
    assert result.planned == 2 and result.cached == 0
    with (out / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["cell"] for r in rows] == [r["cell"] for r in result.records]
    jsonl = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert _results(jsonl) == _results(result.records)
    for record in result.records:
        assert record["status"] == "ok" and record["gpus_used"] >= 1 and record["layout"]
        assert record["usd_per_hour"] == pytest.approx(record["gpus_used"] * record["usd_per_gpu_hour"])
    assert (out / "cost_vs_rate_meta-llama_Llama-3.1-70B.png").stat().st_size > 0
    pyarrow = pytest.importorskip("pyarrow.parquet", reason="pyarrow absent: Parquet output is skipped")
    assert pyarrow.read_table(out / "results.parquet").num_rows == 2


def test_a_rerun_reads_every_cell_from_the_cache(local_sweep):
    out, first = local_sweep
    again = run_sweep(_grid(), out, ExecutorChoice("threads", workers=1))
    assert again.planned == 0 and again.cached == 2
    assert again.records == first.records


def test_best_per_question_is_the_cheapest_meeting_the_targets():
    rows = [{"model": "m", "isl": 1, "osl": 2, "workload": None, "rate": 1.0, "ttft_target_ms": None,
             "tpot_target_ms": 50, "gpu": gpu, "engine": "vllm", "status": status, "gpus_used": gpus,
             "usd_per_million_output_tokens": usd}
            for gpu, status, gpus, usd in (("H100", "ok", 4, 2.0), ("H200", "ok", 2, 1.5),
                                           ("B200", "targets_missed", 1, 0.5))]
    assert [r["gpu"] for r in best_rows(rows)] == ["H200"]
    missed = [r | {"status": "targets_missed"} for r in rows]
    assert best_rows(missed)[0]["status"] == "none_meets_targets"


# ------------------------------------------------------------------------------------- resume after a kill


def test_a_killed_sweep_reruns_only_the_unfinished_cells(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps(_TINY | {"rates": [0.5, 1, 2, 3]}))  # JSON is YAML
    out = tmp_path / "out"
    cells = out / CELLS_FOLDER
    process = subprocess.Popen([SHARDPLAN, "sweep", str(grid), "-o", str(out), "--workers", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (cells.is_dir() and any(cells.glob("*.json"))):
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    finished = {p.stem for p in cells.glob("*.json")}
    assert 1 <= len(finished) < 4, "the sweep should have been killed after its first cell"
    for path in cells.glob("*.json"):
        json.loads(path.read_text())  # no half-written record
    assert not (out / "results.csv").exists()

    rerun = run_cli("sweep", str(grid), "-o", str(out), "--workers", "1", "--json", timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["cached"] == len(finished) and summary["planned"] == 4 - len(finished)
    assert finished < {p.stem for p in cells.glob("*.json")}


# --------------------------------------------------------------------------------------------------- Ray


@pytest.mark.skipif(not ray_available(), reason='Ray is not installed (pip install "shardplan[ray]"): the Ray '
                    "path of shardplan sweep is not tested here")
def test_a_local_ray_gives_the_same_rows_as_local_processes(local_sweep, tmp_path):
    _, local = local_sweep
    on_ray = run_sweep(_grid(), tmp_path, ExecutorChoice("ray", workers=2))
    assert on_ray.planned == 2 and on_ray.backend == "a local Ray of 2 CPUs"
    assert _results(on_ray.records) == _results(local.records)


def test_cli_reads_a_bare_ray_flag_as_a_local_ray(tmp_path, monkeypatch):
    from shardplan.cli.ray_option import LOCAL_RAY, BareRayFlag

    seen = []
    monkeypatch.setattr("typer.core.TyperCommand.parse_args", lambda self, ctx, args: seen.append(args) or args)
    command = BareRayFlag("sweep")
    grid = tmp_path / "g.yaml"
    grid.write_text("x")
    command.parse_args(None, ["--ray", str(grid)])
    command.parse_args(None, [str(grid), "--ray"])
    command.parse_args(None, ["--ray", "--workers", "2", "g"])
    command.parse_args(None, ["--ray", "ray://head:10001", "g"])
    assert seen[0][:2] == ["--ray", LOCAL_RAY] and seen[1][-1] == LOCAL_RAY and seen[2][1] == LOCAL_RAY
    assert seen[3][1] == "ray://head:10001"


# ------------------------------------------------------------------------------- the same executor for eval


def test_eval_runs_on_the_sweep_s_executor_with_the_same_records(tmp_path):
    from shardplan.evals.cases import load_cases
    from shardplan.evals.runner import run_eval

    cases = [c for c in load_cases(None) if c.id in ("neg-405b-does-not-fit", "neg-prompt-length-contradiction")]
    threads = run_eval(cases, ["builtin"], tmp_path / "threads")
    processes = run_eval(cases, ["builtin"], tmp_path / "processes",
                         choice=ExecutorChoice("processes", workers=2))
    varying = {"wall_s", "finished_at"}
    assert len(processes) == 2
    assert [{k: v for k, v in r.items() if k not in varying} for r in processes] == [
        {k: v for k, v in r.items() if k not in varying} for r in threads]


def test_a_cell_the_planner_fails_is_a_row_saying_why(monkeypatch):
    from shardplan.tools.fleet import cells

    def broken(request):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cells, "plan", broken)
    row = cells.run_cell(grid_cells(_grid())[0].request.model_dump_json())
    assert row["status"] == "error" and row["error"] == "ZeroDivisionError: division by zero"
    assert row["usd_per_hour"] is None and set(cells.RESULT_COLUMNS) <= set(row)
