"""Compact MCP results: a DeepSeek-V3 plan fits in a few KB by default, the whole plan comes with detail=true
or from the linked resource, and every large result (cost, search, DAG checks) follows the same rule."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp_types import CallToolResult, ResourceLink, TextContent
from test_mcp import SMALL, talk

from shardplan.contracts.figures import make_figures
from shardplan.contracts.plan import Deployment, FrontierPoint, Plan, WorkerPool
from shardplan.contracts.reports import ValidationReport, Violation
from shardplan.tools.api.compact import MAX_ALTERNATIVES, MAX_FRONTIER, _thin_frontier, validation_brief
from shardplan.tools.api.result_store import ResultStore
from shardplan.tools.surfaces.mcp_server import build_server

DEEPSEEK = {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "gpus": 16}
COMPACT_BYTES = 16_000
"""Most bytes a default plan result may take on the wire (issue 17)."""


@pytest.fixture(scope="module")
def server() -> Any:
    return build_server()


def wire_bytes(result: CallToolResult) -> int:
    """The result as the client receives it: text and structured content (and links), as JSON bytes."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def parts(result: CallToolResult) -> tuple[str, dict[str, Any], ResourceLink | None]:
    """The summary text, the structured content and the link to the full result of a successful call."""
    assert not result.is_error, result.content
    text = result.content[0]
    assert isinstance(text, TextContent) and result.structured_content is not None
    links = [b for b in result.content if isinstance(b, ResourceLink)]
    assert len(links) <= 1
    return text.text, result.structured_content, links[0] if links else None


def test_a_deepseek_plan_is_compact_by_default_and_whole_on_request(server: Any) -> None:
    async def scenario(c: Client) -> tuple[CallToolResult, Any, CallToolResult]:
        compact = await c.call_tool("plan", DEEPSEEK)
        _, _, link = parts(compact)
        assert link is not None
        kept = await c.read_resource(link.uri)
        return compact, kept, await c.call_tool("plan", {**DEEPSEEK, "detail": True})

    compact, kept, detailed = talk(server, scenario)
    text, summary, link = parts(compact)
    assert wire_bytes(compact) < COMPACT_BYTES, wire_bytes(compact)
    assert summary["status"] == "ok" and summary["plan"] is None
    assert summary["validation"]["valid"] is True and summary["validation"]["failing_rules"] == []
    assert summary["deployment"]["gpus_used"] <= 16 and summary["figures"]["tpot_ms"] > 0
    assert len(summary["alternatives"]) <= MAX_ALTERNATIVES <= summary["alternatives_total"]
    assert "critical_path" not in json.dumps(summary)

    # The text is a summary a person reads, not the structured content again.
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert len(text) < len(json.dumps(summary)) / 2
    assert summary["strategy"] in text and "TTFT" in text and "failing rules: none" in text
    assert link is not None and str(link.uri) in text

    # detail=true: the whole plan, critical paths included, consistent with the summary.
    _, with_detail, _ = parts(detailed)
    whole = Plan.model_validate(with_detail["plan"])
    assert whole.dag_cost is not None and whole.validation is not None and whole.strategy is not None
    assert whole.dag_cost.prefill.critical_path and whole.dag_cost.decode.critical_path
    assert whole.strategy.to_spec() == summary["strategy"] == with_detail["strategy"]
    assert whole.figures is not None and round(whole.figures.tpot_ms, 3) == summary["figures"]["tpot_ms"]
    assert len(whole.validation.rules_checked) == summary["validation"]["rules_checked_total"]
    assert len(whole.alternatives) == summary["alternatives_total"]
    assert wire_bytes(detailed) > 10 * wire_bytes(compact)

    # The linked resource holds the whole plan of the compact call.
    [body] = kept.contents
    assert body.mime_type == "application/json" and link.size == len(body.text.encode())
    stored = Plan.model_validate_json(body.text)
    assert stored.dag_cost is not None and stored.dag_cost.decode.critical_path
    assert stored.model_dump(exclude={"messages"}) == whole.model_dump(exclude={"messages"})


def test_cost_search_and_dag_checks_are_compact_unless_asked(server: Any) -> None:
    async def scenario(c: Client) -> list[CallToolResult]:
        built = await c.call_tool("build_dag", {**SMALL, "strategy": "tp=2", "include_dag": True})
        dag = parts(built)[1]["dag"]
        calls: list[tuple[str, dict[str, Any]]] = [
            ("estimate_cost", {**SMALL, "strategy": "tp=2"}),
            ("search_strategies", {**SMALL, "top": 1}),
            ("validate_dag", {"dag_json": dag}),
        ]
        results = []
        for name, args in calls:
            results += [await c.call_tool(name, args), await c.call_tool(name, {**args, "detail": True})]
        return results

    cost, cost_full, search, search_full, check, check_full = (parts(r) for r in talk(server, scenario))
    assert cost[1]["report"] is None and cost[1]["pricing"]["backend"] in {"measured", "roofline"}
    assert cost_full[1]["report"]["decode"]["critical_path"] and "TPOT" in cost[0]
    assert search[1]["detail"] is None and len(search[1]["candidates"]) == 1
    everything = search_full[1]["detail"]
    assert everything["candidates"][0] == search[1]["candidates"][0] and everything["frontier"]
    assert check[1]["report"] is None and check[0].startswith("tp=2 valid")
    assert check_full[1]["report"]["rules_checked"] and check_full[1]["report"]["valid"] is True
    for text, _, link in (cost, search, check):
        assert link is not None and str(link.uri) in text


