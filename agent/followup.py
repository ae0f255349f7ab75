"""Answers to follow-up questions about a plan ("why not PP?", "explain", "compare TP and PP").

They come from the plan itself: its runners-up and their ``why_not``, its cost, its explanation. Only when
no runner-up uses the technique asked about is the (memoised) strategy search consulted for the best
strategy that does; nothing is replanned.
"""

from __future__ import annotations

from typing import Any

from shardplan.contracts.plan import Plan
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InputError
from shardplan.knowledge.retriever import search
from shardplan.text import counted
from shardplan.tools.api import shared
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.planning.planner import why_not
from shardplan.tools.search.deployments import SearchResult
from shardplan.tools.search.layouts import SP_MIN_PROMPT

__all__ = ["answer_follow_up", "uses"]

_DEGREES = ("dp", "pp", "adp", "sp", "tp", "ep", "mb")
_TOPIC_QUERIES = {
    "pp": "pipeline parallelism stages decode step sequential", "tp": "tensor parallelism all-reduce decode",
    "ep": "expert parallelism all-to-all", "sp": "sequence parallelism prefill only decode",
    "dp": "data parallelism replicas", "adp": "data-parallel attention groups",
    "disagg": "disaggregated prefill decode KV transfer",
}
_NAMES = {"pp": "PP", "tp": "TP", "ep": "EP", "sp": "SP", "dp": "DP", "adp": "attention DP",
          "disagg": "disaggregation", "mb": "microbatching"}


def uses(spec: str, about: str) -> bool:
    """Whether the strategy ``spec`` uses the technique ``about`` (a degree name or ``disagg``).

    >>> uses("prefill:pp=2,tp=4;decode:pp=2,tp=4", "pp"), uses("tp=8", "pp")
    (True, False)
    """
    try:
        strategy = parse_strategy(spec)
    except InputError:
        return False
    if about == "disagg":
        return strategy.disaggregated
    if about not in _DEGREES:
        return False
    return getattr(strategy.prefill, about) > 1 or getattr(strategy.decode, about) > 1


def _rule_hint(about: str) -> str:
    hits = search(_TOPIC_QUERIES.get(about, about), k=1)
    ids = hits[0].rule_ids[:2] if hits else []
    return f" (see {', '.join(ids)})" if ids else ""


def _not_applicable(about: str, plan: Plan) -> str:
    """Why the technique cannot apply to this request at all, or an empty string."""

    if about == "ep" and not load_model(plan.request.model).is_moe:
        return f"{plan.request.model} is dense: expert parallelism needs mixture-of-experts layers (EP-3)."
    if about == "sp" and plan.request.workload.isl < SP_MIN_PROMPT:
        return (f"Prompts of {counted(plan.request.workload.isl, 'token')} are too short for sequence parallelism to "
                f"pay for "
                f"its collectives; the search shards prompts of {SP_MIN_PROMPT}+ tokens only{_rule_hint('sp')}.")
    return ""


def _why_not(about: str, plan: Plan) -> str:
    name = _NAMES.get(about, about.upper())
    mine = plan.priced()
    assert plan.strategy is not None and mine is not None
    chosen = plan.strategy.to_spec()
    if uses(chosen, about):
        return f"The plan already uses {name}: {chosen}."
    reason = _not_applicable(about, plan)
    if reason:
        return reason
    alternative = next((a for a in plan.alternatives if uses(a.strategy, about)), None)
    if alternative is not None:
        return f"The best strategy with {name}, {alternative.strategy}, lost to {chosen}: {alternative.why_not}" \
               f"{_rule_hint(about)}."
    result = shared.search_request(plan.request)
    if not isinstance(result, SearchResult):
        return f"Nothing fits at all, with {name} or without."
    rival = next((c for c in result.candidates if uses(c.spec, about)), None)
    if rival is None:
        return (f"No strategy with {name} ranks among the {len(result.candidates)} best of the {result.evaluated} "
                f"priced for this request; {chosen} does better{_rule_hint(about)}.")
    return (f"The best strategy with {name}, {rival.spec}, lost to {chosen}: "
            f"{why_not(rival, mine, plan.request.workload.objective)}{_rule_hint(about)}.")


def answer_follow_up(intent: str, about: str | None, plan_data: dict[str, Any]) -> str:
    """The answer to a follow-up about the plan ``plan_data`` (a Plan as a dict), without replanning.

    ``intent`` is ``why_not``, ``explain`` or ``compare``; ``about`` names the technique(s), comma-separated.
    """
    plan = Plan.model_validate(plan_data)
    if plan.priced() is None:
        return f"There is no strategy to discuss: {plan.explanation}"
    topics = [t.strip() for t in (about or "").split(",") if t.strip()]
    if intent == "explain" or not topics:
        return plan.explanation
    return " ".join(_why_not(topic, plan) for topic in topics)
