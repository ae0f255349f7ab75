"""The planning graph: understand, retrieve, propose, run tools, check, decide, respond.

```
understand ─► retrieve ─► propose ─► tools ─► check ─► decide ─► respond
    │                        ▲  └──────────────►│        │
    └─► (asked back, or      └── feedback: rule IDs, ◄───┘
         answered a follow-up)   fix hints, SLO misses
```

* **understand** reads the turn: a structured request handed in by the caller, or the user's words
  (:mod:`shardplan.agent.parse.request`), read against the previous turn's request. Missing essentials get a
  question back; "why not PP?" after a plan is answered from that plan without replanning.
* **retrieve** puts the knowledge rules the request has to respect into the state (and the prompt).
* **propose** asks the policy's chat model, tools bound, for its next step.
* **tools** runs its tool calls; an unknown tool or malformed arguments become an error the model reads.
* **check** re-checks every proposed strategy against the request (build, validate, cost; memoised, so
  nothing runs twice) and writes the verdict back as feedback with rule IDs, fix hints and target misses.
* **decide** routes: back to propose, or to respond when a proposal passes every rule and meets the
  targets, when the model is done, or when the iteration or time bound is reached.
* **respond** turns the best valid proposal into the Plan, explains it (rule IDs, runner-up) and says
  what is still wrong when it did not converge; when nothing fits, the infeasible plan with ``min_gpus``.
"""
from __future__ import annotations

import time
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph

from shardplan.agent.nodes import AGENT_TOOLS, Limits, Nodes, last_ai, turn_items, turn_messages
from shardplan.agent.policies import make_policy
from shardplan.agent.state import AgentState
from shardplan.tools.surfaces.langchain_tools import shardplan_tools

__all__ = ["build_graph", "graph_mermaid", "Limits", "AGENT_TOOLS", "after_understand", "after_propose", "decide"]


# ----------------------------------------------------------------------------------------------- routing


def after_understand(state: AgentState) -> Literal["retrieve", "end"]:
    """Plan when the turn holds a request to plan; stop when it asked back or answered from the last plan."""
    return "retrieve" if state.get("intent") == "plan" else "end"


def after_propose(state: AgentState) -> Literal["tools", "check"]:
    """Run the tools the model called; otherwise let the checker look at what the model said."""
    last = state["messages"][-1] if state.get("messages") else None
    if isinstance(last, AIMessage) and (last.tool_calls or last.invalid_tool_calls):
        return "tools"
    return "check"


def decide(state: AgentState) -> Literal["propose", "respond"]:
    """Back to the model with the checker's feedback, or on to the answer."""
    if turn_items(state, "errors"):
        return "respond"
    infeasible = state.get("infeasible")
    if infeasible and infeasible.get("turn") == state.get("turn"):
        return "respond"
    proposals = turn_items(state, "proposals")
    if proposals and proposals[-1]["valid"] and proposals[-1]["meets_targets"]:
        return "respond"
    ai = last_ai(turn_messages(state))
    finished = ai is not None and not ai.tool_calls and not ai.invalid_tool_calls
    if finished and any(p["valid"] for p in proposals):
        return "respond"
    if state.get("iterations", 0) >= state.get("max_iterations", Limits.max_iterations):
        return "respond"
    if time.time() > state.get("deadline", float("inf")):
        return "respond"
    return "propose"



# ------------------------------------------------------------------------------------------------- build


def build_graph(policy: str | BaseChatModel = "builtin", checkpointer: Any = None, *,
                limits: Limits | None = None) -> Any:
    """The compiled planning graph for ``policy`` (a name for :func:`make_policy`, or a chat model).

    Raises:
        InputError: an unknown policy name, or an ``openai:`` policy without ``OPENAI_API_KEY``.
    """

    chat = make_policy(policy) if isinstance(policy, str) else policy
    name = policy if isinstance(policy, str) else getattr(chat, "_llm_type", "custom")
    tools = shardplan_tools(AGENT_TOOLS)
    nodes = Nodes(chat.bind_tools(tools), {t.name: t for t in tools}, limits or Limits(), name)
    graph = StateGraph(AgentState)
    graph.add_node("understand", nodes.understand)
    graph.add_node("retrieve", nodes.retrieve)
    graph.add_node("propose", nodes.propose)
    graph.add_node("tools", nodes.run_tools)
    graph.add_node("check", nodes.check)
    graph.add_node("respond", nodes.respond)
    graph.add_edge(START, "understand")
    graph.add_conditional_edges("understand", after_understand, {"retrieve": "retrieve", "end": END})
    graph.add_edge("retrieve", "propose")
    graph.add_conditional_edges("propose", after_propose, {"tools": "tools", "check": "check"})
    graph.add_edge("tools", "check")
    graph.add_conditional_edges("check", decide, {"propose": "propose", "respond": "respond"})
    graph.add_edge("respond", END)
    return graph.compile(checkpointer=checkpointer)


def recursion_limit(limits: Limits | None = None) -> int:
    """Graph steps one turn may take: three per model call plus the fixed steps, with room to spare."""
    return 4 * (limits or Limits()).max_iterations + 10


def graph_mermaid() -> str:
    """The graph's Mermaid drawing (the shape does not depend on the policy)."""
    return str(build_graph("builtin").get_graph().draw_mermaid())

