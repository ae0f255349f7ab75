"""Policies: the chat models that drive the planning graph.

* ``builtin``: :class:`BuiltinPlanner`, a deterministic chat model of our own. It reads the request from
  the system prompt and the tool results from the conversation, and answers with real tool calls:
  search the strategies, propose the best candidate, repair from the checker's verdict (the fix a
  violation names, else the next candidate), and a final answer. No network, same graph, same tools.
* ``openai:MODEL``: langchain-openai's ``ChatOpenAI`` against ``OPENAI_BASE_URL`` (any OpenAI-compatible
  server: OpenAI, vLLM, Ollama, ...) with ``OPENAI_API_KEY``; small timeout and retry budgets so a
  failing endpoint ends the run instead of hanging it.

The API key is read from the environment into a ``SecretStr`` and never printed; :func:`redact` scrubs
it from any error text before that text reaches a message, a log or the checkpoint.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolCall, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InputError, ShardplanError

__all__ = ["BuiltinPlanner", "PolicyError", "make_policy", "redact", "request_block", "read_request",
           "REQUEST_MARKER", "DEFAULT_TIMEOUT_S", "DEFAULT_MAX_RETRIES"]

REQUEST_MARKER = "Request JSON: "
"""Prefix of the system-prompt line that carries the request; the built-in planner reads it back."""
DEFAULT_TIMEOUT_S = 60.0
"""Seconds one chat completion may take ($SHARDPLAN_OPENAI_TIMEOUT overrides)."""
DEFAULT_MAX_RETRIES = 2
"""Retries of a failed completion (429, 5xx, connection errors); $SHARDPLAN_OPENAI_RETRIES overrides."""


class PolicyError(ShardplanError):
    """The policy could not produce a plan: its model endpoint failed, or no valid strategy within the bounds."""


def request_block(arguments: dict[str, Any]) -> str:
    """The system-prompt line that carries the request as tool arguments (``RequestArgs.from_request``)."""
    return REQUEST_MARKER + json.dumps(arguments, sort_keys=True)


def read_request(messages: Sequence[BaseMessage]) -> dict[str, Any] | None:
    """The request (as tool arguments) of the last system message that carries one, or None."""
    for message in reversed(messages):
        if isinstance(message, SystemMessage) and isinstance(message.content, str):
            for line in message.content.splitlines():
                if line.startswith(REQUEST_MARKER):
                    return dict(json.loads(line[len(REQUEST_MARKER):]))
    return None


_KEY_PATTERN = re.compile(r"sk-[A-Za-z0-9_\-]{6,}")


def redact(text: str) -> str:
    """``text`` without the API key (the value of $OPENAI_API_KEY, and anything shaped like ``sk-...``)."""
    key = os.environ.get("OPENAI_API_KEY")
    if key and len(key) >= 4:
        text = text.replace(key, "***")
    return _KEY_PATTERN.sub("sk-***", text)


# --------------------------------------------------------------------------------------------- builtin


def _tool_results(messages: Sequence[BaseMessage]) -> list[tuple[str, dict[str, Any], Any]]:
    """(tool name, call arguments, parsed result) of every answered tool call, in order."""
    calls: dict[str, ToolCall] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            calls.update({call["id"] or "": call for call in message.tool_calls})
    results = []
    for message in messages:
        if isinstance(message, ToolMessage) and message.tool_call_id in calls:
            call = calls[message.tool_call_id]
            try:
                data = json.loads(message.content) if isinstance(message.content, str) else None
            except json.JSONDecodeError:
                data = None
            results.append((call["name"], call["args"], data))
    return results


def repair_spec(spec: str, violations: list[dict[str, Any]]) -> str | None:
    """The strategy a violation's fix hint points to, when the fix is mechanical; None otherwise.

    SP-1 (sequence parallelism in decode): the decode phase's ``sp`` shards become attention
    data-parallel groups (``adp``), as its fix hint says.

    >>> repair_spec("prefill:sp=2,tp=2;decode:sp=2,tp=2", [{"rule": "SP-1"}])
    'prefill:sp=2,tp=2;decode:adp=2,tp=2'
    """

    rules = {v.get("rule") for v in violations}
    if "SP-1" in rules:
        strategy = parse_strategy(spec)
        decode = strategy.decode
        if decode.sp > 1:
            fixed = decode.model_copy(update={"adp": decode.adp * decode.sp, "sp": 1})
            return strategy.model_copy(update={"decode": fixed}).to_spec()
    return None


class BuiltinPlanner(BaseChatModel):
    """A deterministic chat model that plans by tool calls: search, propose, repair, answer.

    It sees what any model sees (the system prompt with the request, the tool results, the checker's
    feedback) and decides from the tool results alone, so the same conversation always gets the same
    reply.
    """

    top: int = 5
    """Candidates asked from search_strategies."""

    @property
    def _llm_type(self) -> str:
        return "shardplan-builtin"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools as any chat model does; the planner calls only tools that are bound."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        bound = {t["function"]["name"] for t in kwargs.get("tools", [])}
        message = self.next_message(messages, bound)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def next_message(self, messages: Sequence[BaseMessage], bound: set[str]) -> AIMessage:
        """The reply to ``messages``: the next tool call, or the final answer."""
        request = read_request(messages)
        if request is None:
            return AIMessage(content="I need a planning request (model, GPUs, workload) to plan.")
        results = _tool_results(messages)
        searches = [data for name, _, data in results if name == "search_strategies" and isinstance(data, dict)]
        if not searches or "error" in searches[-1]:
            if "search_strategies" not in bound or len(searches) > 1:
                return AIMessage(content="I could not search the strategy space.")
            return self._call(messages, "search_strategies", {**request, "top": self.top})
        search = searches[-1]
        if not search.get("feasible", False):
            return AIMessage(content=f"Nothing fits: {search.get('message', '')}")
        proposals = [(args.get("strategy", ""), data) for name, args, data in results
                     if name == "propose_strategy" and isinstance(data, dict) and "valid" in data]
        tried = {spec for spec, _ in proposals} | {data["strategy"] for _, data in proposals}
        if proposals:
            spec, last = proposals[-1]
            if last["valid"] and last["meets_targets"]:
                return AIMessage(content=f"{last['strategy']} is valid against every rule and meets the targets.")
            repaired = None if last["valid"] else repair_spec(spec, last.get("violations", []))
            if repaired and repaired not in tried:
                return self._call(messages, "propose_strategy", {**request, "strategy": repaired})
        candidates = search.get("candidates", [])
        # After a proposal that missed its targets only a candidate predicted to meet them can do better:
        # the search already ranks the rest by how little they miss.
        pool = [c for c in candidates if c["meets_targets"]] if proposals and proposals[-1][1]["valid"] else candidates
        upcoming = [c["strategy"] for c in pool if c["strategy"] not in tried]
        if upcoming and "propose_strategy" in bound:
            return self._call(messages, "propose_strategy", {**request, "strategy": upcoming[0]})
        valid = [data for _, data in proposals if data["valid"]]
        if valid:
            return AIMessage(content=f"{valid[0]['strategy']} is the best valid strategy I found; "
                                     + ("; ".join(m["message"] for m in valid[0]["misses"]) or "it meets the targets")
                                     + ".")
        return AIMessage(content="No candidate strategy passed the checks.")

    @staticmethod
    def _call(messages: Sequence[BaseMessage], name: str, args: dict[str, Any]) -> AIMessage:
        call_id = f"call_{sum(isinstance(m, AIMessage) for m in messages) + 1}_{name}"
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


# ---------------------------------------------------------------------------------------------- factory


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{name}={raw!r} is not a number", field=name, fix=f"unset {name} or give a number") from None
    if value < 0:
        raise InputError(f"{name}={raw!r} is negative", field=name, fix=f"give {name} a value of 0 or more")
    return value


def make_policy(name: str, *, timeout: float | None = None, max_retries: int | None = None) -> BaseChatModel:
    """The chat model a policy name means: ``builtin`` or ``openai:MODEL``.

    Raises:
        InputError: an unknown policy name, an ``openai:`` policy without a model name, or no
            ``OPENAI_API_KEY`` in the environment.
    """
    text = (name or "").strip()
    if text == "builtin":
        return BuiltinPlanner()
    if text.startswith("openai:"):
        model = text[len("openai:"):].strip()
        if not model:
            raise InputError("policy 'openai:' names no model", field="policy",
                             fix="write openai:MODEL, e.g. openai:gpt-4o-mini or openai:qwen2.5:7b for Ollama")
        key = os.environ.get("OPENAI_API_KEY", "")
        if not key.strip():
            raise InputError("OPENAI_API_KEY is not set", field="policy",
                             fix="export OPENAI_API_KEY=<your key> (any non-empty value for a local server such as "
                                 "vLLM or Ollama) and, for a server other than OpenAI's, "
                                 "OPENAI_BASE_URL=http://HOST:PORT/v1; or use --policy builtin")
        from langchain_openai import ChatOpenAI
        from pydantic import SecretStr

        return ChatOpenAI(
            model=model,
            base_url=os.environ.get("OPENAI_BASE_URL") or None,
            api_key=SecretStr(key),
            timeout=timeout if timeout is not None else _env_number("SHARDPLAN_OPENAI_TIMEOUT", DEFAULT_TIMEOUT_S),
            max_retries=int(max_retries if max_retries is not None
                            else _env_number("SHARDPLAN_OPENAI_RETRIES", DEFAULT_MAX_RETRIES)),
        )
    raise InputError(f"unknown policy {name!r}", field="policy",
                     fix="use builtin, or openai:MODEL for an OpenAI-compatible endpoint")
