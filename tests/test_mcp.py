"""The MCP server: every tool, resource and the prompt through the SDK's in-memory client, then a real
``shardplan mcp`` subprocess over stdio and over streamable HTTP. Every wait is bounded."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from cli_helpers import ROOT, SHARDPLAN, run_cli
from mcp import Client, MCPError, StdioServerParameters
from mcp_types import CallToolResult, TextContent

from shardplan.contracts.schemas import SCHEMA_NAMES, json_schema
from shardplan.knowledge.rules import doc_files
from shardplan.tools.api import capabilities, guards
from shardplan.tools.surfaces.mcp_server import HTTP_PATH, SERVED, TOOL_NAMES, build_server
from shardplan.validators import schema_check

SMALL = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 2, "isl": 512, "osl": 64}
TIMEOUT = 60.0
"""Seconds any one scenario may take before the test fails instead of hanging: a guard, not a speed check (a
2-core machine loaded by other runs took test_renamed_ids' eight pricing calls past 30 s)."""
BUNDLED = Path(capabilities.__file__).parents[1] / "data" / "models" / "meta-llama__Llama-3.1-8B.json"

T = TypeVar("T")


def talk(target: Any, scenario: Callable[[Client], Awaitable[T]], **options: Any) -> T:
    """Run ``scenario`` against ``target`` (a server, stdio parameters or a URL) within TIMEOUT seconds."""

    async def main() -> T:
        with anyio.fail_after(TIMEOUT):
            async with Client(target, read_timeout_seconds=TIMEOUT, **options) as client:
                return await scenario(client)

    return anyio.run(main)


@pytest.fixture(scope="module")
def server() -> Any:
    return build_server()


def text_of(result: CallToolResult) -> Any:
    """The JSON of a result's one text block."""
    [block] = result.content
    assert isinstance(block, TextContent)
    return json.loads(block.text)


def ok(result: CallToolResult) -> Any:
    """The structured content of a successful call, whose first content block is a text summary."""
    assert not result.is_error, result.content
    structured = result.structured_content
    assert structured is not None
    summary = result.content[0]
    assert isinstance(summary, TextContent) and summary.text.strip()
    return structured


def error(result: CallToolResult) -> dict[str, Any]:
    """The structured error of a failed call."""
    assert result.is_error and result.structured_content is None
    reported: dict[str, Any] = text_of(result)
    return reported


def bypass(dag: dict[str, Any], node_id: str) -> dict[str, Any]:
    """``dag`` without ``node_id``: its predecessors feed its successors directly."""
    preds = [e["src"] for e in dag["edges"] if e["dst"] == node_id]
    succs = [(e["dst"], e["kind"]) for e in dag["edges"] if e["src"] == node_id]
    edges = [e for e in dag["edges"] if node_id not in (e["src"], e["dst"])]
    edges += [{"src": p, "dst": s, "kind": k} for p in preds for s, k in succs]
    return {**dag, "nodes": [n for n in dag["nodes"] if n["id"] != node_id], "edges": edges}


# ------------------------------------------------------------------------------------------ in memory


def test_lists_every_tool_with_its_capability_schema(server: Any) -> None:
    listed = talk(server, lambda c: c.list_tools()).tools
    assert [t.name for t in listed] == list(TOOL_NAMES)
    for tool in listed:
        cap = SERVED[tool.name]
        assert tool.description == cap.description
        assert tool.input_schema == cap.args.model_json_schema()
        assert tool.input_schema["type"] == "object" and tool.input_schema["additionalProperties"] is False
        assert tool.output_schema and tool.output_schema["type"] == "object"
        assert tool.annotations and tool.annotations.read_only_hint
    plan = next(t for t in listed if t.name == "plan")
    assert set(plan.input_schema["required"]) == {"model", "gpus"}
    assert plan.output_schema and "validation" in plan.output_schema["properties"]


def test_catalog_tools(server: Any) -> None:
    async def scenario(c: Client) -> tuple[Any, Any, Any]:
        models = await c.call_tool("list_models", {})
        gpus = await c.call_tool("list_gpus", {})
        deepseek = await c.call_tool("describe_model", {"model": "deepseek-v3"})
        return ok(models)["result"], ok(gpus)["result"], ok(deepseek)

    models, gpus, deepseek = talk(server, scenario)
    assert {"meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V3"} <= {m["name"] for m in models}
    assert {"H100", "H200", "B200", "MI300X"} <= {g["name"] for g in gpus}
    assert deepseek["name"] == "deepseek-ai/DeepSeek-V3" and deepseek["attention"] == "mla"
    assert abs(deepseek["params_total"] / 671e9 - 1) < 0.02
    assert abs(deepseek["params_active"] / 37e9 - 1) < 0.02


def test_plan_gives_the_same_valid_plan_as_the_capability(server: Any) -> None:
    result = talk(server, lambda c: c.call_tool("plan", SMALL))
    plan = ok(result)
    assert plan["status"] == "ok" and plan["validation"]["valid"] is True and plan["plan"] is None
    figures = plan["figures"]
    assert figures["ttft_ms"] > 0 and figures["tpot_ms"] > 0 and figures["fits"] and figures["source"] == "steady_state"
    assert plan["dag_cost"]["figures"]["source"] == "static_batch"
    direct = capabilities.plan(**SMALL)
    assert direct.strategy is not None and plan["strategy"] == direct.strategy
    assert plan["request"]["model"] == "llama-3.1-8b"


def test_plan_takes_constraints_and_states_its_assumptions(server: Any) -> None:
    bound = ok(talk(server, lambda c: c.call_tool("plan", {**SMALL, "constraints": ["pp=2"]})))
    assert "pp=2" in bound["strategy"] and bound["request"]["constraints"]["degrees"][0]["value"] == 2
    assert any(line.startswith("sequences in flight: not given") for line in bound["assumptions"])
    impossible = ok(talk(server, lambda c: c.call_tool("plan", {**SMALL, "constraints": ["pp=3"]})))
    assert impossible["status"] == "infeasible" and "pp=3" in impossible["explanation"]
    refused = error(talk(server, lambda c: c.call_tool("plan", {**SMALL, "constraints": ["pp?3"]})))
    assert refused["field"] == "constraint"


def test_validates_a_built_dag_and_names_the_rule_a_bypassed_all_reduce_breaks(server: Any) -> None:
    async def scenario(c: Client) -> tuple[Any, Any, Any, Any]:
        built = ok(await c.call_tool("build_dag", {**SMALL, "strategy": "tp=2", "include_dag": True}))
        dag = built["dag"]
        good = ok(await c.call_tool("validate_dag", {"dag_json": json.dumps(dag)}))
        reduce = next(n["id"] for n in dag["nodes"] if n["kind"] == "all_reduce" and n["phase"] == "decode"
                      and n["layer"] is not None)
        broken = ok(await c.call_tool("validate_dag", {"dag_json": bypass(dag, reduce)}))
        priced = ok(await c.call_tool("estimate_cost", {"dag_json": dag}))
        return built, good, broken, (reduce, priced)

    built, good, broken, (reduce, priced) = talk(server, scenario)
    assert built["strategy"] == "tp=2" and built["nodes"] == len(built["dag"]["nodes"]) > 100
    assert built["node_kinds"]["all_reduce"] > 0
    assert good["valid"] is True and good["violations"] == [] and good["strategy"] == "tp=2"
    assert broken["valid"] is False and broken["nodes"] == good["nodes"] - 1
    tp2 = next(v for v in broken["violations"] if v["rule"] == "TP-2")
    assert tp2["severity"] == "error" and tp2["fix"]
    assert any(node.startswith(reduce.removesuffix(".all_reduce")) for node in tp2["nodes"])
    assert priced["figures"]["ttft_ms"] > 0 and priced["decode"]["collectives"] > 0


def test_search_cost_and_knowledge_tools(server: Any) -> None:
    async def scenario(c: Client) -> list[Any]:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("search_strategies", {**SMALL, "top": 3}),
            ("estimate_cost", {**SMALL, "strategy": "tp=2"}),
            ("search_knowledge", {"query": "sequence parallelism in decode", "k": 3}),
            ("get_rule", {"rule_id": "DEC-1"}),
        ]
        return [ok(await c.call_tool(name, args)) for name, args in calls]

    search, cost, knowledge, rule = talk(server, scenario)
    assert search["feasible"] and 1 <= len(search["candidates"]) <= 3
    assert search["candidates"][0]["strategy"] == capabilities.search_strategies(**SMALL, top=1).candidates[0].strategy
    assert cost["figures"]["tpot_ms"] > 0 and cost["memory"][0]["fits"]
    assert any(rid.startswith("SP-") for hit in knowledge["result"] for rid in hit["rule_ids"])
    assert rule["id"] == "DEC-1" and rule["doc"] == "10-decode-constraints.md"


