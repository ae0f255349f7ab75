"""The MCP ``sweep`` tool and the fleet questions through the SDK's in-memory client: a tiny grid planned in
one call, answered with its rows and the best per question; a bad grid is a one-line error naming the grid."""

from __future__ import annotations

from typing import Any

import pytest
from test_mcp import error, ok, talk

from shardplan.limits import MAX_TOOL_SWEEP_CELLS
from shardplan.tools.fleet.tool import sweep
from shardplan.tools.surfaces.mcp_server import build_server

TINY = {"name": "tiny", "models": ["llama-3.1-8b"], "gpus": ["H100", "H200"], "gpu_count": 1,
        "lengths": [{"isl": 512, "osl": 64}], "targets": [{"tpot_ms": 30}], "prices": {"H100": 1.0, "H200": 9.0}}


@pytest.fixture(scope="module")
def server() -> Any:
    return build_server()


def test_a_two_cell_grid_answers_its_rows_and_the_cheapest_per_question(server: Any) -> None:
    answer = talk(server, lambda c: c.call_tool("sweep", {"grid": TINY}))
    data = ok(answer)
    assert data["grid"] == "tiny" and data["cells"] == 2 and sum(data["statuses"].values()) == 2
    rows = {row["gpu"]: row for row in data["rows"]}
    assert sorted(rows) == ["H100", "H200"]
    for row in rows.values():
        assert row["status"] == "ok" and row["tpot_ms"] <= 30 and row["pricing"] in ("measured", "roofline")
        assert row["engine"] == "vllm" and row["traffic"] == "512/64" and row["layout"]
    [best] = data["best"]
    cheapest = min(rows.values(), key=lambda row: row["usd_per_million_output_tokens"])
    assert best["gpu"] == cheapest["gpu"] and best["usd_per_million_output_tokens"] == cheapest[
        "usd_per_million_output_tokens"]
    assert best["gpu"] in answer.content[0].text  # the text summary names the winner


@pytest.mark.parametrize(("grid", "field", "words"), [
    ({**TINY, "gpus": ["H999"]}, "grid", "H999"),
    ({**TINY, "engines": "ollama"}, "grid.engines", "ollama"),
    ({**TINY, "surprise": 1}, "grid.surprise", "surprise"),
    ("no-such-grid", "grid", "example"),
    ({**TINY, "rates": list(range(1, MAX_TOOL_SWEEP_CELLS + 2))}, "grid", f"{MAX_TOOL_SWEEP_CELLS}"),
])
def test_a_bad_grid_is_a_one_line_error_naming_the_grid(server: Any, grid: Any, field: str, words: str) -> None:
    refused = error(talk(server, lambda c: c.call_tool("sweep", {"grid": grid})))
    assert refused["error"] == "InputError" and refused["field"] == field
    assert words in refused["message"] and "\n" not in refused["message"] and refused["fix"]


def test_sweep_is_listed_with_its_grid_schema(server: Any) -> None:
    listed = talk(server, lambda c: c.list_tools()).tools
    tool = next(t for t in listed if t.name == "sweep")
    assert "grid" in tool.input_schema["properties"] and tool.input_schema.get("required") == ["grid"]
    assert "example" in (tool.description or "") or "example" in str(tool.input_schema)


def test_the_plan_tool_compares_engines_over_mcp(server: Any) -> None:
    args = {"model": "llama-3.1-8b", "gpu": "MI300X", "gpus": 1, "isl": 512, "osl": 64, "engine": "auto"}
    data = ok(talk(server, lambda c: c.call_tool("plan", args)))
    choice = data["engine_choice"]
    assert choice["chosen"] == data["request"]["workload"]["engine"]
    assert {row["pricing"] for row in choice["options"]} == {"roofline"}


def test_the_python_api_runs_the_same_sweep() -> None:
    answer = sweep(grid=TINY)
    assert answer.cells == 2 and answer.best[0].gpu == min(
        answer.rows, key=lambda row: row.usd_per_million_output_tokens).gpu
