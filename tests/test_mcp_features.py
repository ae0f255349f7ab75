"""Speculative decoding and prefix caching through the MCP server (the SDK's in-memory client): the plan tool
takes them, echoes them in its request, refuses a speculation without its measured acceptance, and confines a
draft model's path as it confines the model's."""

from __future__ import annotations

from typing import Any

import pytest
from test_mcp import SMALL, error, ok, talk

from shardplan.tools.surfaces.mcp_server import build_server


@pytest.fixture(scope="module")
def server() -> Any:
    return build_server()


def test_plan_records_speculation_and_prefix_hit_in_its_request(server: Any) -> None:
    args = {**SMALL, "model": "llama-3.1-70b", "gpus": 4, "spec": "draft:llama-3.1-8b:3", "spec_accept": 1.5,
            "prefix_hit": 0.5}
    plan = ok(talk(server, lambda c: c.call_tool("plan", args)))
    workload = plan["request"]["workload"]
    assert workload["speculation"] == {"method": "draft", "draft_tokens": 3, "accepted": 1.5,
                                       "draft_model": "llama-3.1-8b", "head": None}
    assert workload["prefix_hit"] == 0.5
    assert "speculation" in plan["dag_cost"] and "prefix_cache" in plan["dag_cost"]


def test_a_speculation_without_its_acceptance_is_a_structured_error_naming_spec_accept(server: Any) -> None:
    refused = error(talk(server, lambda c: c.call_tool("plan", {**SMALL, "spec": "mtp:1"})))
    assert refused["field"] == "spec_accept" and "never assumed" in refused["message"]


def test_a_draft_model_no_smaller_than_the_target_is_refused_naming_spec(server: Any) -> None:
    args = {**SMALL, "spec": "draft:llama-3.1-70b:3", "spec_accept": 1.0}
    refused = error(talk(server, lambda c: c.call_tool("plan", args)))
    assert refused["field"] == "spec" and "not smaller than the target" in refused["message"]


def test_a_draft_model_path_outside_the_allowed_folders_is_refused(server: Any, tmp_path: Any) -> None:
    outside = tmp_path / "config.json"
    outside.write_text("{}")
    args = {**SMALL, "spec": f"draft:{outside}:3", "spec_accept": 1.0}
    refused = error(talk(server, lambda c: c.call_tool("plan", args)))
    assert refused["field"] == "spec" and "outside the allowed folders" in refused["message"]


def test_the_tools_say_how_to_ask_for_the_features(server: Any) -> None:
    listed = talk(server, lambda c: c.list_tools()).tools
    plan = next(t for t in listed if t.name == "plan")
    assert plan.description is not None and "spec_accept" in plan.description and "prefix_hit" in plan.description
    properties = plan.input_schema["properties"]
    assert {"spec", "spec_accept", "prefix_hit"} <= set(properties)
