"""``shardplan simulate`` through the CLI entry point: the summary as JSON and as tables, the files it writes, and
malformed input as one ``error:`` line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_main

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request


def _plan_file(folder: Path, spec: str, gpus: int) -> Path:
    workload = Workload(isl=1024, osl=128, ttft_ms=500, tpot_ms=30, objective="throughput")
    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100", gpus=gpus, workload=workload)
    model, cluster = resolve_request(request)
    path = folder / f"{spec.replace(';', '_').replace(':', '-')}.json"
    path.write_text(plan_for_strategy(request, model, cluster, parse_strategy(spec)).model_dump_json())
    return path


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("simulate")
    return {"replica": _plan_file(folder, "tp=1", 1), "split": _plan_file(folder, "prefill:tp=1;decode:tp=1;disagg", 2)}


_run = run_main


def test_json_gives_percentiles_goodput_and_preemptions(
    plans: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["simulate", str(plans["replica"]), "--rate", "4", "--requests", "600", "--json"]) == 0
    summary = SimulationSummary.model_validate(json.loads(capsys.readouterr().out))
    assert summary.figures.source == "simulation" and summary.requests == 600 and summary.rate == 4.0
    assert set(summary.figures.percentiles) == {"ttft", "tpot", "e2e"}
    assert summary.figures.percentiles["ttft"].p99_ms >= summary.figures.percentiles["ttft"].p50_ms > 0
    assert 0 <= summary.goodput <= 1 and summary.preemptions == 0
    assert summary.analytic is not None and summary.analytic.source == "steady_state"


def test_tables_and_the_files_it_writes(plans: dict[str, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out, trace = tmp_path / "summary.json", tmp_path / "trace.json"
    argv = ["simulate", str(plans["split"]), "--arrival", "closed:8", "--osl-dist", "uniform:64,192", "--requests",
            "300", "--seed", "3", "-o", str(out), "--trace", str(trace)]
    assert _run(argv) == 0
    text = capsys.readouterr().out
    for expected in ("TTFT", "TPOT", "P95", "P99", "plan (steady state)", "goodput", "preemptions",
                     "closed loop of 8 clients", "KV transfer"):
        assert expected in text, expected
    summary = SimulationSummary.model_validate_json(out.read_text())
    assert summary.seed == 3 and summary.rate is None and summary.router == "least_outstanding"
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "prefill pool" or e.get("args", {}).get("name") == "prefill pool" for e in events)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--arrival", "sometimes"], "arrival"),
        (["--isl-dist", "normal:5"], "isl_dist"),
        (["--router", "random"], "router"),
        (["--rate", "0"], "rate"),
        (["--workload", "sharegpt.jsonl"], "trace"),
    ],
)
def test_malformed_input_is_one_line_and_exit_2(
    plans: dict[str, Path], extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["simulate", str(plans["replica"]), "--requests", "10", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and says in err


def test_an_infeasible_plan_or_a_dag_is_refused(plans: dict[str, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(plans["replica"].read_text())
    infeasible = tmp_path / "infeasible.json"
    infeasible.write_text(json.dumps({**data, "status": "infeasible", "strategy": None, "deployment": None,
                                      "figures": None, "dag": None}))
    assert _run(["simulate", str(infeasible)]) == 2
    assert "infeasible plan" in capsys.readouterr().err
    dag = tmp_path / "dag.json"
    dag.write_text(json.dumps(data["dag"]))
    assert _run(["simulate", str(dag)]) == 2
    assert "is not a plan file (it looks like a DAG" in capsys.readouterr().err


def test_a_plan_at_a_rate_simulated_at_that_rate_is_not_called_near_its_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The note on arrivals close to what the deployment serves compared the rate with the steady state's own
    requests/s, which for a plan made at a rate is that rate: every such plan simulated at its rate was "at 100% of
    what it serves". It now compares with what the deployment serves with its running set full."""
    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100", gpus=1,
                          workload=Workload(isl=1024, osl=256, rate=5.0))
    model, cluster = resolve_request(request)
    path = tmp_path / "at_rate.json"
    path.write_text(plan_for_strategy(request, model, cluster, parse_strategy("tp=1")).model_dump_json())
    assert _run(["simulate", str(path), "--rate", "5", "--requests", "300", "--json"]) == 0
    notes = " ".join(SimulationSummary.model_validate(json.loads(capsys.readouterr().out)).notes)
    assert "close to the most it can serve" not in notes and "100% of" not in notes
    assert _run(["simulate", str(path), "--rate", "40", "--requests", "500", "--json"]) == 0
    notes = " ".join(SimulationSummary.model_validate(json.loads(capsys.readouterr().out)).notes)
    assert "the queue does not settle" in notes
