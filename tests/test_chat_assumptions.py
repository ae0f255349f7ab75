"""Chat honours constraints said in words and states every assumption it made, in the answer and the plan."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from shardplan.agent.graph import build_graph, recursion_limit

HEADLINE = "DeepSeek R1 on 8 H200, 4k in / 1k out, no pipeline parallelism, max throughput"


def _turns(*texts: str) -> list[dict]:
    graph = build_graph("builtin", checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "chat"}, "recursion_limit": recursion_limit()}
    return [graph.invoke({"messages": [HumanMessage(content=text)]}, config) for text in texts]


def _answer(state: dict) -> str:
    return str(next(m.content for m in reversed(state["messages"]) if isinstance(m, AIMessage)))


def test_deepseek_r1_is_planned_as_v3_without_pp_and_every_assumption_is_stated() -> None:
    [state] = _turns(HEADLINE)
    plan = state["plan"]
    assert plan["request"]["model"] == "deepseek-ai/DeepSeek-V3"
    assert (plan["request"]["workload"]["isl"], plan["request"]["workload"]["osl"]) == (4096, 1024)
    assert plan["request"]["workload"]["objective"] == "throughput"
    assert plan["strategy"]["prefill"]["pp"] == 1 and plan["strategy"]["decode"]["pp"] == 1
    answer = _answer(state)
    assert "Constraints honoured: pp=1" in answer
    # Each value the message did not give is one "Assumed:" line, in the answer and in the plan.
    expected = ("DeepSeek-V3 (same architecture", "GPUs per node", "sequences in flight: not given", "weights in fp8")
    for said in (*expected, "KV cache in bf16"):
        assert any(said in line for line in plan["assumptions"]), said
        assert any(said in line for line in answer.splitlines() if line.startswith("Assumed: ")), said
    for given in ("prompt length", "output length", "objective"):
        assert not any(line.startswith(given) for line in plan["assumptions"]), given


def test_a_follow_up_keeps_the_constraints_and_a_contradicting_one_is_asked_back() -> None:
    first, second = _turns("Llama 3.1 70B on 16 H100, 2k/256, no PP", "now with TP inside a node")
    for state in (first, second):
        assert state["plan"]["strategy"]["decode"]["pp"] == 1
    assert {"pp=1", "tp-in-node"} <= set(second["parsed"]["constraints"])
    assert second["plan"]["strategy"]["decode"]["tp"] <= 8
    [asked] = _turns("Llama 3.1 70B on 16 H100, pp=2 and pp=4")
    assert "pp=2" in _answer(asked) and "pp=4" in _answer(asked)


def test_a_constraint_nothing_satisfies_is_an_infeasible_answer_naming_it() -> None:
    # 16 pipeline stages need 16 GPUs: more than the 8 the request has.
    [state] = _turns("Llama 3.1 8B on 8 H100, 1k/128, pp=16")
    assert state["plan"]["status"] == "infeasible"
    assert "pp=16" in _answer(state)


def test_a_prompt_longer_than_the_context_is_refused_with_both_numbers() -> None:
    [state] = _turns("Llama 3.1 70B on 8 H100, 200000 token prompts, 256 out")
    assert "131072" in _answer(state) and "200000" in _answer(state)
