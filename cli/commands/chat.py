"""``shardplan chat``: plan from plain language, one-shot or as a conversation that can be resumed.

Each conversation is a thread checkpointed in SQLite (``$SHARDPLAN_HOME/chat.sqlite``, by default
``~/.cache/shardplan/chat.sqlite``); ``--thread ID`` continues one, so "now with 4 nodes" replans from the
previous request and "why not PP?" is answered from the previous plan.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.agent.graph import build_graph, recursion_limit
from shardplan.agent.hygiene import check_prompt, open_thread_store
from shardplan.agent.policies import make_policy, redact
from shardplan.agent.run import show_on_stderr, stream_turn
from shardplan.agent.understand import reading_text
from shardplan.cli.app import app, console, emit_json, fail
from shardplan.cli.plan_text import print_plan
from shardplan.contracts.plan import Plan
from shardplan.errors import InputError, ShardplanError
from shardplan.text import one_line

__all__ = ["chat_command", "default_db"]

_QUIT = {"quit", "exit", ":q", "/quit", "/exit"}


def default_db() -> Path:
    """Where conversations are kept: ``$SHARDPLAN_HOME/chat.sqlite``, else ``~/.cache/shardplan/chat.sqlite``."""
    home = os.environ.get("SHARDPLAN_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "shardplan") / "chat.sqlite"


def _turn(graph: Any, config: dict[str, Any], text: str, as_json: bool) -> bool:
    """One turn: run the graph on ``text``, print the answer; False when the turn ended in a failure."""
    from langchain_core.messages import AIMessage, HumanMessage


    prompt = HumanMessage(content=redact(check_prompt(text)))
    import sqlite3

    try:
        state = stream_turn(graph, {"messages": [prompt]}, config, None if as_json else show_on_stderr)
    except sqlite3.Error as exc:  # the store hit its page ceiling (MAX_DB_BYTES) or the disk is full
        raise InputError(f"the conversation store cannot take this turn ({exc})", field="db",
                         fix="choose another --db, or delete old conversations") from None
    reply = next((m for m in reversed(state.get("messages", [])) if isinstance(m, AIMessage)), None)
    answer = redact(str(reply.content)) if reply is not None else ""
    intent = state.get("intent", "")
    planned = intent == "plan"
    plan = state.get("plan") if planned else None
    failed = planned and plan is None
    if as_json:
        emit_json({"thread": config["configurable"]["thread_id"], "intent": intent, "answer": answer, "plan": plan})
        return not failed
    if plan is not None:
        print_plan(Plan.model_validate(plan))
        reading = reading_text(state.get("parsed"), assumed=False)  # what was read from the words, and from which
        if reading:
            console().print(reading.strip(), markup=False)
    elif failed:
        sys.stderr.write(f"error: {answer}\n")
    else:
        console().print(answer)
    return not failed


@app.command("chat")
def chat_command(
    prompt: Annotated[str | None, typer.Argument(
        help="What to plan, in words. Without it, a conversation starts.")] = None,
    policy: Annotated[str, typer.Option(
        "--policy", help="builtin, or openai:MODEL for an OpenAI-compatible endpoint.")] = "builtin",
    thread: Annotated[str | None, typer.Option(
        "--thread", help="Continue this conversation (its ID is printed).")] = None,
    db: Annotated[Path | None, typer.Option(
        "--db", help="SQLite file of conversations (default: $SHARDPLAN_HOME/chat.sqlite).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each answer as JSON.")] = False,
) -> None:
    """Plan from plain language, e.g. "Llama 3.1 70B on 8 H100, 4k prompts, TTFT under 1 s"; follow-ups such as
    "now with 4 nodes" or "why not PP?" continue the conversation."""

    make_policy(policy)  # a bad policy name or a missing key is refused before any file is touched
    thread_id = thread or uuid.uuid4().hex[:12]

    if prompt is not None:
        check_prompt(prompt)  # refused before the store is touched
    saver = open_thread_store(db or default_db())
    graph = build_graph(policy, checkpointer=saver)
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": recursion_limit()}
    if not as_json:
        sys.stderr.write(f"thread {thread_id} (continue with --thread {thread_id})\n")
    if prompt is not None:
        if not prompt.strip():
            fail("the prompt is empty: say what to plan, e.g. \"Llama 3.1 8B on 2 H100\"")
        if not _turn(graph, config, prompt, as_json):
            raise typer.Exit(2)
        return
    while True:
        try:
            text = input("shardplan> ")
        except (EOFError, KeyboardInterrupt):
            sys.stderr.write("\n")
            return
        if text.strip().lower() in _QUIT:
            return
        if not text.strip():
            continue
        try:
            _turn(graph, config, text, as_json)
        except ShardplanError as exc:  # the conversation goes on after a bad turn
            sys.stderr.write(f"error: {one_line(str(exc))}\n")
