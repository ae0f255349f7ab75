"""The capabilities of :mod:`shardplan.tools.api` as an MCP server (the official SDK's ``MCPServer``).

:func:`build_server` returns the server: twelve tools, each a thin wrapper over the capability of the same
name (its argument model is the tool's input schema, its pydantic result the structured output, its
docstring the description); one resource per knowledge document (``shardplan://knowledge/<file>.md``)
and per published JSON Schema (``shardplan://schemas/<name>``); the template ``shardplan://results/{id}``
of recent full results; and the prompt ``plan_deployment``.

:func:`serve` runs it over stdio or streamable HTTP (``http://127.0.0.1:8765/mcp`` by default).

Results are compact: a tool result's text is a short summary, its structured content the compact result
(a DeepSeek-V3 plan is about 6 KB, where the whole plan is 150 KB), and a result with more to say links
its whole part as a resource kept in a bounded store; ``detail=true`` puts the whole part in the answer.

Every tool call runs in a worker process with a time limit (``$SHARDPLAN_TOOL_TIMEOUT``, default
:data:`~shardplan.limits.TOOL_CALL_SECONDS`); a call past it, or cancelled by its client, has its worker
killed, so the server's memory returns to its baseline (plus the kept full results, bounded by
:data:`~shardplan.limits.MAX_STORED_RESULTS` and :data:`~shardplan.limits.MAX_STORED_RESULT_CHARS`).
A bad argument never reaches the capability unchecked and never stops the server: the call returns a
result with ``isError`` set whose text is the JSON of ``{"error", "message", "field", "fix"}``. Sizes are
bounded (:data:`~shardplan.tools.api.MAX_DAG_CHARS`; nodes and edges by :func:`~shardplan.limits.check_dag_size`,
counted on the text before it is parsed); config paths are read only under the allowed roots (the working
directory, or ``$SHARDPLAN_ALLOWED_ROOTS``); nothing runs a shell.

>>> import anyio
>>> from mcp import Client
>>> async def models() -> list[str]:
...     async with Client(build_server()) as client:
...         result = await client.call_tool("list_models", {})
...     return [row["name"] for row in result.structured_content["result"]]
>>> "meta-llama/Llama-3.1-8B" in anyio.run(models)
True
"""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
import typing
from collections.abc import Callable, Sequence
from importlib.resources.abc import Traversable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp_types import CallToolResult, ContentBlock, ResourceLink, TextContent, ToolAnnotations
from pydantic import ConfigDict, Field

from shardplan import __version__
from shardplan.contracts.schemas import SCHEMA_NAMES, json_schema
from shardplan.errors import InputError
from shardplan.knowledge.rules import doc_files
from shardplan.limits import MAX_STORED_RESULTS, tool_call_seconds
from shardplan.tools.api import capabilities, guards, registry
from shardplan.tools.api.result_store import RESULT_URI, ResultStore, result_uri
from shardplan.tools.api.texts import summary_text
from shardplan.tools.api.workers import CapabilityWorkers
from shardplan.tools.fleet import tool as fleet_tool

__all__ = ["TOOL_NAMES", "SERVED", "HTTP_PATH", "DEFAULT_HOST", "DEFAULT_PORT", "MAX_HTTP_BODY", "build_server",
           "serve"]

TOOL_NAMES = ("plan", "sweep", "build_dag", "validate_dag", "estimate_cost", "search_strategies", "propose_strategy",
              "search_knowledge", "get_rule", "list_models", "list_gpus", "describe_model")
"""The capabilities served as MCP tools, in listing order."""
SERVED: dict[str, registry.Capability] = {**capabilities.CAPABILITIES,
                                          "sweep": fleet_tool.sweep.capability}  # type: ignore[attr-defined]
"""Every capability the server runs by name: the capability layer's and the sweep (which sits above it)."""
_TEXTS: dict[str, Callable[[Any], str]] = {"sweep": fleet_tool.sweep_text}
"""Summaries of the results whose capability sits above the capability layer's own summaries."""
HTTP_PATH = "/mcp"
"""Path of the streamable HTTP endpoint."""
DEFAULT_HOST = "127.0.0.1"
"""Address the HTTP transport binds by default: this machine only."""
DEFAULT_PORT = 8765
"""Port the HTTP transport listens on by default."""
MAX_HTTP_BODY = 2 * guards.MAX_DAG_CHARS + 1_000_000
"""Largest HTTP request body accepted, in bytes: room for a DAG at the capability limit sent as an escaped
JSON string, so the capability's own clear message answers oversized DAGs rather than a bare HTTP 413."""

