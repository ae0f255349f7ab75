"""The planning graph end to end with the built-in policy: real tool calls, real checks, no network.

Each run is checkpointed, and the assertions read the state history: which steps ran in which order,
which tools the policy called, how many model calls it took.
"""

from __future__ import annotations

import re

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from shardplan.agent.graph import Limits, build_graph, recursion_limit
from shardplan.agent.policies import BuiltinPlanner, PolicyError, repair_spec
from shardplan.agent.run import plan_from_state, request_message, run_plan
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload
from shardplan.tools.planning.planner import plan as deterministic_plan

RULE_ID = re.compile(r"\b[A-Z]+-\d+\b")


def _request(model: str, gpu: str, gpus: int, **workload: object) -> PlanRequest:
    return PlanRequest(model=model, gpu=gpu, gpus=gpus, workload=Workload(**workload))  # type: ignore[arg-type]


def _run(request: PlanRequest, policy: object = "builtin", limits: Limits | None = None) -> tuple[dict, list]:
    graph = build_graph(policy, checkpointer=InMemorySaver(), limits=limits)  # type: ignore[arg-type]
    config = {"configurable": {"thread_id": "test"}, "recursion_limit": recursion_limit(limits)}
    payload = {"messages": [HumanMessage(content=request_message(request))],
               "given_request": request.model_dump(mode="json")}
    state = graph.invoke(payload, config)
    history = list(reversed(list(graph.get_state_history(config))))
    return state, history


def _tool_calls(state: dict) -> list[str]:
    return [call["name"] for m in state["messages"] if isinstance(m, AIMessage) for call in m.tool_calls]


def _steps(history: list) -> list[str]:
    return [name for snapshot in history for name in snapshot.next]


FEASIBLE = [
    pytest.param(_request("llama-3.1-8b", "H100", 1, isl=1024, osl=128), id="dense-1gpu"),
    pytest.param(_request("llama-3.1-8b", "H100", 2, isl=2048, osl=256, batch=4), id="dense-tp"),
    pytest.param(_request("qwen3-8b", "A100", 2, isl=512, osl=64, batch=2, ttft_ms=2000, tpot_ms=100),
                 id="dense-loose-targets"),
    pytest.param(_request("Qwen3-30B-A3B", "H100", 8, isl=2048, osl=128, batch=16), id="moe-one-node"),
    pytest.param(_request("mixtral-8x7b", "H100", 4, isl=1024, osl=128, batch=8, objective="throughput"),
                 id="moe-throughput"),
    pytest.param(_request("llama-3.1-70b", "H100", 16, isl=2048, osl=256, batch=8), id="dense-two-nodes"),
    pytest.param(_request("gpt-oss-20b", "H200", 2, isl=8192, osl=256, batch=2), id="moe-long-prompt"),
]


@pytest.mark.parametrize("request_", FEASIBLE)
def test_builtin_plans_a_valid_strategy_through_tool_calls(request_: PlanRequest) -> None:
    state, history = _run(request_)
    plan = plan_from_state(state)
    assert plan.status == "ok"
    assert plan.validation is not None and plan.validation.valid
    assert plan.dag is not None and len(plan.dag.nodes) == plan.validation.nodes
    # The graph reaches what the deterministic planner reaches, through real tool calls.
    reference = deterministic_plan(request_)
    assert plan.strategy == reference.strategy
    assert [a.strategy for a in plan.alternatives] == [a.strategy for a in reference.alternatives]
    assert _tool_calls(state) == ["search_strategies", "propose_strategy"]
    assert _steps(history) == ["__start__", "understand", "retrieve", "propose", "tools", "check", "propose", "tools",
                               "check", "respond"]
    assert state["iterations"] == 2
    assert [p["strategy"] for p in state["proposals"]] == [plan.strategy.to_spec()]  # type: ignore[union-attr]
    assert state["rules"] and all(RULE_ID.fullmatch(r["id"]) for r in state["rules"])
    assert RULE_ID.search(plan.explanation)
    if plan.alternatives:
        assert f"Runner-up {plan.alternatives[0].strategy}" in plan.explanation
    final = state["messages"][-1]
    assert isinstance(final, AIMessage) and final.content == plan.explanation


def test_builtin_tight_targets_returns_best_valid_plan_and_says_what_is_missed() -> None:
    request = _request("llama-3.1-70b", "H100", 16, isl=2048, osl=256, batch=8, ttft_ms=50, tpot_ms=5)
    state, history = _run(request)
    plan = plan_from_state(state)
    assert plan.status == "targets_missed"
    assert plan.validation is not None and plan.validation.valid
    assert plan.strategy == deterministic_plan(request).strategy
    # search, propose the best, read the checker's "misses", then accept the best valid one.
    assert _tool_calls(state) == ["search_strategies", "propose_strategy"]
    assert state["iterations"] == 3
    checker = [m for m in state["messages"] if isinstance(m, HumanMessage) and m.name == "checker"]
    assert len(checker) == 1 and "misses" in checker[0].content and "TTFT" in checker[0].content
    assert "No strategy met every target" in state["messages"][-1].content
    assert any("TTFT" in m and "target 50 ms" in m for m in plan.messages)
    assert _steps(history)[-1] == "respond"


