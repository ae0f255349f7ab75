"""Engines under open arrivals take their identical steps in runs, whatever the number of engines: three decode
workers routed by least outstanding requests each take about as many steps as one replica would, not one step per
token while another worker is busy (which priced split pools with long outputs at low rates in minutes)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.traffic import LognormalLength, Traffic
from shardplan.contracts.workload import Workload
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request
from shardplan.tools.simulation import engine as engine_module
from shardplan.tools.simulation.run import SimulationOptions, simulate

REQUESTS = 200


@pytest.fixture
def steps_taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times any engine was asked for its next step (a run of identical steps counts once)."""
    calls = [0]
    step = engine_module.Engine.step

    def counted_step(self: engine_module.Engine, horizon: float) -> object:
        calls[0] += 1
        return step(self, horizon)

    monkeypatch.setattr(engine_module.Engine, "step", counted_step)
    yield calls


@pytest.mark.parametrize("spec", ["prefill:tp=1;decode:dp=3,tp=1;disagg", "dp=3,tp=1"])
def test_several_engines_step_in_runs_under_open_arrivals(spec: str, steps_taken: list[int]) -> None:
    workload = Workload(isl=512, osl=1024, rate=0.5, objective="throughput")
    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100", gpus=4, workload=workload)
    model, cluster = resolve_request(request)
    plan = plan_for_strategy(request, model, cluster, parse_strategy(spec))
    priced = plan.priced()
    assert priced is not None
    drawn = workload.model_copy(update={"traffic": Traffic(osl=LognormalLength(kind="lognormal", mean=1024, cv=1.0))})
    run = simulate(model, cluster, priced, drawn, requests=REQUESTS, rate=0.5,
                   options=SimulationOptions(router="least_outstanding"))
    assert run.summary.requests == REQUESTS and not (run.requests.finish != run.requests.finish).any()
    tokens = int(run.requests.osl.sum())
    # One step per token would be ~tokens (about 200,000); in runs it is a few per request (arrival, admission,
    # completion, a KV block filling).
    assert steps_taken[0] < 20 * REQUESTS < tokens / 10, (steps_taken[0], tokens)
