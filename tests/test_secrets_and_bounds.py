"""A scripted model that echoes the API key (in its text, in tool names and in tool arguments, well formed or
not) and answers with megabytes: the key never reaches stdout, stderr, an output file or the conversation
database, replies are bounded before they are stored, and after unusable replies the agent says why."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli, run_here
from fake_openai import FakeOpenAI, completion, request_args
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from shardplan.agent.graph import Limits, build_graph, recursion_limit
from shardplan.agent.hygiene import RedactingSerializer, open_thread_store
from shardplan.agent.run import request_message
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.limits import MAX_DB_BYTES, MAX_MESSAGE_CHARS, MAX_PROMPT_CHARS

SECRET = "sk-live-SECRET-0123456789abcdef"
PROMPT = "Plan Llama 3.1 8B on 4 H100 for 4096-token prompts and 128 output tokens, batch 4"


def _echoing_script() -> list[Callable[[dict[str, Any]], dict[str, Any]]]:
    """Replies that carry the key everywhere a reply can, then a valid proposal."""
    def step(make: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return make

    return [
        step(lambda body: completion(content=f"Using key {SECRET} to plan.", calls=[
            ("propose_strategy", {**request_args(body), "strategy": f"tp=4,{SECRET}"})])),
        step(lambda body: completion(calls=[(SECRET, {"key": SECRET})])),
        step(lambda body: completion(calls=[("propose_strategy", '{"model": "' + SECRET + '", ')])),
        step(lambda body: completion(content=f"again {SECRET}", calls=[
            ("propose_strategy", {**request_args(body), "strategy": "tp=4"})])),
    ]


def _assert_nowhere(folder: Path, *texts: str) -> None:
    for text in texts:
        assert SECRET not in text
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_plan_with_an_echoing_model_keeps_the_key_out_of_output_and_files(tmp_path: Path) -> None:
    with FakeOpenAI(_echoing_script(), api_key=SECRET) as fake:
        env = {**os.environ, **fake.env()}
        result = run_cli("plan", "-m", "llama-3.1-8b", "--gpus", "4", "--isl", "4096", "--osl", "128", "--batch",
                         "4", "--policy", "openai:scripted", "-o", str(tmp_path / "plan.json"), env=env)
        assert not fake.script.exhausted
    assert result.returncode == 0, result.stderr
    assert "***" in result.stderr  # the echoed key was shown redacted, not dropped silently
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["strategy"] is not None
    _assert_nowhere(tmp_path, result.stdout, result.stderr)


def test_chat_with_an_echoing_model_keeps_the_key_out_of_the_database(tmp_path: Path) -> None:
    db = tmp_path / "chat.sqlite"
    with FakeOpenAI(_echoing_script(), api_key=SECRET) as fake:
        env = {**os.environ, **fake.env()}
        result = run_cli("chat", PROMPT, "--policy", "openai:scripted", "--db", str(db), env=env)
        assert not fake.script.exhausted
    assert result.returncode == 0, result.stderr
    assert db.stat().st_size > 0
    rows = sqlite3.connect(str(db)).execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    assert rows > 0
    _assert_nowhere(tmp_path, result.stdout, result.stderr)


def test_the_store_scrubs_the_key_and_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    serde = RedactingSerializer()
    kind, data = serde.dumps_typed({"text": f"the key is {SECRET}", "n": 3})
    assert SECRET.encode() not in data
    assert serde.loads_typed((kind, data)) == {"text": "the key is " + "*" * len(SECRET), "n": 3}


def test_a_store_past_its_size_bound_is_refused_before_the_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "big.sqlite"
    with db.open("wb") as handle:
        handle.truncate(MAX_DB_BYTES + 1)  # sparse: no real disk used
    with pytest.raises(InputError, match="over the limit") as caught:
        open_thread_store(db)
    assert caught.value.field == "db"
    long_prompt = run_here(capsys, "chat", "x" * (MAX_PROMPT_CHARS + 1), "--db", str(tmp_path / "new.sqlite"))
    assert long_prompt.returncode == 2 and "over the limit" in long_prompt.stderr
    assert len(long_prompt.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "new.sqlite").exists()  # refused before the store was touched


REQUEST = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=4, workload=Workload(isl=4096, osl=128, batch=4))


def _run_graph(tmp_path: Path, limits: Limits) -> tuple[dict[str, Any], Path]:
    db = tmp_path / "chat.sqlite"
    saver = SqliteSaver(sqlite3.connect(str(db), check_same_thread=False), serde=RedactingSerializer())
    graph = build_graph("openai:scripted", checkpointer=saver, limits=limits)
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": recursion_limit(limits)}
    payload = {"messages": [HumanMessage(content=request_message(REQUEST))],
               "given_request": REQUEST.model_dump(mode="json")}
    return graph.invoke(payload, config), db


def test_megabyte_replies_are_cut_before_they_are_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    huge = "x" * 5_000_000
    steps = [completion(content=huge),
             lambda body: completion(calls=[("propose_strategy", {**request_args(body), "strategy": huge})]),
             lambda body: completion(calls=[("propose_strategy", {**request_args(body), "strategy": "tp=4"})])]
    with FakeOpenAI(steps, api_key=SECRET) as fake:
        fake.patch(monkeypatch)
        state, db = _run_graph(tmp_path, Limits(max_iterations=3))
        assert not fake.script.exhausted
        sent = max(len(json.dumps(r["body"])) for r in fake.script.requests)
    assert state["plan"] is not None
    assert max(len(str(m.content)) for m in state["messages"]) < MAX_MESSAGE_CHARS + 200
    assert sent < 200_000  # later requests do not carry the megabytes back to the model
    assert db.stat().st_size < 5_000_000
    too_big = next(m for m in state["messages"] if getattr(m, "invalid_tool_calls", None))
    assert "exceed the limit" in too_big.invalid_tool_calls[0]["error"]


def test_after_unusable_replies_the_agent_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [completion(calls=[("propose_strategy", '{"strategy": ')]),
             completion(calls=[("delete_cluster", {"name": "prod"})]),
             lambda body: completion(calls=[("propose_strategy", {**request_args(body), "strategy": "tp=3"})]),
             lambda body: completion(calls=[("propose_strategy", {**request_args(body), "strategy": "tp=3"})]),
             completion(content="I give up.")]
    with FakeOpenAI(steps, api_key=SECRET) as fake:
        fake.patch(monkeypatch)
        state, _ = _run_graph(tmp_path, Limits(max_iterations=5))
        assert not fake.script.exhausted
    assert state["plan"] is None
    reason = state["errors"][-1]["message"]
    assert "not a JSON object" in reason and "unknown tools (delete_cluster)" in reason
    assert "the invalid strategy tp=3 proposed again (violates" in reason
    assert "1 reply without a tool call" in reason