def test_builtin_infeasible_request_gives_infeasible_plan_with_min_gpus() -> None:
    request = _request("llama-3.1-405b", "L40S", 2, isl=2048, osl=256)
    state, _ = _run(request)
    plan = plan_from_state(state)
    assert plan.status == "infeasible" and plan.strategy is None
    assert plan.min_gpus == deterministic_plan(request).min_gpus
    assert plan.min_gpus is not None and plan.min_gpus > 2
    assert "MEM-1" in plan.explanation
    assert _tool_calls(state) == ["search_strategies"]
    assert state["infeasible"]["min_gpus"] == plan.min_gpus
    assert state["proposals"] == []


class _FirstProposesSpInDecode(BuiltinPlanner):
    """Proposes sequence parallelism in decode first (SP-1), then plans as the built-in policy does."""

    def next_message(self, messages, bound):  # type: ignore[no-untyped-def]
        reply = super().next_message(messages, bound)
        proposed = any(isinstance(m, ToolMessage) and m.name == "propose_strategy" for m in messages)
        if reply.tool_calls and reply.tool_calls[0]["name"] == "propose_strategy" and not proposed:
            args = {**reply.tool_calls[0]["args"], "strategy": "prefill:sp=2,tp=2;decode:sp=2,tp=2"}
            return AIMessage(content="", tool_calls=[{**reply.tool_calls[0], "args": args}])
        return reply


def test_builtin_repairs_from_the_checkers_fix_hint() -> None:
    request = _request("llama-3.1-8b", "H100", 4, isl=4096, osl=128, batch=4)
    state, _ = _run(request, policy=_FirstProposesSpInDecode())
    proposals = state["proposals"]
    assert [p["valid"] for p in proposals] == [False, True]
    assert {v["rule"] for v in proposals[0]["violations"]} == {"SP-1"}
    assert proposals[1]["strategy"] == "prefill:sp=2,tp=2;decode:adp=2,tp=2"  # the SP-1 fix: decode sp -> adp
    feedback = next(m for m in state["messages"] if isinstance(m, HumanMessage) and m.name == "checker")
    assert "SP-1" in feedback.content and "Fix:" in feedback.content
    plan = plan_from_state(state)
    assert plan.validation is not None and plan.validation.valid
    assert plan.strategy is not None and plan.strategy.to_spec() == proposals[1]["strategy"]


def test_iterations_are_bounded_when_nothing_passes() -> None:
    class AlwaysTp3(BuiltinPlanner):
        def next_message(self, messages, bound):  # type: ignore[no-untyped-def]
            reply = super().next_message(messages, bound)
            if reply.tool_calls and reply.tool_calls[0]["name"] == "search_strategies":
                return reply
            args = {"model": "llama-3.1-8b", "gpus": 2, "isl": 512, "osl": 64, "strategy": "tp=3"}
            return AIMessage(content="", tool_calls=[{"name": "propose_strategy", "id": f"c{len(messages)}",
                                                      "args": args}])

    request = _request("llama-3.1-8b", "H100", 2, isl=512, osl=64)
    state, _ = _run(request, policy=AlwaysTp3(), limits=Limits(max_iterations=3))
    assert state["iterations"] == 3
    assert state["plan"] is None
    assert "TP-3" in state["messages"][-1].content and "3 model call" in state["messages"][-1].content
    with pytest.raises(PolicyError, match="no valid strategy after 3 model call"):
        plan_from_state(state)


def test_builtin_next_message_is_deterministic_and_repairs_sp_in_decode() -> None:
    assert repair_spec("prefill:sp=4,tp=2;decode:sp=4,tp=2", [{"rule": "SP-1"}]) == \
        "prefill:sp=4,tp=2;decode:adp=4,tp=2"
    assert repair_spec("tp=3", [{"rule": "TP-3"}]) is None  # no mechanical fix: the next candidate follows


def test_run_plan_goes_through_the_graph_and_streams_progress(capsys: pytest.CaptureFixture[str]) -> None:
    request = _request("llama-3.1-8b", "H100", 2, isl=1024, osl=128, batch=2)
    plan = run_plan(request, progress=True)
    err = capsys.readouterr().err
    assert plan.status == "ok" and plan.dag is not None
    assert "retrieved" in err and "DEC-1" in err
    assert "propose: propose_strategy(tp=2)" in err
    assert "check: tp=2 valid | TTFT" in err
    assert "respond: ok" in err
    assert plan.request.policy == "builtin"


def test_wall_time_bound_stops_the_loop_with_what_it_has() -> None:
    request = _request("llama-3.1-8b", "H100", 2, isl=512, osl=64)
    state, history = _run(request, limits=Limits(max_seconds=0.0))
    assert state["iterations"] == 1  # the search ran, then the deadline had passed
    assert _tool_calls(state) == ["search_strategies"]
    assert state["plan"] is None and "no valid strategy after 1 model call" in state["messages"][-1].content
    assert _steps(history)[-1] == "respond"
