"""Running a plan request through the planning graph, with each step shown on the terminal."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from shardplan.agent.graph import build_graph, recursion_limit
from shardplan.agent.policies import PolicyError, redact
from shardplan.contracts.figures import Figures, headline
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.text import counted
from shardplan.tools.api.guards import trusting
from shardplan.tools.api.shared import evaluated_strategy
from shardplan.tools.planning.feature_words import feature_words

__all__ = ["run_plan", "stream_turn", "describe_update", "plan_from_state", "request_message", "show_on_stderr",
           "progress_line"]


def request_message(request: PlanRequest) -> str:
    """The request in words, as the user message of a planning turn."""
    w = request.workload
    targets = f", TTFT <= {w.ttft_ms:g} ms" if w.ttft_ms else ""
    targets += f", TPOT <= {w.tpot_ms:g} ms" if w.tpot_ms else ""
    return (
        f"Plan {request.model} on {request.gpu_words}"
        + (f" ({request.gpus_per_node} per node)" if request.gpus_per_node else "")
        + f": prompts of {counted(w.isl, 'token')}, {w.osl} output tokens, "
        + (f"batch {w.batch}" if w.batch else "concurrency to choose")
        + f"{targets}, objective {w.objective}."
    )


def _tool_line(message: ToolMessage) -> str:
    try:
        data = json.loads(message.content) if isinstance(message.content, str) else {}
    except json.JSONDecodeError:
        data = {}
    if not isinstance(data, dict):
        return f"{message.name}: done"
    if "error" in data:
        return f"{message.name}: error: {data.get('message', data['error'])}"
    if message.name == "search_strategies":
        if not data.get("feasible"):
            return f"search_strategies: nothing fits ({data.get('message', '')})"
        best = data["candidates"][0]["strategy"] if data.get("candidates") else "-"
        return f"search_strategies: {counted(data.get('evaluated', 0), 'strategy', 'strategies')} priced, best {best}"
    if "valid" in data:
        return f"{message.name}: {data.get('strategy') or 'DAG'} {'valid' if data['valid'] else 'invalid'}"
    if "results" in data:
        return f"{message.name}: {len(data['results'])} results"
    return f"{message.name}: done"


def describe_update(node: str, update: dict[str, Any]) -> list[str]:
    """Lines that tell a person what one graph step did (rules retrieved, proposal, violations, cost)."""
    lines: list[str] = []
    if not update:
        return lines
    if node == "understand" and update.get("request"):
        r = update["request"]
        lines.append(
            f"request: {r['model']} on {r['gpus']} x {r['gpu']}, isl {r['workload']['isl']}, "
            f"osl {r['workload']['osl']}, batch {r['workload']['batch'] or 'to choose'}"
            + feature_words(Workload.model_validate(r["workload"])) + f", policy {r['policy']}"
        )
    if node == "retrieve":
        ids = [rule["id"] for rule in update.get("rules", [])]
        more = " ..." if len(ids) > 12 else ""
        lines.append(f"retrieved {counted(len(ids), 'rule')}: {', '.join(ids[:12])}{more}")
    for message in update.get("messages", []):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                detail = call["args"].get("strategy") or call["args"].get("query") or ""
                lines.append(f"propose: {call['name']}({detail})")
            for bad in message.invalid_tool_calls:
                lines.append(f"propose: {bad.get('name')} with malformed arguments")
            if node == "propose" and not message.tool_calls and not message.invalid_tool_calls:
                lines.append("propose: the model answered")
        elif isinstance(message, ToolMessage):
            lines.append("tool " + _tool_line(message))
        elif isinstance(message, HumanMessage) and message.name == "checker":
            for line in str(message.content).splitlines()[:8]:
                if line.startswith("- "):
                    lines.append(f"  {line[2:]}")
                elif line.startswith(("Checker: no valid", "Note:")):
                    lines.append(f"check: {line.removeprefix('Checker: ')}")
    proposals = update.get("proposals")
    lines += [_proposal_line(record) for record in (proposals if isinstance(proposals, list) else [])]
    errors = update.get("errors")
    lines += [f"error: {error['message']}" for error in ([errors] if isinstance(errors, dict) else errors or [])]
    if node == "respond" and update.get("plan"):
        plan = update["plan"]
        strategy = plan["strategy"]
        lines.append(
            f"respond: {plan['status']}"
            + (f", prefill {_spec(strategy['prefill'])}, decode {_spec(strategy['decode'])}" if strategy else "")
        )
    return lines


def _proposal_line(record: dict[str, Any]) -> str:
    found = record.get("figures")
    figures = f" | {headline(Figures.model_validate(found))}" if found else ""
    if not record["valid"]:
        rules = sorted({v["rule"] for v in record["violations"] if v["severity"] == "error"})
        return f"check: {record['strategy']} violates {', '.join(rules)}{figures}"
    reasons = [m["message"] for m in record["misses"]] + record.get("constraint_breaks", [])
    misses = "" if record["meets_targets"] else " | misses " + "; ".join(reasons)
    return f"check: {record['strategy']} valid{figures}{misses}"


def _spec(phase: dict[str, Any]) -> str:
    return PhaseStrategy.model_validate(phase).to_spec()


def stream_turn(
    graph: Any, payload: dict[str, Any], config: dict[str, Any], show: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Run one turn of ``graph`` and return the state it ends in; each step's lines go to ``show``."""
    final: dict[str, Any] = {}
    for mode, chunk in graph.stream(payload, config, stream_mode=["updates", "values"]):
        if mode == "values":
            final = chunk
        elif show is not None:
            for node, update in chunk.items():
                for line in describe_update(node, update or {}):
                    show(line)
    return final


