"""The graph's first step: read the message (or take the request given whole), answer a follow-up about the
plan, ask for what is missing, plan a choice of GPU types at once, or hand a request to the planning loop.

Every answer says what was read, with the words it came from, and what was assumed
(:func:`~shardplan.agent.parse.echo.reading_lines`).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from shardplan.agent.followup import answer_follow_up
from shardplan.agent.parse.echo import noted_lines, reading_lines
from shardplan.agent.parse.features import parsed_features
from shardplan.agent.parse.plan_request import gpu_types, to_plan_request
from shardplan.agent.parse.request import ParsedRequest, parse_request
from shardplan.agent.state import AgentState
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.errors import InputError
from shardplan.tools.planning.gpu_choice import plan_gpu_types

__all__ = ["understand_message", "assumed_lines", "reading_text"]

_ASKING = ("model", "gpu", "gpus", "request", "spec_method", "spec_tokens", "spec_accept")
"""Errors whose fix is the question to ask back."""


def reading_text(parsed: dict[str, Any] | None, assumed: bool = True) -> str:
    """The reading of the turn's message as lines to append to an answer (empty for a request given whole);
    without ``assumed`` when a plan's own assumptions follow and state the defaults."""
    if not parsed or not parsed.get("said"):
        return ""
    lines = reading_lines(ParsedRequest.model_validate(parsed))
    return "".join(f"\n{line}" for line in lines if assumed or not line.startswith("Assumed:"))


def assumed_lines(plan: Any) -> str:
    """The plan's constraints and assumptions as lines appended to an answer, one assumption a line."""
    lines = []
    constraints = plan.request.constraints
    if constraints is not None and not constraints.is_empty():
        lines.append("Constraints honoured: " + ", ".join(constraints.to_texts()) + ".")
    lines += [f"Assumed: {line}." if not line.endswith(".") else f"Assumed: {line}" for line in plan.assumptions]
    return "".join(f"\n{line}" for line in lines)


def _given(request: PlanRequest) -> ParsedRequest:
    """A request given whole (the API's or the CLI's), as the reading a follow-up edits."""
    w = request.workload
    return ParsedRequest(model=request.model, gpu=request.gpu, gpus=request.gpus, gpus_per_node=request.gpus_per_node,
                         isl=w.isl, osl=w.osl, batch=w.batch, ttft_ms=w.ttft_ms, tpot_ms=w.tpot_ms, rate=w.rate,
                         trace=w.traffic.trace if w.traffic is not None else None,
                         slo_percentile=None if w.slo_percentile == "mean" else w.slo_percentile,
                         objective=w.objective, weight_dtype=request.weight_dtype, kv_dtype=request.kv_dtype,
                         weight_formats=request.weight_formats, attention_dtype=request.attention_dtype,
                         **parsed_features(w),
                         constraints=request.constraints.to_texts() if request.constraints else [])


def _choice_answer(plan: Plan) -> str:
    """A plan over several GPU types in words: the winner's explanation, then one line per type."""
    lines = [plan.explanation]
    if plan.gpu_choice is not None:
        lines.append(plan.gpu_choice.basis)
        for row in plan.gpu_choice.options:
            usd = f", ${row.usd_per_million_output_tokens:,.3f} per 1M output tokens" \
                if row.usd_per_million_output_tokens is not None else ""
            lines.append(f"- {row.gpu}: {row.status}{usd}" + (f"; {row.reason}" if row.reason else ""))
    return "\n".join(lines)


def understand_message(state: AgentState, policy: str) -> dict[str, Any]:
    """The state update of the understanding step (the caller adds the turn's bookkeeping)."""
    given = state.get("given_request")
    if given:
        request = PlanRequest.model_validate(given)
        return {"intent": "plan", "request": request.model_dump(mode="json"),
                "parsed": _given(request).model_dump(mode="json")}
    messages = state.get("messages", [])
    last = messages[-1] if messages else None
    text = last.content if isinstance(last, HumanMessage) and isinstance(last.content, str) else ""
    previous = ParsedRequest.model_validate(state["parsed"]) if state.get("parsed") else None
    parsed = parse_request(text, previous)
    echo = reading_text(parsed.model_dump(mode="json"))
    plan = state.get("plan")
    comparing_types = parsed.intent == "compare" and len(gpu_types(parsed)) > 1  # "compare with H200": plan both
    if parsed.intent != "plan" and plan is not None and not comparing_types:
        answer = answer_follow_up(parsed.intent, parsed.about, plan)
        return {"intent": "answer", "messages": [AIMessage(content=answer)]}
    try:
        request = to_plan_request(parsed, policy=policy)
    except InputError as exc:
        ask = exc.fix if exc.field in _ASKING and exc.fix else str(exc)
        # the notes say why a field is asked for (a model not bundled, a GPU outside the catalog); a plan would
        # state them among its assumptions, a question must state them itself
        noted = "".join(f"\n{line}" for line in noted_lines(parsed))
        return {"intent": "ask", "parsed": parsed.model_dump(mode="json"),
                "messages": [AIMessage(content=ask + noted + echo)]}
    types = gpu_types(parsed)
    if len(types) > 1:  # "H100 or H200?": each type planned by the deterministic planner, the cheapest kept
        chosen = plan_gpu_types(request.model_copy(update={"price": None}), types, budget=parsed.gpus,
                                gpus_per_node=parsed.gpus_per_node)
        note = "\nThe price said was not used: say which GPU type it is for." if parsed.gpu_price else ""
        return {"intent": "answer", "parsed": parsed.model_dump(mode="json"),
                "plan": chosen.model_dump(mode="json", exclude={"dag"}),
                "messages": [AIMessage(content=_choice_answer(chosen) + echo + note)]}
    return {"intent": "plan", "request": request.model_dump(mode="json"), "parsed": parsed.model_dump(mode="json")}
