"""One walk per request: the agent's later steps read what its tool calls computed instead of computing it again.

The propose_strategy tool builds, validates and prices the proposed deployment once; the checker reads that
tool result from the graph state, and the answer and the plan's DAG come from the same evaluation.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from shardplan.agent import nodes
from shardplan.agent.graph import build_graph, recursion_limit
from shardplan.agent.run import plan_from_state, request_message, stream_turn
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload
from shardplan.tools.api import shared
from shardplan.tools.planning import planner


def test_a_planning_turn_evaluates_each_proposed_deployment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    shared._evaluate.cache_clear()
    evaluated: list[str] = []
    checker: list[str] = []
    replanned: list[str] = []
    original = shared.evaluate_deployment

    def counting(model: Any, cluster: Any, strategy: Any, workload: Any, chosen: Any = None) -> Any:
        evaluated.append(strategy.to_spec())
        return original(model, cluster, strategy, workload, chosen)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        replanned.append("planner")
        raise AssertionError("the answer evaluated the deployment a second time")

    def checked(request: Any, strategy: str) -> Any:
        checker.append(strategy)
        return shared._evaluate(shared._request_key(request), strategy)[0]

    monkeypatch.setattr(shared, "evaluate_deployment", counting)
    monkeypatch.setattr(planner, "evaluate_deployment", refuse)
    monkeypatch.setattr(nodes.shared, "evaluate_strategy", checked)

    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=2,
                          workload=Workload(isl=512, osl=64, ttft_ms=300, tpot_ms=20, objective="throughput"))
    payload = {"messages": [HumanMessage(content=request_message(request))],
               "given_request": request.model_dump(mode="json")}
    state = stream_turn(build_graph("builtin"), payload, {"recursion_limit": recursion_limit()})
    plan = plan_from_state(state)

    proposed = [p["strategy"] for p in state["proposals"]]
    assert proposed and plan.status == "ok" and plan.dag is not None
    assert checker == [], "the checker read the tool results"
    assert sorted(evaluated) == sorted(set(proposed)), "each proposed deployment was evaluated once, by its tool"
    assert replanned == []
