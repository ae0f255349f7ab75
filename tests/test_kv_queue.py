"""Load past the KV cache is not infeasible: a fixed concurrency above what a replica's cache holds is a closed
loop the engine queues, and the plan gives the queueing figures with a note naming the running cap."""

from __future__ import annotations

import pytest
from cli_helpers import run_here

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request

# NVIDIA NIM's published sweep: Llama-3.3-70B FP8 on 2 x H100, TP=2, 5000-token prompts, 500-token outputs.
NIM = dict(model="meta-llama/Llama-3.1-70B", gpu="H100", gpus=2, weight_dtype="fp8")


def _plan(batch: int) -> object:
    request = PlanRequest(**NIM, workload=Workload(isl=5000, osl=500, batch=batch))  # type: ignore[arg-type]
    model, cluster = resolve_request(request)
    return plan_for_strategy(request, model, cluster, parse_strategy("tp=2"))


def test_a_concurrency_past_the_kv_cache_queues_instead_of_failing() -> None:
    held, past = _plan(25), _plan(100)
    for plan in (held, past):
        assert plan.status == "ok" and plan.figures is not None and plan.figures.fits  # type: ignore[attr-defined]
    [pool] = past.deployment.pools  # type: ignore[attr-defined]
    cap = pool.max_concurrency_per_worker
    assert 25 < cap < 100, "the cache holds more than 25 and fewer than 100 sequences of 5.5k tokens"
    assert any(f"the engine runs {cap} and queues the rest" in m for m in past.messages)  # type: ignore[attr-defined]
    f = past.figures  # type: ignore[attr-defined]
    # Little's law over the closed loop: 100 sequences = rate x (TTFT with its wait + 499 TPOT).
    assert f.requests_per_s * (f.ttft_ms + 499 * f.tpot_ms) / 1e3 == pytest.approx(100, rel=0.01)
    assert f.ttft_ms > 5 * held.figures.ttft_ms  # type: ignore[attr-defined]
    # The DAG is the running batch's, so it fits; the queue lives outside the GPUs.
    assert past.dag_cost is not None and past.dag_cost.figures.fits  # type: ignore[attr-defined]


def test_running_more_sequences_is_the_cap_itself() -> None:
    past, further = _plan(100), _plan(150)
    # Past the cap the engine runs the same batch: same TPOT and rate, and the wait grows with the clients.
    assert past.figures.tpot_ms == further.figures.tpot_ms  # type: ignore[attr-defined]
    assert past.figures.requests_per_s == further.figures.requests_per_s  # type: ignore[attr-defined]
    assert further.figures.ttft_ms > past.figures.ttft_ms  # type: ignore[attr-defined]


def test_the_terminal_names_the_running_cap(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the note on one line
    done = run_here(capsys, "plan", "-m", NIM["model"], "--gpu", "H100", "--gpus", "2", "-s", "tp=2", "--isl", "5000",
                    "--osl", "500", "--weight-dtype", "fp8", "--batch", "100")
    assert done.returncode == 0, done.stderr
    assert "status: ok" in done.stdout and "infeasible" not in done.stdout
    assert "note:" in done.stdout and "queues the rest" in done.stdout
