"""Model replies: what they may leave behind (no API key anywhere, nothing larger than a bound), and why
unusable ones led nowhere.

A chat model can echo the key it was called with (in its text or inside tool-call arguments), and can
answer with megabytes. Everything the agent prints or checkpoints comes from the graph state, so the
reply is cleaned once, as it enters the state (:func:`clean_reply`); the thread store also scrubs the
key from every byte it writes (:class:`RedactingSerializer`) and refuses to grow past
:data:`~shardplan.limits.MAX_DB_BYTES` (:func:`open_thread_store`).

>>> import os
>>> os.environ["OPENAI_API_KEY"] = "sk-doc-example-123"
>>> redact_data({"text": "key sk-doc-example-123", "args": ["sk-doc-example-123"]})
{'text': 'key ***', 'args': ['***']}
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, InvalidToolCall, ToolCall, ToolMessage
from langchain_core.messages.tool import invalid_tool_call, tool_call

from shardplan.agent.policies import redact
from shardplan.errors import InputError
from shardplan.limits import MAX_DB_BYTES, MAX_MESSAGE_CHARS, MAX_PROMPT_CHARS
from shardplan.text import counted

__all__ = ["redact_data", "clean_reply", "RedactingSerializer", "open_thread_store", "check_prompt", "unusable_replies"]

_NAME_CHARS = 100


def redact_data(value: Any) -> Any:
    """``value`` (strings, lists and dicts, nested) with the API key replaced wherever it appears."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_data(k): redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value


def _cut(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" ... [cut: the reply had {len(text):,} characters, the limit is {limit:,}]"


def clean_reply(reply: Any) -> AIMessage:
    """The model's ``reply`` as it may enter the state: key redacted from text, tool names and arguments;
    text cut at :data:`~shardplan.limits.MAX_MESSAGE_CHARS`; tool calls whose arguments are larger than that
    turned into malformed calls (the model is told why); provider extras (raw argument strings) dropped."""
    if not isinstance(reply, AIMessage):
        return AIMessage(content=_cut(redact(str(getattr(reply, "content", reply)))))
    content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content, default=str)
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for call in reply.tool_calls:
        name = redact(call["name"])[:_NAME_CHARS]
        size = len(json.dumps(call["args"], default=str))
        if size > MAX_MESSAGE_CHARS:
            invalid.append(invalid_tool_call(
                name=name, args=None, id=call.get("id"),
                error=f"arguments of {size:,} characters exceed the limit of {MAX_MESSAGE_CHARS:,}"))
            continue
        calls.append(tool_call(name=name, args=redact_data(call["args"]), id=call.get("id")))
    for bad in reply.invalid_tool_calls:
        invalid.append(invalid_tool_call(
            name=redact(bad.get("name") or "")[:_NAME_CHARS] or None, args=_cut(redact(bad.get("args") or ""), 2000),
            id=bad.get("id"), error=_cut(redact(str(bad.get("error") or "")), 500)))
    return AIMessage(content=_cut(redact(content)), tool_calls=calls, invalid_tool_calls=invalid, id=reply.id,
                     usage_metadata=reply.usage_metadata)


def check_prompt(text: str) -> str:
    """``text`` when it is within :data:`~shardplan.limits.MAX_PROMPT_CHARS`.

    Raises:
        InputError: a longer prompt, refused before anything runs.
    """

    if len(text) > MAX_PROMPT_CHARS:
        raise InputError(f"the prompt has {len(text):,} characters, over the limit of {MAX_PROMPT_CHARS:,}",
                         field="prompt", fix="say what to plan in a few sentences")
    return text


class RedactingSerializer:
    """A checkpoint serializer that writes the API key as asterisks of the same length.

    Same-length replacement keeps length-prefixed encodings (msgpack) valid, so a checkpoint still loads.
    """

    def __init__(self, inner: Any = None) -> None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        self.inner = inner or JsonPlusSerializer()

    @staticmethod
    def _scrub(data: bytes) -> bytes:
        key = os.environ.get("OPENAI_API_KEY", "")
        if len(key) >= 4:
            data = data.replace(key.encode(), b"*" * len(key.encode()))
        return data

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Serialize ``obj`` with the inner serializer, then scrub the key from the bytes."""
        kind, data = self.inner.dumps_typed(obj)
        return kind, self._scrub(data)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Deserialize as the inner serializer does."""
        return self.inner.loads_typed(data)


def open_thread_store(path: Path) -> Any:
    """A SQLite checkpointer at ``path`` that scrubs the key, refused when the file is past its size bound.

    Raises:
        InputError: the file is larger than :data:`~shardplan.limits.MAX_DB_BYTES`, or cannot be opened.
    """
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    fix = "choose another --db (or $SHARDPLAN_HOME), or delete old conversations"
    try:
        size = path.stat().st_size if path.exists() else 0
        if size > MAX_DB_BYTES:
            raise InputError(f"the conversation store {path} is {size / 2**20:.0f} MB, over the limit of "
                             f"{MAX_DB_BYTES / 2**20:.0f} MB", field="db", fix=fix)
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(str(path), check_same_thread=False)
        # A page-count ceiling makes SQLite itself refuse to grow the file past the bound mid-turn.
        page = connection.execute("PRAGMA page_size").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {MAX_DB_BYTES // page + 1}")
        saver = SqliteSaver(connection, serde=RedactingSerializer())
        saver.setup()
    except (OSError, sqlite3.Error) as exc:
        raise InputError(f"cannot open {path} as a conversation store ({exc})", field="db", fix=fix) from None
    return saver


def unusable_replies(messages: Sequence[BaseMessage], proposals: list[dict[str, Any]]) -> list[str]:
    """Why the model's replies of a turn led nowhere, counted by kind: malformed arguments, unknown tools,
    refused arguments, the same invalid strategy again, answers without a proposal."""
    malformed = sum(len(m.invalid_tool_calls) for m in messages if isinstance(m, AIMessage))
    silent = sum(1 for m in messages if isinstance(m, AIMessage) and not m.tool_calls and not m.invalid_tool_calls)
    unknown: list[str] = []
    refused: list[str] = []
    for message in messages:
        if isinstance(message, ToolMessage) and message.status == "error" and isinstance(message.content, str):
            try:
                data = json.loads(message.content)
            except json.JSONDecodeError:
                data = {}
            if data.get("error") == "UnknownTool":
                unknown.append(str(message.name))
            elif data.get("error") != "MalformedArguments":
                refused.append(str(data.get("message", ""))[:160])
    seen: set[str] = set()
    repeats: dict[str, list[str]] = {}
    for record in proposals:
        if not record["valid"] and record["strategy"] in seen:
            repeats[record["strategy"]] = sorted({v["rule"] for v in record["violations"]})
        seen.add(record["strategy"])
    lines = []
    if malformed:
        lines.append(f"{counted(malformed, 'tool call')} with arguments that were not a JSON object")
    if unknown:
        lines.append(f"{counted(len(unknown), 'call')} to unknown tools ({', '.join(sorted(set(unknown))[:3])})")
    if refused:
        lines.append(f"{counted(len(refused), 'tool call')} refused (first: {refused[0]})")
    lines += [f"the invalid strategy {spec} proposed again (violates {', '.join(rules)})"
              for spec, rules in list(repeats.items())[:2]]
    if silent:
        lines.append(f"{silent} {'reply' if silent == 1 else 'replies'} without a tool call")
    return lines
