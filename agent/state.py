"""The planning graph's state: a TypedDict whose list channels merge through pure reducers.

Everything in the state is plain JSON-able data (dicts, lists, strings, numbers) or a LangChain message,
so a checkpointer can save it and a later turn of the conversation can read it. Per-turn records carry
the ``turn`` they belong to: a conversation keeps its history, and each turn looks at its own part.

A *proposal* record is a :class:`~shardplan.tools.api.StrategyCheck` dumped to a dict, plus ``turn``,
``iteration``, ``source`` (the tool that proposed it) and ``score`` (numbers compared in order, lower is
better: how far the targets are missed, then the request's objective).
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages

__all__ = ["AgentState", "merge_rules", "append_items", "keep_best", "proposal_rank"]

Record = dict[str, Any]


def merge_rules(left: list[Record] | None, right: list[Record] | None) -> list[Record]:
    """Rules retrieved so far: ``left`` in order, then each rule of ``right`` whose ``id`` is new.

    >>> merge_rules([{"id": "DEC-1"}], [{"id": "DEC-1"}, {"id": "TP-2"}])
    [{'id': 'DEC-1'}, {'id': 'TP-2'}]
    """
    merged = list(left or [])
    seen = {rule["id"] for rule in merged}
    for rule in right or []:
        if rule["id"] not in seen:
            seen.add(rule["id"])
            merged.append(rule)
    return merged


def append_items(left: list[Record] | None, right: list[Record] | Record | None) -> list[Record]:
    """``left`` followed by ``right`` (one record or a list of them); never drops or reorders.

    >>> append_items([{"a": 1}], {"a": 2})
    [{'a': 1}, {'a': 2}]
    """
    if right is None:
        return list(left or [])
    return list(left or []) + ([right] if isinstance(right, dict) else list(right))


def proposal_rank(proposal: Record) -> tuple[float, ...]:
    """Sort key of a proposal, best first: valid, then fitting in memory, then on target, then by ``score``
    (a list of numbers, lower is better; missing means worst)."""
    figures = proposal.get("figures") or {}
    flags = (not proposal.get("valid", False), not figures.get("fits", False), not proposal.get("meets_targets", False))
    return (*(float(flag) for flag in flags), *(float(x) for x in proposal.get("score") or [float("inf")]))


def keep_best(left: Record | None, right: Record | None) -> Record | None:
    """The better of two proposals: a later turn's replaces an earlier turn's; within a turn the one
    :func:`proposal_rank` orders first, and on a tie the earlier one (``left``).

    >>> keep_best({"turn": 1, "valid": False}, {"turn": 1, "valid": True})["valid"]
    True
    """
    if right is None:
        return left
    if left is None or right.get("turn", 0) > left.get("turn", 0):
        return right
    if right.get("turn", 0) < left.get("turn", 0):
        return left
    return right if proposal_rank(right) < proposal_rank(left) else left


class AgentState(TypedDict, total=False):
    """State of the planning graph; one thread of a conversation when checkpointed."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation: user turns, model turns with tool calls, tool results, checker feedback, answers."""
    given_request: Record | None
    """Input only: a PlanRequest (as a dict) to plan instead of parsing the last message; consumed by understand."""
    request: Record | None
    """The PlanRequest (as a dict) of the latest planning turn."""
    intent: str
    """What the latest turn asked for: ``plan`` (run the loop), ``ask`` (a question back), ``answer`` (answered)."""
    parsed: Record | None
    """The latest message read as a ParsedRequest (as a dict); a follow-up is read against it."""
    turn: int
    """Turn counter, one per user message."""
    turn_start: str
    """Message id where the current turn begins; the model sees the conversation from there."""
    started_at: float
    """Wall-clock start of the current turn (seconds since the epoch), for the time bound."""
    iterations: int
    """Model calls in the current turn."""
    max_iterations: int
    """Bound on model calls per turn."""
    deadline: float
    """Wall-clock time (seconds since the epoch) after which the turn answers with what it has."""
    checked: str
    """Id of the last message the check step looked at, so no round is checked twice."""
    rules: Annotated[list[Record], merge_rules]
    """Knowledge rules retrieved (``id``, ``severity``, ``text``, ``doc``, ``section``), without duplicates."""
    proposals: Annotated[list[Record], append_items]
    """Every proposal checked, in order, across turns."""
    validation: Record | None
    """The latest proposal's verdict: ``strategy``, ``valid``, ``violations``."""
    figures: Record | None
    """The latest proposal's figures, or None when it could not be built."""
    best_plan: Annotated[Record | None, keep_best]
    """The best proposal of the current turn (see :func:`proposal_rank`)."""
    infeasible: Record | None
    """When nothing fits: ``turn``, ``message`` and ``min_gpus``."""
    errors: Annotated[list[Record], append_items]
    """Failures (``turn``, ``message``): a model endpoint that failed, bounds reached without a valid plan."""
    plan: Record | None
    """The Plan (as a dict, without its DAG) of the latest planning turn; None when that turn failed."""