def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(server: Any) -> None:
    bad_calls: list[tuple[str, dict[str, Any], str | None]] = [
        ("plan", {"model": "no-such-model", "gpus": 2}, "model"),
        ("plan", {**SMALL, "gpus": -1}, "gpus"),
        ("plan", {**SMALL, "surprise": 1}, "surprise"),
        ("plan", {"gpus": 2}, "model"),
        ("build_dag", {**SMALL, "strategy": "tp=3"}, "strategy"),
        ("get_rule", {"rule_id": "NOPE-99"}, "rule_id"),
        ("describe_model", {"model": "/etc/model/config.json"}, "model"),
        ("validate_dag", {"dag_json": "{not json"}, "dag_json"),
    ]

    async def scenario(c: Client) -> tuple[list[dict[str, Any]], Any]:
        errors = [error(await c.call_tool(name, args)) for name, args, _ in bad_calls]
        return errors, ok(await c.call_tool("plan", SMALL))

    errors, plan = talk(server, scenario)
    for (name, _, field), err in zip(bad_calls, errors, strict=True):
        assert err["error"] in {"InputError", "StrategyError"}, (name, err)
        assert err["field"] == field and err["message"], (name, err)
    assert "outside the allowed folders" in errors[6]["message"] and errors[6]["fix"]
    assert "not valid JSON" in errors[7]["message"]
    assert plan["validation"]["valid"] is True


