"""One verdict on the targets: the plan, the search's frontier and the agent's answer agree, right at a bound.

A layout serves some rate R under the targets: the largest request rate whose plan (open arrivals at that rate)
meets them. Asked for 99.95% of R it meets them; asked for 100.05% it misses the rate by 0.05%. Each surface must
say the same, since they all ask :func:`shardplan.contracts.targets.misses`.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_here, run_main
from langchain_core.messages import AIMessage, HumanMessage

from shardplan.agent.graph import build_graph, recursion_limit
from shardplan.agent.run import plan_from_state, request_message, stream_turn
from shardplan.contracts.figures import make_figures
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.targets import TOLERANCE, Targets, meets, misses, shortfall
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.deployments import given_deployment

# One H100 holds one layout of Llama-3.1-8B (tp=1), so the search, the review and the agent price the same one.
ASK = ["-m", "llama-3.1-8b", "--gpu", "H100", "--gpus", "1", "--isl", "512", "--osl", "64",
       "--ttft-ms", "500", "--tpot-ms", "25"]
SPEC = "tp=1"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> float:
    """The requests/s the layout serves under the targets: near its plan for throughput (a closed population of
    sequences in flight), and found exactly among the rates whose plans (open arrivals) meet them."""
    written = tmp_path_factory.mktemp("served") / "plan.json"
    assert run_main(["plan", *ASK, "-s", SPEC, "-o", str(written)]) == 0
    plan = json.loads(written.read_text())
    assert plan["status"] == "ok", plan["misses"]
    closed = float(plan["figures"]["requests_per_s"])
    model, cluster, strategy = load_model("llama-3.1-8b"), make_cluster("H100", 1), parse_strategy(SPEC)

    def meets_at(rate: float) -> bool:
        workload = Workload(isl=512, osl=64, ttft_ms=500, tpot_ms=25, objective="throughput", rate=rate)
        return any(o.meets_targets for o in given_deployment(model, cluster, strategy, workload))

    low, high = closed * 0.9, closed * 1.1
    assert meets_at(low) and not meets_at(high)
    while high - low > closed * 1e-6:
        middle = (low + high) / 2
        low, high = (middle, high) if meets_at(middle) else (low, middle)
    assert low == pytest.approx(closed, rel=0.02), "a closed population and open arrivals serve about the same"
    return low


def _plan_verdict(rate: float, capsys: pytest.CaptureFixture[str]) -> tuple[bool, int]:
    result = run_here(capsys, "plan", *ASK, "-s", SPEC, "--rate", repr(rate), "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    rate_missed = [m for m in plan["misses"] if m["metric"] == "rate"]
    assert (plan["status"] == "ok") == (not plan["misses"])
    return not rate_missed and plan["status"] == "ok", int(plan["deployment"]["concurrency"])


def _frontier_verdict(rate: float, concurrency: int, capsys: pytest.CaptureFixture[str]) -> bool:
    """Whether the search's frontier holds the plan's deployment meeting the targets (a frontier of deployments
    that meet them, else of all); the search's best is that same deployment."""
    result = run_here(capsys, "search", *ASK, "--rate", repr(rate), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["candidates"][0]["concurrency"] == concurrency, "the search's best is the plan's deployment"
    for point in data["frontier"]:
        assert point["meets_targets"] == (not point["misses"])
    same = [p for p in data["frontier"] if p["concurrency"] == concurrency]
    return bool(same) and same[0]["meets_targets"] and all(p["meets_targets"] for p in data["frontier"])


def _agent_verdict(rate: float) -> bool:
    workload = Workload(isl=512, osl=64, ttft_ms=500, tpot_ms=25, objective="throughput", rate=rate)
    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=1, workload=workload)
    payload = {"messages": [HumanMessage(content=request_message(request))],
               "given_request": request.model_dump(mode="json")}
    state = stream_turn(build_graph("builtin"), payload, {"recursion_limit": recursion_limit()})
    answer = state["messages"][-1]
    assert isinstance(answer, AIMessage)
    planned = plan_from_state(state)
    said_missed = "misses" in str(answer.content)
    assert said_missed == (planned.status != "ok")
    return not said_missed


@pytest.mark.parametrize("share", [0.9995, 1.0005])
def test_the_plan_the_frontier_and_the_agent_agree_at_the_rate_bound(
    served: float, share: float, capsys: pytest.CaptureFixture[str]
) -> None:
    rate = served * share
    planned, concurrency = _plan_verdict(rate, capsys)
    assert planned == (share < 1), f"{share:.2%} of the served rate: the plan says {'meets' if planned else 'misses'}"
    assert _frontier_verdict(rate, concurrency, capsys) == planned
    assert _agent_verdict(rate) == planned


def test_one_tolerance_for_every_bound() -> None:
    figures = make_figures("steady_state", ttft_ms=500.0, tpot_ms=25.0, osl=64, tokens_per_s=640.0, requests_per_s=10.0,
                           memory_per_gpu_gb=60.0, gpu_memory_gb=80.0, fits=True, gpus_used=1, gpu_budget=1)
    exact = Targets(ttft_ms=500.0, tpot_ms=25.0, rate=10.0)
    assert meets(figures, exact) and shortfall(figures, exact) == 0
    past = 1 + 10 * TOLERANCE
    beyond = Targets(ttft_ms=500.0 / past, tpot_ms=25.0 / past, rate=10.0 * past)
    assert [m.metric for m in misses(figures, beyond)] == ["ttft", "tpot", "rate"]
    assert all(m.gap > 0 and m.message for m in misses(figures, beyond))
    tight = figures.model_copy(update={"fits": False, "memory_per_gpu_gb": 79.0})
    (memory,) = misses(tight, Targets())
    assert memory.metric == "memory" and "MEM-1" in memory.message


@pytest.mark.parametrize(("prefill", "status"), [([], "infeasible"), (["--prefill-batch", "4"], "ok")])
def test_the_plan_and_the_cost_report_hold_a_static_batch_s_prefill_alike(
    capsys: pytest.CaptureFixture[str], prefill: list[str], status: str
) -> None:
    """64 prompts of 4k tokens prefilled at once need 96 GB of one H100 (the activations of 262k tokens); four at a
    time, 63 GB. The plan sized its memory as if the whole batch were prefilled together, whatever --prefill-batch
    said, and called the deployment infeasible where `shardplan cost` of the same request fitted it."""
    ask = ["-m", "llama-3.1-8b", "--gpu", "H100", "--gpus", "1", "-s", "tp=1", "--batch", "64", "--batching",
           "static", "--isl", "4096", "--osl", "128", *prefill, "--json"]
    planned = run_here(capsys, "plan", *ask)
    costed = run_here(capsys, "cost", *ask)
    plan, cost = json.loads(planned.stdout), json.loads(costed.stdout)
    assert plan["status"] == status
    assert [m["total_gb"] for m in plan["dag_cost"]["memory"]] == [m["total_gb"] for m in cost["memory"]]
    assert all(m["fits"] for m in cost["memory"]) == (status == "ok")
