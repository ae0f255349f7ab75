"""The planning graph's steps (:mod:`shardplan.agent.graph` wires them): understand, retrieve, propose, run
the tools, check, respond; with the bounds of a turn, the system prompt and the helpers they share.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool

from shardplan.agent.hygiene import clean_reply, unusable_replies
from shardplan.agent.policies import redact, request_block
from shardplan.agent.state import AgentState, proposal_rank
from shardplan.agent.understand import assumed_lines, reading_text, understand_message
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InfeasibleError, InputError
from shardplan.knowledge.retriever import search, sections_for_strategy
from shardplan.knowledge.rules import load_rules
from shardplan.text import counted
from shardplan.tools.api import registry, results, shared
from shardplan.tools.api.request_args import RequestArgs
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.planning.planner import infeasible_plan, plan_for_strategy, resolve_request
from shardplan.tools.search.ranking import rank_key

__all__ = ["Limits", "Nodes", "AGENT_TOOLS", "assumed_lines", "turn_items", "turn_messages", "last_ai"]


AGENT_TOOLS = ("search_knowledge", "get_rule", "list_models", "list_gpus", "describe_model", "search_strategies",
               "propose_strategy", "submit_dag", "validate_dag", "estimate_cost")
"""The capabilities the model may call. ``plan`` (which would skip the loop) and ``build_dag`` (whose
whole-DAG output would flood the context) stay out."""
PROPOSING_TOOLS = ("propose_strategy", "submit_dag")
TOOL_OUTPUT_CHARS = 8000
"""Longest tool result put into the conversation; longer ones are cut with a note."""
PROMPT_RULES = 30


@dataclass(frozen=True)
class Limits:
    """Bounds of one planning turn."""

    max_iterations: int = 8
    """Model calls per turn."""
    max_seconds: float = 180.0
    """Wall time per turn, checked between steps (each model call is bounded by its own timeout)."""


SYSTEM_PROMPT = """\
You are shardplan's planner. You choose how to split a large language model across GPUs for inference: a
parallel strategy for the prefill phase and for the decode phase.
Work through the tools. search_strategies ranks the strategies that fit; propose_strategy checks one strategy
(builds its DAG, validates it against every rule, prices it) and is how you put a strategy forward; submit_dag
checks a whole DAG. A checker reviews each proposal and answers with the violated rule IDs, their fix hints
and the missed targets: repair and propose again. When a proposal is valid and meets the targets, or you
cannot do better, answer in a few sentences citing rule IDs.
Strategy SPEC: 'tp=4,pp=2' for both phases, or 'prefill:sp=2,tp=4;decode:adp=2,tp=4'; add ';disagg' for
separate prefill and decode GPU pools. Degrees: dp, pp, adp, sp (prefill only), tp, ep, mb. GPUs used =
dp*pp*adp*sp*tp, which must equal the request's GPUs (per pool when disaggregated).
Pass these request fields unchanged to every tool that takes them:
"""



# ------------------------------------------------------------------------------------------------ helpers


def turn_messages(state: AgentState) -> list[AnyMessage]:
    messages = state.get("messages", [])
    start = state.get("turn_start")
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].id == start:
            return messages[index:]
    return list(messages)


def last_ai(messages: list[AnyMessage]) -> AIMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def turn_items(state: AgentState, key: Literal["proposals", "errors"]) -> list[dict[str, Any]]:
    return [item for item in state.get(key, []) if item.get("turn") == state.get("turn")]


def _request(state: AgentState) -> PlanRequest:
    return PlanRequest.model_validate(state["request"])


def _rules_of(rule_ids: list[str]) -> list[dict[str, Any]]:
    rules = load_rules()
    return [rules[i].model_dump() for i in dict.fromkeys(rule_ids) if i in rules]


def _score(check: results.StrategyCheck, request: PlanRequest) -> list[float]:
    """The search's own rank key of the proposal's figures (target misses first, then the objective)."""
    if check.figures is None:
        return [float("inf")]
    return list(rank_key(request.workload)(check.figures))


def _tool_check(reply: ToolMessage) -> results.StrategyCheck | None:
    """The check the propose_strategy tool already made, read from its result in the state (None when the text
    was cut to fit the conversation: the checker then asks the memoised evaluation again)."""
    if not isinstance(reply.content, str):
        return None
    try:
        return results.StrategyCheck.model_validate_json(reply.content)
    except ValueError:
        return None


def _reasons(rec: dict[str, Any]) -> list[str]:
    """What a proposal record misses, in words: its missed targets, then the constraints it breaks."""
    return [m["message"] for m in rec.get("misses", [])] + list(rec.get("constraint_breaks", []))


def _feedback(records: list[dict[str, Any]], notes: list[str]) -> str:
    """The checker's words to the model about this round's proposals."""
    lines = []
    for rec in records:
        if rec["valid"] and rec["meets_targets"]:
            lines.append(f"Checker: {rec['strategy']} is valid and meets the targets.")
            continue
        if rec["valid"]:
            lines.append(f"Checker: {rec['strategy']} is valid but misses: {'; '.join(_reasons(rec))}.")
        else:
            errors = [v for v in rec["violations"] if v["severity"] == "error"] or rec["violations"]
            lines.append(f"Checker: {rec['strategy']} is invalid ({counted(rec['violations_total'], 'violation')}):")
            lines += [f"- {v['rule']}: {v['message']}" + (f" Fix: {v['fix']}" if v["fix"] else "") for v in errors[:6]]
            lines += [f"- misses: {m}" for m in _reasons(rec)]
    lines += notes
    lines.append("Propose a corrected strategy with propose_strategy, or answer if you cannot do better.")
    return "\n".join(lines)



# ------------------------------------------------------------------------------------------------- nodes


class Nodes:
    """The graph's steps, sharing the bound chat model, the tools and the bounds."""

    def __init__(self, model: Any, tools: dict[str, BaseTool], limits: Limits, policy_name: str) -> None:
        self.model = model
        self.tools = tools
        self.limits = limits
        self.policy_name = policy_name

    # understand ----------------------------------------------------------------------------------------
    def understand(self, state: AgentState) -> dict[str, Any]:
        messages = state.get("messages", [])
        last = messages[-1] if messages else None
        now = time.time()
        update: dict[str, Any] = {"turn": state.get("turn", 0) + 1, "iterations": 0, "started_at": now,
                                  "given_request": None, "max_iterations": self.limits.max_iterations,
                                  "deadline": now + self.limits.max_seconds,
                                  "turn_start": last.id if last is not None else "", "checked": ""}
        return {**update, **understand_message(state, self.policy_name)}

    # retrieve ------------------------------------------------------------------------------------------
    def retrieve(self, state: AgentState) -> dict[str, Any]:
        request = _request(state)
        model, cluster = resolve_request(request)
        topics = ["decode step order KV cache", "tensor parallel all-reduce critical path", "memory fit"]
        if model.is_moe:
            topics.append("expert parallelism all-to-all routing")
        if cluster.nodes > 1:
            topics.append("inter-node network placement hierarchy")
        if request.workload.isl >= 8192:
            topics.append("sequence parallelism long prompts")
        sections = sections_for_strategy({}, {}, model.is_moe) + search(" ".join(topics), k=6)
        return {"rules": _rules_of([rule for s in sections for rule in s.rule_ids])}

    # propose -------------------------------------------------------------------------------------------
    def propose(self, state: AgentState) -> dict[str, Any]:
        request = _request(state)
        rules = state.get("rules", [])
        listed = "\n".join(f"- {r['id']} ({r['severity']}): {r['text'][:300]}" for r in rules[:PROMPT_RULES])
        system = (SYSTEM_PROMPT + request_block(RequestArgs.from_request(request))
                  + "\nKnowledge rules that apply:\n" + listed)
        conversation: list[BaseMessage] = [SystemMessage(content=system), *turn_messages(state)]
        iterations = state.get("iterations", 0) + 1
        try:
            reply = self.model.invoke(conversation)
        except Exception as exc:  # noqa: BLE001  (an endpoint fails in many ways; each ends the turn clearly)
            message = redact(f"the {self.policy_name} model failed: {type(exc).__name__}: {exc}")[:600]
            return {"iterations": iterations, "errors": {"turn": state["turn"], "message": message}}
        # The reply enters the state (and so the terminal and the checkpoint) without the key and bounded.
        return {"iterations": iterations, "messages": [clean_reply(reply)]}

    # tools ---------------------------------------------------------------------------------------------
    def run_tools(self, state: AgentState) -> dict[str, Any]:
        ai = state["messages"][-1]
        assert isinstance(ai, AIMessage)
        out: list[ToolMessage] = []
        for call in ai.tool_calls:
            tool = self.tools.get(call["name"])
            if tool is None:
                content = json.dumps({"error": "UnknownTool", "message": f"there is no tool named {call['name']!r}",
                                      "fix": f"call one of {', '.join(self.tools)}"})
                out.append(ToolMessage(content=content, tool_call_id=call["id"] or "", name=call["name"],
                                       status="error"))
                continue
            try:
                result = tool.invoke({**call, "type": "tool_call"})
            except Exception as exc:  # noqa: BLE001  (a tool never takes the graph down; the model reads why)
                result = ToolMessage(content=json.dumps(registry.error_dict(exc)), tool_call_id=call["id"] or "",
                                     name=call["name"], status="error")
            out.append(result)
        for bad in ai.invalid_tool_calls:
            name = bad.get("name") or "unknown"
            content = json.dumps({"error": "MalformedArguments",
                                  "message": f"the arguments of {name} are not a JSON object: {bad.get('error') or ''}"
                                             .strip().rstrip(":"),
                                  "fix": "send the arguments as one JSON object that matches the tool's schema"})
            out.append(ToolMessage(content=content, tool_call_id=bad.get("id") or "", name=name, status="error"))
        for message in out:
            if isinstance(message.content, str) and len(message.content) > TOOL_OUTPUT_CHARS:
                message.content = message.content[:TOOL_OUTPUT_CHARS] + " ... [cut: ask for less]"
        return {"messages": out}

    # check ---------------------------------------------------------------------------------------------
    def check(self, state: AgentState) -> dict[str, Any]:
        messages = turn_messages(state)
        last = messages[-1]
        if last.id == state.get("checked") or not isinstance(last, (AIMessage, ToolMessage)):
            return {}
        update: dict[str, Any] = {"checked": last.id}
        ai = last_ai(messages)
        request = _request(state)
        records, notes = self._check_proposals(state, ai, messages, request)
        if records:
            latest = records[-1]
            update.update(proposals=records, best_plan=min(records, key=proposal_rank), figures=latest["figures"],
                          validation={k: latest[k] for k in ("strategy", "valid", "violations", "violations_total")},
                          rules=self._rules_for(latest["strategy"], request))
            if not (latest["valid"] and latest["meets_targets"]):
                update["messages"] = [HumanMessage(content=_feedback(records, notes), name="checker")]
            return update
        finished = ai is not None and not ai.tool_calls and not ai.invalid_tool_calls
        if finished and not any(p["valid"] for p in turn_items(state, "proposals")):
            outcome = shared.search_request(request)
            if isinstance(outcome, InfeasibleError):
                update["infeasible"] = {"turn": state["turn"], "message": str(outcome), "min_gpus": outcome.min_gpus}
            else:
                update["messages"] = [HumanMessage(name="checker", content=(
                    "Checker: no valid strategy has been proposed yet. Call propose_strategy with a SPEC "
                    "(search_strategies ranks candidates that fit)."))]
        return update

    def _check_proposals(self, state: AgentState, ai: AIMessage | None, messages: list[AnyMessage],
                         request: PlanRequest) -> tuple[list[dict[str, Any]], list[str]]:
        if ai is None:
            return [], []
        answered = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
        expected = RequestArgs.from_request(request)
        records, notes = [], []
        for call in ai.tool_calls:
            reply = answered.get(call["id"] or "")
            if call["name"] not in PROPOSING_TOOLS or reply is None or reply.status == "error":
                continue
            spec = call["args"].get("strategy")
            if call["name"] == "submit_dag":
                data = json.loads(reply.content) if isinstance(reply.content, str) else {}
                spec = data.get("strategy")
                if not data.get("valid") or spec is None:
                    continue
            differing = sorted(k for k, v in expected.items() if k in call["args"] and call["args"][k] != v)
            if differing:
                notes.append(f"Note: your call set {', '.join(differing)} unlike the request; the checker used the "
                             "request's values.")
            try:
                check = _tool_check(reply) if call["name"] == "propose_strategy" and not differing else None
                check = check or shared.evaluate_strategy(request, str(spec))
            except InputError:
                continue
            records.append({**check.model_dump(mode="json"), "turn": state["turn"],
                            "iteration": state.get("iterations", 0), "source": call["name"],
                            "score": _score(check, request)})
        return records, notes

    @staticmethod
    def _rules_for(spec: str, request: PlanRequest) -> list[dict[str, Any]]:
        try:
            strategy = parse_strategy(spec)
        except InputError:
            return []

        def degrees(phase: Any) -> dict[str, int]:
            values = {k: getattr(phase, k) for k in ("dp", "pp", "adp", "sp", "tp", "ep", "mb")}
            return {**values, "etp": phase.etp} if phase.etp else values

        moe = load_model(request.model).is_moe
        sections = sections_for_strategy(degrees(strategy.prefill), degrees(strategy.decode), moe)
        return _rules_of([rule for s in sections for rule in s.rule_ids])

    # respond -------------------------------------------------------------------------------------------
    def respond(self, state: AgentState) -> dict[str, Any]:
        request = _request(state)
        turn = state["turn"]
        proposals = turn_items(state, "proposals")
        errors = [e["message"] for e in turn_items(state, "errors")]
        best = state.get("best_plan")
        if not (best and best.get("turn") == turn and best["valid"] and (best.get("figures") or {}).get("fits")):
            return self._no_plan(state, request, proposals, errors)
        fields = results.StrategyCheck.model_fields
        chosen = results.StrategyCheck.model_validate({k: v for k, v in best.items() if k in fields})
        model, cluster = resolve_request(request)
        notes = [f"policy {self.policy_name}: {counted(len(proposals), 'proposal')} checked in "
                 f"{state.get('iterations', 0)} "
                 f"model call(s)"]
        still_wrong = [f"stopped early: {e}." for e in errors]
        if not chosen.meets_targets:
            still_wrong.append(f"No strategy met every target within the bounds; the best valid one is shown, and it "
                               f"misses {'; '.join(_reasons(best))}.")
        searched = shared.search_request(request)
        if not isinstance(searched, InfeasibleError) and searched.simpler_preferred and searched.candidates:
            notes += [searched.simpler_preferred] if searched.candidates[0].spec == chosen.strategy else []
        notes += searched.notes if not isinstance(searched, InfeasibleError) else []
        # The deployment the proposal's tool call evaluated (its DAG, report and priced option), not a second one.
        plan = plan_for_strategy(request, model, cluster, parse_strategy(chosen.strategy),
                                 shared.alternatives_for(request, chosen.strategy), notes + still_wrong[:len(errors)],
                                 None if isinstance(searched, InfeasibleError) else searched.frontier,
                                 evaluated=shared.evaluated_strategy(request, chosen.strategy))
        plan.explanation += self._checked_sentence(state, plan)
        reading = reading_text(state.get("parsed"), assumed=False)
        text = " ".join([*still_wrong, plan.explanation]) + reading + assumed_lines(plan)
        return {"plan": plan.model_dump(mode="json", exclude={"dag"}), "messages": [AIMessage(content=text)]}

    @staticmethod
    def _checked_sentence(state: AgentState, plan: Any) -> str:
        """A sentence naming rules the plan was checked against, from those retrieved for this request."""
        checked = set(plan.validation.rules_checked) if plan.validation else set()
        cited = [r["id"] for r in state.get("rules", []) if r["id"] in checked and r["severity"] == "mandatory"][:4]
        if not plan.validation or not plan.validation.valid or not cited:
            return ""
        return f" It passes all {len(checked)} validator rules, among them {', '.join(cited)}."

    def _no_plan(self, state: AgentState, request: PlanRequest, proposals: list[dict[str, Any]],
                 errors: list[str]) -> dict[str, Any]:
        outcome = shared.search_request(request)
        if isinstance(outcome, InfeasibleError):
            plan = infeasible_plan(request, outcome)
            fixes = "".join(f"\nIt would fit with {hint.text}." for hint in plan.hints)
            return {"plan": plan.model_dump(mode="json", exclude={"dag"}),
                    "messages": [AIMessage(content=plan.explanation + fixes
                                             + reading_text(state.get("parsed"), assumed=False) + assumed_lines(plan))]}
        wrong = []
        if proposals:
            last = proposals[-1]
            wrong.append(f"the last proposal {last['strategy']} "
                         + ("violates " + ", ".join(sorted({v['rule'] for v in last['violations']}))
                            if not last["valid"] else "misses " + "; ".join(_reasons(last))))
        why = unusable_replies(turn_messages(state), proposals) + wrong
        reason = errors[0] if errors else (f"no valid strategy after "
                                           f"{counted(state.get('iterations', 0), 'model call')}"
                                           + (f": {'; '.join(why)}" if why else ""))
        update: dict[str, Any] = {"plan": None, "messages": [AIMessage(content=f"No plan: {reason}.")]}
        if not errors:
            update["errors"] = {"turn": state["turn"], "message": reason}
        return update


