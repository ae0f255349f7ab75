"""The capabilities of :mod:`shardplan.tools.api` as LangChain ``StructuredTool`` objects.

One call, :func:`shardplan_tools`, gives another LangChain or LangGraph agent everything the CLI and the
MCP server can do. A tool never raises into the agent's graph: bad arguments, malformed input and
strategies that cannot be built come back as a structured error, the JSON text of
``{"error", "message", "field", "fix"}`` (in a ToolMessage with ``status="error"`` when called with a tool
call), which the model can read and act on. A successful call returns the result as a dict.

>>> sorted(t.name for t in shardplan_tools())[:3]
['build_dag', 'describe_model', 'estimate_cost']
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.tools import StructuredTool, ToolException
from pydantic import ValidationError

from shardplan.errors import InputError, ShardplanError
from shardplan.tools.api import registry
from shardplan.tools.api.capabilities import CAPABILITIES

__all__ = ["shardplan_tools", "tool_error"]


def tool_error(exc: Exception) -> dict[str, Any]:
    """The structured error a tool returns instead of raising."""
    return registry.error_dict(exc)


def _runner(cap: registry.Capability) -> Callable[..., Any]:
    def run(**kwargs: Any) -> Any:
        try:
            data = registry.dump(cap.func(**kwargs))
            # A bare list would be read as message content blocks; an object keeps it one JSON document.
            return {"results": data} if isinstance(data, list) else data
        except (ShardplanError, ValidationError) as exc:
            # A ToolException becomes a ToolMessage with status "error" whose content is this JSON text.
            raise ToolException(json.dumps(tool_error(exc))) from None

    run.__name__ = cap.name
    run.__doc__ = cap.description
    return run


def _validation_message(exc: Any) -> str:
    if isinstance(exc, ValidationError):
        return json.dumps(tool_error(exc))
    return json.dumps({"error": "InputError", "message": str(exc)[:500], "field": None,
                       "fix": "check the arguments against the tool's schema"})


def shardplan_tools(names: Iterable[str] | None = None) -> list[StructuredTool]:
    """One StructuredTool per capability (or per name in ``names``), in the order of :data:`CAPABILITIES`.

    Raises:
        InputError: a name in ``names`` is not a capability.
    """
    wanted = list(names) if names is not None else list(CAPABILITIES)
    unknown = [n for n in wanted if n not in CAPABILITIES]
    if unknown:
        raise InputError(f"unknown tool {', '.join(unknown)}", field="names",
                         fix=f"choose among {', '.join(CAPABILITIES)}")
    return [
        StructuredTool.from_function(
            func=_runner(CAPABILITIES[name]), name=name, description=CAPABILITIES[name].description,
            args_schema=CAPABILITIES[name].args, handle_validation_error=_validation_message,
            handle_tool_error=True,
        )
        for name in wanted
    ]