KNOWLEDGE_URI = "shardplan://knowledge/{doc}"
"""URI of a knowledge document; ``doc`` is its file name, the ``doc`` of search_knowledge results."""
SCHEMA_URI = "shardplan://schemas/{name}"
"""URI of a published JSON Schema; ``name`` is one of :data:`~shardplan.contracts.schemas.SCHEMA_NAMES`."""

_LOOPBACK = ("127.0.0.1", "localhost", "::1")

_INSTRUCTIONS = """\
shardplan plans how to split a large language model across GPUs for inference. It answers with a parallel
strategy (TP, PP, EP, SP, DP per phase), its DAG of compute, communication and KV-cache steps, the
validators' verdict (violations name knowledge rule IDs and a fix) and the cost model's figures (TTFT,
TPOT, throughput, memory per GPU).
Start with `plan` (model, gpu, gpus, isl, osl, targets; speculative decoding as spec='mtp:1' with spec_accept,
the measured accepted draft tokens per step, and prefix caching as prefix_hit=0.5); use `search_strategies` to
compare alternatives; `plan` with gpu='H100,H200' (or 'any') and engine='auto' compares GPU types and serving
engines and names the cheapest; `sweep` plans a small grid (models x GPUs x engines x rates) in one call;
`build_dag` + `validate_dag` + `estimate_cost` to check one strategy, `search_knowledge`
and `get_rule` to cite the rules. `list_models`, `list_gpus` and `describe_model` show what is bundled. A
strategy SPEC reads 'tp=4,pp=2' or 'prefill:sp=2,tp=4;decode:adp=2,tp=4'. Errors come back as JSON with a
field and a fix. Results are compact (a plan is a few KB); pass detail=true for the whole result (critical paths, every
violation, every candidate), or read the shardplan://results/<id> resource a result links to."""


class _RawArguments(ArgModelBase):
    """Hands a tool every argument exactly as sent.

    The SDK's own argument model ignores unknown keys and words errors its own way; the capability's
    argument model (``extra="forbid"``) checks them instead, so an unknown key or a bad value comes back
    as an InputError that names the field and the fix.
    """

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        """The arguments as sent, for the tool function's keyword arguments."""
        return dict(self.model_extra or {})


def _error_result(exc: Exception) -> CallToolResult:
    """A tool error the calling model can act on: the JSON of ``{"error", "message", "field", "fix"}``."""
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(registry.error_dict(exc)))], is_error=True)


def _detail_field(cap: registry.Capability) -> str | None:
    """The result field that holds capability ``cap``'s full result, when its result has one."""
    returns = typing.get_type_hints(inspect.unwrap(cap.func))["return"]
    field = getattr(returns, "DETAIL_FIELD", None)
    return field if isinstance(field, str) and "detail" in cap.args.model_fields else None