def test_config_paths_are_read_under_allowed_roots_only(server: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.json"
    shutil.copy(BUNDLED, config)
    refused = error(talk(server, lambda c: c.call_tool("describe_model", {"model": str(config)})))
    assert refused["field"] == "model" and "outside the allowed folders" in refused["message"]
    monkeypatch.setenv("SHARDPLAN_ALLOWED_ROOTS", str(tmp_path))
    accepted = ok(talk(server, lambda c: c.call_tool("describe_model", {"model": str(config)})))
    assert accepted["layers"] == 32


def test_oversized_input_is_refused_before_parsing(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parsing(text: Any, **_: Any) -> Any:
        raise AssertionError("oversized DAG text was parsed")

    monkeypatch.setattr(guards, "parse_json_text", no_parsing)
    monkeypatch.setattr(schema_check, "parse_json_text", no_parsing)
    claims_a_million_nodes = '{"nodes": [' + ",".join(['{"id":"n"}'] * 1_000_001) + '], "edges": []}'
    too_long = '"' + "x" * (guards.MAX_DAG_CHARS + 1) + '"'

    async def scenario(c: Client) -> tuple[list[dict[str, Any]], Any]:
        errors = [error(await c.call_tool("validate_dag", {"dag_json": claims_a_million_nodes})),
                  error(await c.call_tool("validate_dag", {"dag_json": {"nodes": [{}] * 1_000_001}})),
                  error(await c.call_tool("estimate_cost", {"dag_json": too_long}))]
        return errors, ok(await c.call_tool("list_gpus", {}))

    errors, gpus = talk(server, scenario)
    for err in errors[:2]:
        assert err["field"] == "dag_json" and "1,000,001 nodes exceed the limit of 200,000" in err["message"]
    assert f"characters exceed the limit of {guards.MAX_DAG_CHARS:,}" in errors[2]["message"]
    assert gpus["result"]


def test_knowledge_and_schema_resources(server: Any) -> None:
    async def scenario(c: Client) -> tuple[Any, Any, Any]:
        listed = await c.list_resources()
        doc = await c.read_resource("shardplan://knowledge/02-tensor-parallelism.md")
        schema = await c.read_resource("shardplan://schemas/dag")
        return listed, doc, schema

    listed, doc, schema = talk(server, scenario)
    uris = {str(r.uri) for r in listed.resources}
    assert uris == ({f"shardplan://knowledge/{p.name}" for p in doc_files()}
                    | {f"shardplan://schemas/{name}" for name in SCHEMA_NAMES})
    assert all(r.title and r.description for r in listed.resources)
    [text] = doc.contents
    assert text.mime_type == "text/markdown" and re.search(r"\bTP-1\b", text.text)
    assert text.text == (ROOT / "knowledge" / "docs" / "02-tensor-parallelism.md").read_text(encoding="utf-8")
    [body] = schema.contents
    assert json.loads(body.text) == json_schema("dag")
    assert "Unknown resource" in talk(server, _read_unknown_resource)


async def _read_unknown_resource(c: Client) -> str:
    try:
        await c.read_resource("shardplan://knowledge/../../etc/passwd")
    except MCPError as exc:
        return str(exc)
    return "read"


def test_plan_deployment_prompt_names_only_real_tools(server: Any) -> None:
    async def scenario(c: Client) -> tuple[Any, Any]:
        listed = await c.list_prompts()
        got = await c.get_prompt("plan_deployment", {"model": "deepseek-v3", "gpus": "16", "gpu": "H200",
                                                     "targets": "ttft_ms=500, tpot<=50ms"})
        return listed, got

    listed, got = talk(server, scenario)
    [prompt] = listed.prompts
    assert prompt.name == "plan_deployment"
    assert [(a.name, a.required) for a in prompt.arguments or []] == [
        ("model", True), ("gpus", True), ("gpu", False), ("isl", False), ("osl", False), ("targets", False)]
    text = got.messages[0].content.text
    assert 'plan(model="deepseek-v3", gpu="H200", gpus=16, isl=2048, osl=256, ttft_ms=500, tpot_ms=50)' in text
    called = set(re.findall(r"\b([a-z_]+)\(", text))
    assert called and called <= set(TOOL_NAMES), called - set(TOOL_NAMES)


def test_json_rpc_framing_in_memory(server: Any) -> None:
    """The legacy handshake over the SDK's in-memory streams: every message goes through JSON-RPC."""

    async def scenario(c: Client) -> tuple[Any, Any]:
        return await c.list_tools(), await c.call_tool("get_rule", {"rule_id": "TP-1"})

    listed, rule = talk(server, scenario, mode="legacy")
    assert len(listed.tools) == len(TOOL_NAMES) and ok(rule)["id"] == "TP-1"


# ----------------------------------------------------------------------------------- real subprocesses


async def _plan_bad_plan(c: Client) -> tuple[list[str], Any, dict[str, Any], Any]:
    """The subprocess scenario: list, plan, bad arguments, plan again."""
    names = [t.name for t in (await c.list_tools()).tools]
    first = ok(await c.call_tool("plan", SMALL))
    bad = error(await c.call_tool("plan", {**SMALL, "gpus": 0, "surprise": True}))
    again = ok(await c.call_tool("plan", {**SMALL, "osl": 32}))
    return names, first, bad, again


def _check_subprocess_scenario(outcome: tuple[list[str], Any, dict[str, Any], Any]) -> None:
    names, first, bad, again = outcome
    assert names == list(TOOL_NAMES)
    assert first["validation"]["valid"] is True and first["status"] == "ok"
    assert bad["error"] == "InputError" and bad["field"] == "gpus"
    assert "gpus:" in bad["message"] and "surprise: Extra inputs are not permitted" in bad["message"]
    assert again["validation"]["valid"] is True and again["request"]["workload"]["osl"] == 32


def test_stdio_subprocess() -> None:
    params = StdioServerParameters(command=SHARDPLAN, args=["mcp"], cwd=str(ROOT))
    _check_subprocess_scenario(talk(params, _plan_bad_plan))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(process: subprocess.Popen[str], port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"shardplan mcp exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"shardplan mcp did not listen on port {port} within {timeout} s")


def test_streamable_http_subprocess() -> None:
    port = _free_port()
    process = subprocess.Popen([SHARDPLAN, "mcp", "--transport", "http", "--port", str(port)], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_port(process, port)
        _check_subprocess_scenario(talk(f"http://127.0.0.1:{port}{HTTP_PATH}", _plan_bad_plan))
        assert process.poll() is None
    finally:
        process.terminate()
        try:
            _, stderr = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate(timeout=10)
    assert f"http://127.0.0.1:{port}{HTTP_PATH}" in stderr
    assert "Traceback" not in stderr


def test_cli_refuses_an_unknown_transport() -> None:
    for option in (["--transport", "carrier-pigeon"], ["--transport", "http", "--port", "70000"]):
        result = run_cli("mcp", *option, timeout=30)
        assert result.returncode == 2 and option[-2] in result.stderr and not result.stdout
