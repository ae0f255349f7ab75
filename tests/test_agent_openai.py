"""The ``openai:MODEL`` policy against a real HTTP endpoint on 127.0.0.1, with the real ChatOpenAI client.

The server plays back scripted chat completions from an iterator: a script that runs out fails the test
(it is never cycled). Every request the client sends is recorded, so the tests can read what the model
was told (tool results, checker feedback) and count retries. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Script, completion, failure
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from shardplan.agent.graph import Limits, build_graph, recursion_limit
from shardplan.agent.policies import PolicyError, make_policy
from shardplan.agent.run import plan_from_state, request_message, run_plan
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError

SECRET = "sk-test-SECRET"
REQUEST = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=4, workload=Workload(isl=4096, osl=128, batch=4))
ARGS = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 4, "isl": 4096, "osl": 128, "batch": 4}


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start a scripted endpoint; ``endpoint(steps)`` loads a script and returns it."""
    with FakeOpenAI(api_key=SECRET, timeout_s=5, retries=1) as fake:
        fake.patch(monkeypatch)
        yield fake.load
        assert not fake.script.exhausted, "the model was asked more often than the script allows"


def _run(tmp_path: Path, limits: Limits | None = None) -> tuple[dict[str, Any], Path]:
    db = tmp_path / "chat.sqlite"
    saver = SqliteSaver(sqlite3.connect(str(db), check_same_thread=False))
    graph = build_graph("openai:scripted", checkpointer=saver, limits=limits or Limits(max_iterations=6))
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": recursion_limit()}
    payload = {"messages": [HumanMessage(content=request_message(REQUEST))],
               "given_request": REQUEST.model_dump(mode="json")}
    return graph.invoke(payload, config), db


def _sent_messages(script: Script, index: int) -> list[dict[str, Any]]:
    return script.requests[index]["body"]["messages"]


def _assert_no_secret(*texts: str | bytes) -> None:
    for text in texts:
        data = text if isinstance(text, bytes) else text.encode()
        assert SECRET.encode() not in data