def test_an_infeasible_plan_and_a_result_no_longer_kept(server: Any) -> None:
    async def scenario(c: Client) -> tuple[CallToolResult, str]:
        infeasible = await c.call_tool("plan", {"model": "llama-3.1-405b", "gpu": "H100", "gpus": 4})
        try:
            await c.read_resource("shardplan://results/0123456789abcdef")
        except MCPError as exc:
            return infeasible, str(exc)
        return infeasible, "read"

    infeasible, refused = talk(server, scenario)
    text, summary, link = parts(infeasible)
    assert summary["status"] == "infeasible" and summary["figures"] is None and summary["min_gpus"] >= 8
    assert text.startswith("plan infeasible") and str(summary["min_gpus"]) in text
    assert link is not None  # the whole (infeasible) plan is kept too
    assert "0123456789abcdef" in refused and "detail=true" in refused


def test_a_detail_that_is_not_a_boolean_is_refused_by_name(server: Any) -> None:
    result = talk(server, lambda c: c.call_tool("plan", {**SMALL, "detail": [1]}))
    assert result.is_error and result.structured_content is None
    [block] = result.content
    assert isinstance(block, TextContent) and json.loads(block.text)["field"] == "detail"


def test_the_store_forgets_the_least_recently_read_first_and_keeps_its_bound() -> None:
    store = ResultStore(max_results=3, max_chars=30)
    first, second = store.put("a" * 10), store.put("b" * 10)
    assert first and second and store.put("a" * 10) == first  # the same content is kept once
    assert store.get(first) == "a" * 10
    third = store.put("c" * 10)
    fourth = store.put("d" * 10)  # 40 characters: the least recently used (second) goes
    assert store.get(second) is None and {store.get(i) for i in (first, third, fourth)} == {"a" * 10, "c" * 10,
                                                                                            "d" * 10}
    assert store.put("e" * 31) is None and len(store) == 3


def _point(i: int, chosen: bool) -> FrontierPoint:
    figures = make_figures("steady_state", ttft_ms=1, tpot_ms=1000 / (i + 1), osl=2, tokens_per_s=20 - i,
                           requests_per_s=1, memory_per_gpu_gb=1, gpu_memory_gb=80, fits=True, gpus_used=1,
                           gpu_budget=1)
    return FrontierPoint(strategy=f"dp={i + 1}", concurrency=i + 1, figures=figures, meets_targets=True, chosen=chosen)


@pytest.mark.parametrize("chosen", [0, 7, 14])
def test_a_long_frontier_is_thinned_around_its_ends_and_the_chosen_point(chosen: int) -> None:
    pool = WorkerPool(role="replica", workers=1, layout="tp=1", gpus_per_worker=1, concurrency_per_worker=1,
                      max_concurrency_per_worker=1, memory_per_gpu_gb=1, weights_gb=1, kv_cache_gb=0, capacity_gb=80)
    frontier = [_point(i, i == chosen) for i in range(15)]
    deployment = Deployment(concurrency=1, replicas=1, gpus_used=1, idle_gpus=0, batching="continuous", gpu_budget=1,
                            pools=[pool], frontier=frontier)
    kept = _thin_frontier(deployment).frontier
    assert len(kept) <= MAX_FRONTIER and [p for p in kept if p.chosen] == [frontier[chosen]]
    assert kept[0] == frontier[0] and kept[-1] == frontier[-1]
    assert kept == sorted(kept, key=lambda p: p.figures.tokens_per_s_per_user)
    short = deployment.model_copy(update={"frontier": frontier[:MAX_FRONTIER]})
    assert _thin_frontier(short) == short


def test_the_validation_brief_names_failing_rules_once_errors_first() -> None:
    def broken(rule: str, severity: str) -> Violation:
        return Violation(rule=rule, severity=severity, message=f"{rule} broken")  # type: ignore[arg-type]

    report = ValidationReport(valid=False, rules_checked=["TP-1", "TP-2", "DEC-1"], nodes=5, edges=4,
                              violations=[broken("DEC-1", "warning"), broken("TP-2", "error"),
                                          broken("TP-1", "error"), broken("TP-2", "error")])
    brief = validation_brief(report)
    assert brief.failing_rules == ["TP-2", "TP-1"] and brief.violations_total == 4
    assert [v.severity for v in brief.violations] == ["error", "error", "error", "warning"]
    assert brief.rules_checked_total == 3 and not brief.valid


def test_the_examples_in_the_docstrings_run() -> None:
    import doctest

    from shardplan.tools.api import result_store, texts

    for module in (result_store, texts):
        assert doctest.testmod(module).failed == 0, module.__name__