def plan_from_state(state: dict[str, Any]) -> Plan:
    """The Plan a finished planning turn left in ``state``, with its DAG (kept out of the checkpoint because
    of its size; deterministic, and usually still in the evaluation memo).

    Raises:
        PolicyError: the turn ended without a plan; the message says why.
    """

    data = state.get("plan")
    if not data:
        errors = [e["message"] for e in state.get("errors", []) if e.get("turn") == state.get("turn")]
        raise PolicyError(errors[-1] if errors else "the planner ended without a plan")
    plan = Plan.model_validate(data)
    if plan.strategy is not None and plan.dag is None:
        # The evaluation the turn's proposal made (the same memo), so the DAG is not built a second time.
        evaluated = evaluated_strategy(plan.request, plan.strategy.to_spec())
        plan.dag = evaluated.evaluation.dag if evaluated is not None else None
    return plan


def run_plan(
    request: PlanRequest,
    *,
    progress: bool = True,
    policy: str | None = None,
    show: Callable[[str], None] | None = None,
) -> Plan:
    """Plan ``request`` through the planning graph with its policy (``policy`` overrides ``request.policy``).

    With ``progress``, each step (rules retrieved, proposals, violations, cost) is printed on stderr, or handed
    to ``show`` when given.

    Raises:
        InputError: unknown policy, or an ``openai:`` policy without ``OPENAI_API_KEY``.
        PolicyError: the policy's model failed, or no valid strategy was found within the bounds.
    """

    name = policy or request.policy
    request = request.model_copy(update={"policy": name})
    graph = build_graph(name)
    payload = {
        "messages": [HumanMessage(content=request_message(request))],
        "given_request": request.model_dump(mode="json"),
    }
    config = {"recursion_limit": recursion_limit()}
    trace = request.workload.traffic.trace if request.workload.traffic else None
    spec = request.workload.speculation
    draft = spec.draft_model if spec is not None else None
    with trusting(request.model, request.cluster, trace, draft):  # the caller's own files; the model's stay confined
        return plan_from_state(stream_turn(graph, payload, config, (show or show_on_stderr) if progress else None))


def progress_line(line: str) -> str:
    """One planning step as shown to a person: indented under the command's output, secrets redacted."""

    return f"  {redact(line)}"


def show_on_stderr(line: str) -> None:
    """Print one progress line on stderr (see :func:`progress_line`)."""
    sys.stderr.write(progress_line(line) + "\n")
