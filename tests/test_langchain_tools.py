"""A LangGraph agent calls the exported ``shardplan_tools()``: a scripted fake chat model (an iterator of
AIMessages that runs out rather than cycling) drives a tool-calling graph with a checkpointer, and the
tool results it reads are the capability layer's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import Field

from shardplan.tools.api import capabilities
from shardplan.tools.surfaces.langchain_tools import shardplan_tools

SMALL = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 2, "isl": 512, "osl": 64}
ANSWER = "Serve Llama-3.1-8B with tp=2 on both phases."


class ScriptedChat(GenericFakeChatModel):
    """Plays back scripted AIMessages and records the tools bound and every message list it was shown."""

    bound: list[str] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Record the tool names; the script already holds the calls."""
        self.bound = [tool.name for tool in tools]
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def tool_agent(chat: ScriptedChat, tools: Sequence[BaseTool]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The minimal tool-calling loop another LangGraph agent would build around the exported tools."""
    model = chat.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def test_a_langgraph_agent_calls_the_exported_tools_and_reads_their_results() -> None:
    script = iter([
        AIMessage("", tool_calls=[call("list_models", "c1"), call("describe_model", "c2", model="deepseek-v3")]),
        AIMessage("", tool_calls=[call("plan", "c3", **{**SMALL, "gpus": 0})]),
        AIMessage("", tool_calls=[call("plan", "c4", **SMALL)]),
        AIMessage("", tool_calls=[call("search_strategies", "c5", **SMALL, top=2),
                                  call("get_rule", "c6", rule_id="DEC-1")]),
        AIMessage(ANSWER),
    ])
    chat = ScriptedChat(messages=script)
    tools = shardplan_tools()
    agent = tool_agent(chat, tools)
    config: RunnableConfig = {"configurable": {"thread_id": "langchain-tools"}}

    final = agent.invoke({"messages": [HumanMessage("Plan Llama-3.1-8B on 2 H100.")]}, config)

    assert chat.bound == list(capabilities.CAPABILITIES)
    assert next(script, None) is None  # the agent used the whole script, no more
    assert final["messages"][-1].content == ANSWER
    replies: dict[str, ToolMessage] = {m.tool_call_id: m for m in final["messages"] if isinstance(m, ToolMessage)}
    assert sorted(replies) == ["c1", "c2", "c3", "c4", "c5", "c6"]

    def data(call_id: str) -> Any:
        content = replies[call_id].content
        assert isinstance(content, str)
        return json.loads(content)

    assert "meta-llama/Llama-3.1-8B" in {m["name"] for m in data("c1")["results"]}
    assert abs(data("c2")["params_total"] / 671e9 - 1) < 0.02
    assert replies["c3"].status == "error" and data("c3")["field"] == "gpus" and data("c3")["fix"]
    plan = data("c4")
    direct = capabilities.plan(**SMALL)
    assert replies["c4"].status == "success" and plan["validation"]["valid"] is True
    assert direct.strategy is not None and plan["strategy"] == direct.strategy and plan["plan"] is None
    assert data("c5")["feasible"] and len(data("c5")["candidates"]) <= 2
    assert data("c6")["id"] == "DEC-1" and data("c6")["severity"] == "mandatory"

    # The model was shown each result before its next turn: the error first, then the plan it retried.
    assert [len(seen) for seen in chat.seen] == [1, 4, 6, 8, 11]
    assert isinstance(chat.seen[2][-1], ToolMessage) and chat.seen[2][-1].status == "error"
    assert isinstance(chat.seen[3][-1], ToolMessage) and chat.seen[3][-1].tool_call_id == "c4"

    history = list(agent.get_state_history(config))
    assert agent.get_state(config).next == ()
    assert len(history[0].values["messages"]) == len(final["messages"]) == 12
    assert len(history) >= 10  # one checkpoint per agent and tools step