def _detail_call(arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether the caller asked for the full result, and the arguments that fetch it in every case.

    The full result is always fetched so that the server can keep it; a ``detail`` that is not a boolean
    goes to the capability unchanged, to be refused (or read) by its argument model.
    """
    asked = arguments.get("detail", False)
    if not isinstance(asked, bool):
        return True, arguments
    return asked or arguments.get("include_dag") is True, {**arguments, "detail": True}


def _keep_full(store: ResultStore, name: str, field: str, data: dict[str, Any],
               wanted: bool) -> tuple[dict[str, Any], ResourceLink | None]:
    """``data`` with its full part kept in ``store`` (and dropped when not ``wanted``), and the link to it."""
    full = data.get(field)
    if full is None:
        return data, None
    text = json.dumps(full, separators=(",", ":"))
    result_id = store.put(text)
    compact = data if wanted else {**data, field: None}
    if result_id is None:
        return compact, None
    link = ResourceLink(
        type="resource_link", uri=result_uri(result_id), name=f"{name}-{result_id}", title=f"Full {name} result",
        description=f"The whole '{field}' of this {name} result, kept for the last {MAX_STORED_RESULTS} results.",
        mime_type="application/json", size=len(text.encode()),
    )
    return compact, link


def _tool(name: str, workers: CapabilityWorkers, store: ResultStore) -> Tool:
    """The MCP tool of capability ``name``: its argument model as input schema, its result as output.

    The call runs in a worker process under the time limit of :func:`~shardplan.limits.tool_call_seconds`;
    a call past it, or one its client cancels, has its worker killed. A result with a full part (see
    :data:`~shardplan.tools.api.results.Result.DETAIL_FIELD`) has it kept in ``store`` and linked; it stays
    in the answer only when the call asked for ``detail``.
    """
    cap = SERVED[name]
    field = _detail_field(cap)

    async def run(**arguments: Any) -> CallToolResult:
        try:
            seconds = tool_call_seconds()
        except InputError as exc:
            return _error_result(exc)
        wanted, call_arguments = _detail_call(arguments) if field else (False, arguments)
        ok, data = await workers.call(name, call_arguments, seconds)
        if not ok:
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(data))], is_error=True)
        link = None
        if field and isinstance(data, dict):
            data, link = _keep_full(store, name, field, data, wanted)
        # A short summary for people and models that read the text; the data itself, checked against the
        # output schema by the SDK, as structured content; the full result as a linked resource.
        text = _TEXTS[name](data) if name in _TEXTS else summary_text(name, data)
        if link is not None:
            text += f"\nfull result: {link.uri} (read that resource, or call again with detail=true)"
        content: list[ContentBlock] = [TextContent(type="text", text=text)]
        if link is not None:
            content.append(link)
        structured = {"result": data} if tool.fn_metadata.wrap_output else data
        return CallToolResult(content=content, structured_content=structured)

    run.__name__ = name
    run.__doc__ = cap.description
    # The SDK derives the output schema from the signature's return annotation; the arguments are the
    # capability's to check, so the signature lists none of them.
    returns = typing.get_type_hints(inspect.unwrap(cap.func))["return"]
    run.__signature__ = inspect.Signature(return_annotation=returns)  # type: ignore[attr-defined]
    tool = Tool.from_function(
        run, name=name, title=name.replace("_", " ").capitalize(), description=cap.description,
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False),
        structured_output=True,
    )
    tool.fn_metadata.arg_model = _RawArguments
    tool.parameters = cap.args.model_json_schema()
    return tool


def _result_reader(store: ResultStore) -> Callable[[str], str]:
    def read(result_id: str) -> str:
        text = store.get(result_id)
        if text is None:
            raise ResourceNotFoundError(
                f"no kept result '{result_id[:40]}': only the last {MAX_STORED_RESULTS} full results are kept; "
                "call the tool again with detail=true")
        return text

    return read


def _text_reader(path: Traversable) -> Callable[[], str]:
    def read() -> str:
        return path.read_text(encoding="utf-8")

    return read


def _schema_reader(name: str) -> Callable[[], str]:
    def read() -> str:
        return json.dumps(json_schema(name), indent=2, sort_keys=True)

    return read


def _knowledge_resources() -> list[FunctionResource]:
    """One resource per knowledge document, titled by its first heading."""

    resources = []
    for path in doc_files():
        first = path.read_text(encoding="utf-8").lstrip().splitlines()[0]
        title = first.lstrip("#").strip() or path.name
        resources.append(FunctionResource.from_function(
            _text_reader(path), uri=KNOWLEDGE_URI.format(doc=path.name), name=path.name, title=title,
            description=f"Knowledge document '{title}': the rules (with IDs) that the validators enforce.",
            mime_type="text/markdown"))
    return resources


def _schema_resources() -> list[FunctionResource]:
    """One resource per published JSON Schema of the contracts."""

    return [FunctionResource.from_function(
        _schema_reader(name), uri=SCHEMA_URI.format(name=name), name=f"{name}.schema.json",
        title=f"JSON Schema: {name}", description=f"JSON Schema (draft 2020-12) of shardplan's {name} contract.",
        mime_type="application/schema+json") for name in SCHEMA_NAMES]


def plan_deployment(
    model: Annotated[str, Field(description="Bundled model name (llama-3.1-70b, deepseek-v3) or config.json path.")],
    gpus: Annotated[int, Field(ge=1, description="GPUs available.")],
    gpu: Annotated[str, Field(description="GPU catalog name: H100, H200, B200, A100, L40S, MI300X.")] = "H100",
    isl: Annotated[int, Field(ge=1, description="Input (prompt) tokens.")] = 2048,
    osl: Annotated[int, Field(ge=1, description="Output tokens.")] = 256,
    targets: Annotated[str, Field(description="Latency targets, e.g. 'ttft_ms=500, tpot_ms=50'; empty for none.")] = "",
) -> str:
    """Plan a deployment with shardplan's tools: which calls to make, in which order, and what to report."""
    wanted = f" and meet the targets {targets}" if targets.strip() else ""
    return f"""\
Plan how to serve {model} on {gpus} x {gpu} GPUs for prompts of {isl} tokens and outputs of {osl} tokens{wanted}.
Use the shardplan tools; every figure you report must come from a tool result.
1. describe_model(model="{model}") and list_gpus() to know the model's size and the GPU's memory.
2. plan(model="{model}", gpu="{gpu}", gpus={gpus}, isl={isl}, osl={osl}{_target_args(targets)}): the chosen
   strategy per phase, its validation and cost, the runners-up and why they lost (a compact summary; add
   detail=true only when you need the critical paths).
   If status is "infeasible", report min_gpus; if "targets_missed", call search_strategies with the same
   arguments and objective "goodput" to show the best trade-offs.
3. Check the choice: build_dag with the chosen strategy SPEC and include_dag=true, then validate_dag on its
   dag (valid must be true) and estimate_cost with the same request and strategy.
4. For each rule ID cited in the plan's explanation or in any violation, get_rule(rule_id=...) and quote it.
Answer with the strategy per phase (prefill, decode), TTFT, TPOT, tokens/s per GPU, memory per GPU, whether
the targets are met, the rule IDs that justify the choice, and the strongest alternative with why it lost.
If a tool returns an error, read its field and fix, correct the arguments and call again."""


def _target_args(targets: str) -> str:
    """``, ttft_ms=500, tpot_ms=50`` for targets written as 'ttft_ms=500, tpot<=50ms' (other text is ignored)."""
    found = dict(re.findall(r"\b(ttft|tpot)(?:_ms)?\s*(?:<=|=|<|:)\s*([0-9]+(?:\.[0-9]+)?)", targets.lower()))
    return "".join(f", {key}_ms={found[key]}" for key in ("ttft", "tpot") if key in found)


def build_server() -> MCPServer:
    """The shardplan MCP server: tools, knowledge and schema resources, and the plan_deployment prompt.

    Tool calls run in worker processes (:class:`~shardplan.tools.api.workers.CapabilityWorkers`), each
    bounded by ``$SHARDPLAN_TOOL_TIMEOUT`` seconds (default :data:`~shardplan.limits.TOOL_CALL_SECONDS`).
    """
    workers = CapabilityWorkers(SERVED)
    store = ResultStore()
    server: MCPServer = MCPServer(
        "shardplan", title="shardplan", version=__version__, instructions=_INSTRUCTIONS,
        description="Parallel strategy DAGs for LLM inference: plan, build, validate and price TP/PP/EP/SP/DP.",
        tools=[_tool(name, workers, store) for name in TOOL_NAMES],
        resources=[*_knowledge_resources(), *_schema_resources()],
        log_level="WARNING",
    )
    server.prompt(name="plan_deployment", title="Plan a deployment")(plan_deployment)
    server.resource(RESULT_URI, name="result", title="A full tool result", mime_type="application/json",
                    description="The whole result of a recent tool call (a plan with its critical paths, a cost "
                    "report, a search's every candidate), as linked from its compact answer.",
                    )(_result_reader(store))
    return server


def serve(transport: Literal["stdio", "http"] = "stdio", host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          allow_roots: Sequence[str] = ()) -> None:
    """Run the server until interrupted: over stdin/stdout, or streamable HTTP at ``http://HOST:PORT/mcp``.

    Its tools read files only under ``allow_roots`` and the folders $SHARDPLAN_ALLOWED_ROOTS lists; with neither,
    under no folder (:func:`~shardplan.tools.api.guards.server_roots`). One line on stderr says which.

    Under stdio nothing but the protocol is written to stdout; under HTTP one line on stderr says where
    to connect. HTTP answers with JSON bodies (no SSE stream per request), so a large result is not cut
    by a client's event-size limit, and reads requests up to :data:`MAX_HTTP_BODY` bytes.

    Raises:
        InputError: an unknown transport, a port outside 1..65535, an allowed root that is not a folder, or a
            malformed $SHARDPLAN_TOOL_TIMEOUT.
    """
    if transport not in ("stdio", "http"):
        raise InputError(f"unknown transport '{transport}'", field="transport", fix="choose stdio or http")
    if not 1 <= port <= 65535:
        raise InputError(f"port {port} is out of range", field="port", fix="choose a port in 1..65535")
    tool_call_seconds()  # a malformed $SHARDPLAN_TOOL_TIMEOUT is refused before the server starts
    # Set before the workers start, so every tool call (in a worker process) inherits it.
    roots = os.environ["SHARDPLAN_ALLOWED_ROOTS"] = guards.server_roots(allow_roots)
    sys.stderr.write("shardplan MCP server: tools read files under "
                     + (", ".join(roots.split(os.pathsep)) if roots else "no folder (bundled models, GPUs and traces, "
                        "and inline content only; add folders with --allow-root DIR)") + "\n")
    server = build_server()
    if transport == "stdio":
        server.run("stdio")
        return
    where = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"shardplan MCP server: streamable HTTP at http://{where}:{port}{HTTP_PATH}\n")
    if host not in _LOOPBACK:
        sys.stderr.write(f"warning: listening on {host} without authentication; anyone who reaches this port "
                         "can call the tools\n")
    server.run("streamable-http", host=host, port=port, streamable_http_path=HTTP_PATH, json_response=True,
               max_request_body_size=MAX_HTTP_BODY)