def test_violation_feedback_then_scripted_repair_gives_a_valid_plan(
        endpoint: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = endpoint([
        completion(calls=[("propose_strategy", {**ARGS, "strategy": "prefill:sp=2,tp=2;decode:sp=2,tp=2"})]),
        completion(calls=[("propose_strategy", {**ARGS, "strategy": "prefill:sp=2,tp=2;decode:adp=2,tp=2"})]),
    ])
    state, db = _run(tmp_path)
    plan = plan_from_state(state)
    assert plan.validation is not None and plan.validation.valid and plan.status == "ok"
    assert plan.strategy is not None and plan.strategy.to_spec() == "prefill:sp=2,tp=2;decode:adp=2,tp=2"
    assert [p["valid"] for p in state["proposals"]] == [False, True]
    assert len(script.requests) == 2
    first = _sent_messages(script, 0)
    assert first[0]["role"] == "system" and "Request JSON" in first[0]["content"]
    assert {t["function"]["name"] for t in script.requests[0]["body"]["tools"]} >= {"propose_strategy",
                                                                                     "search_strategies"}
    second = _sent_messages(script, 1)
    tool_reply = next(m for m in second if m["role"] == "tool")
    assert "SP-1" in tool_reply["content"]
    feedback = [m for m in second if m["role"] == "user" and "Checker" in m["content"]]
    assert feedback and "SP-1" in feedback[-1]["content"] and "adp" in feedback[-1]["content"]
    assert all(r["authorization"] == f"Bearer {SECRET}" for r in script.requests)
    out = capsys.readouterr()
    _assert_no_secret(out.out, out.err, db.read_bytes(), json.dumps(plan.model_dump(mode="json")))


def test_malformed_and_schema_invalid_arguments_come_back_as_tool_errors(endpoint: Any, tmp_path: Path) -> None:
    script = endpoint([
        completion(calls=[("propose_strategy", '{"model": "llama-3.1-8b", "strategy": ')]),
        completion(calls=[("propose_strategy", {**ARGS, "gpus": "many", "strategy": "tp=4"})]),
        completion(calls=[("propose_strategy", {**ARGS, "strategy": "tp=4"})]),
    ])
    state, _ = _run(tmp_path)
    assert plan_from_state(state).validation.valid  # type: ignore[union-attr]
    errors = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert len(errors) == 2
    assert json.loads(errors[0].content)["error"] == "MalformedArguments"
    schema_error = json.loads(errors[1].content)
    assert schema_error["error"] == "InputError" and schema_error["field"] == "gpus"
    assert "MalformedArguments" in json.dumps(_sent_messages(script, 1))
    assert len(script.requests) == 3


def test_unknown_tool_gets_an_error_naming_the_real_tools(endpoint: Any, tmp_path: Path) -> None:
    script = endpoint([
        completion(calls=[("delete_cluster", {"name": "prod"})]),
        completion(calls=[("propose_strategy", {**ARGS, "strategy": "tp=4"})]),
    ])
    state, _ = _run(tmp_path)
    assert plan_from_state(state).strategy.to_spec() == "tp=4"  # type: ignore[union-attr]
    reply = next(m for m in _sent_messages(script, 1) if m["role"] == "tool")
    error = json.loads(reply["content"])
    assert error["error"] == "UnknownTool" and "propose_strategy" in error["fix"]


def test_http_429_is_retried_then_succeeds(endpoint: Any, tmp_path: Path) -> None:
    script = endpoint([
        failure(429, **{"retry-after-ms": "20"}),
        completion(calls=[("propose_strategy", {**ARGS, "strategy": "tp=4"})]),
    ])
    state, _ = _run(tmp_path)
    assert plan_from_state(state).validation.valid  # type: ignore[union-attr]
    assert len(script.requests) == 2
    assert state["iterations"] == 1  # one model call, retried inside the client


def test_http_500_repeatedly_fails_clearly_within_the_retry_budget(
        endpoint: Any, capsys: pytest.CaptureFixture[str]) -> None:
    script = endpoint([failure(500, **{"retry-after-ms": "20"}), failure(500, **{"retry-after-ms": "20"})])
    began = time.monotonic()
    with pytest.raises(PolicyError) as caught:
        run_plan(REQUEST, progress=True, policy="openai:scripted")
    assert time.monotonic() - began < 20
    message = str(caught.value)
    assert "openai:scripted model failed" in message and "500" in message
    assert len(script.requests) == 2  # the first try and one retry, nothing more
    out = capsys.readouterr()
    assert "error: the openai:scripted model failed" in out.err
    _assert_no_secret(out.out, out.err, message)


def test_timeout_fails_clearly_and_never_hangs(
        endpoint: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SHARDPLAN_OPENAI_TIMEOUT", "0.5")
    monkeypatch.setenv("SHARDPLAN_OPENAI_RETRIES", "0")
    script = endpoint([{**completion(content="too late"), "sleep": 3}])
    began = time.monotonic()
    state, db = _run(tmp_path)
    assert time.monotonic() - began < 3
    assert state["plan"] is None
    assert "Timeout" in state["errors"][-1]["message"]
    with pytest.raises(PolicyError, match="Timeout"):
        plan_from_state(state)
    assert len(script.requests) == 1
    _assert_no_secret(db.read_bytes(), state["messages"][-1].content)


def test_missing_key_is_a_clear_input_error_that_says_how_to_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InputError, match="OPENAI_API_KEY is not set") as caught:
        make_policy("openai:gpt-4o-mini")
    assert "export OPENAI_API_KEY" in str(caught.value) and "OPENAI_BASE_URL" in str(caught.value)
    with pytest.raises(InputError, match="unknown policy"):
        make_policy("anthropic:claude")
    with pytest.raises(InputError, match="names no model"):
        make_policy("openai:")


def test_the_client_object_never_shows_the_key(endpoint: Any) -> None:
    endpoint([])
    model = make_policy("openai:scripted")
    _assert_no_secret(repr(model), str(model), json.dumps(model.model_dump(mode="json"), default=str))
