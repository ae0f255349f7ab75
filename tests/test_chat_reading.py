"""Chat turns through the graph (built-in policy, no network): a follow-up edits the thread's last request, a
fleet question plans each GPU type, and every answer says what it read and from which words."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from shardplan.agent.graph import build_graph, recursion_limit


def _chat(*messages: str) -> list[dict]:
    graph = build_graph("builtin", checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": recursion_limit(None)}
    states = []
    for text in messages:
        states.append(graph.invoke({"messages": [HumanMessage(content=text)]}, config))
    return states


def _answer(state: dict) -> str:
    return str(next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage)).content)


def test_a_follow_up_edit_applies_to_the_threads_last_request_and_is_echoed() -> None:
    first, doubled, again = _chat("Llama 3.1 8B on 1 H100, 1k prompts, 128 out, batch 8", "double the batch",
                                  "double the batch again")
    assert first["plan"]["request"]["workload"]["batch"] == 8
    assert doubled["plan"]["request"]["workload"]["batch"] == 16
    assert again["plan"]["request"]["workload"]["batch"] == 32
    answer = _answer(again)
    assert "Read: concurrency 32 from 'double the batch again'." in answer
    assert "Kept from the thread: model meta-llama/Llama-3.1-8B; GPU H100; GPUs 1; prompt length 1024 tokens" in answer
    assert "Read: model meta-llama/Llama-3.1-8B from 'llama 3.1 8b'" in _answer(first)


def test_a_fleet_question_plans_each_type_and_says_what_it_read() -> None:
    (state,) = _chat("cheapest way to serve 2 req/s of Llama 3.1 8B on one GPU, 1k/128: H100 or H200?")
    choice = state["plan"]["gpu_choice"]
    assert [row["gpu"] for row in choice["options"]] and {row["gpu"] for row in choice["options"]} == {"H100", "H200"}
    answer = _answer(state)
    assert "- H100:" in answer and "- H200:" in answer
    assert "GPU H100,H200 from 'h100 or h200'" in answer and "rate 2 requests/s from '2 req/s'" in answer


def test_a_question_back_also_says_what_was_read() -> None:
    (state,) = _chat("Llama 3.1 70B, prompts are ~6k tokens")
    answer = _answer(state)
    assert answer.startswith("Could you tell me which GPU type")
    assert "prompt length 6144 tokens from 'prompts are ~6k tokens'" in answer


def test_a_question_back_says_why_a_named_gpu_or_model_was_not_taken() -> None:
    """The reader's notes reached the answer only through a plan's assumptions, so a question back about a GPU or a
    model the user had named ("8 V100s", "mistral 7b") left out why it asked."""
    (gpu_state,) = _chat("Llama 3.1 8B on 8 V100s, 1k/256")
    answer = _answer(gpu_state)
    assert answer.startswith("Could you tell me which GPU type")
    assert "Noted: '8 v100s': the V100 is not in shardplan's GPU catalog" in answer and "--cluster FILE" in answer
    (model_state,) = _chat("mistral 7b on 8 h100, 1k/256")
    answer = _answer(model_state)
    assert answer.startswith("Could you tell me which model")
    assert "Noted: 'mistral 7b' is not bundled; the closest bundled model is mistralai/Mixtral-8x7B-v0.1" in answer
    assert "No prompt length given" not in answer  # the default lengths stay in the Assumed line


def test_comparing_with_another_gpu_type_plans_both() -> None:
    """"compare with H200" after a plan on H100 answered with the H100 plan's explanation; the H200 was never
    planned."""
    _, compared = _chat("Llama 3.1 8B on 1 H100, 1k/128, 2 rps", "compare with H200")
    choice = compared["plan"]["gpu_choice"]
    assert {row["gpu"] for row in choice["options"]} == {"H100", "H200"}
    answer = _answer(compared)
    assert "- H100:" in answer and "- H200:" in answer
