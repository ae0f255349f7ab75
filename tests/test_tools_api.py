"""The capability layer (``tools.api``) and its LangChain wrappers: checked arguments, compact results,
size limits, allowed paths, and structured errors instead of exceptions inside an agent."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shardplan import limits
from shardplan.errors import InputError, StrategyError
from shardplan.tools.api import capabilities, guards
from shardplan.tools.surfaces.langchain_tools import shardplan_tools

SMALL = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 2, "isl": 512, "osl": 64, "batch": 2}
BUNDLED = Path(capabilities.__file__).parents[1] / "data" / "models" / "meta-llama__Llama-3.1-8B.json"


def test_every_capability_is_a_structured_tool_with_its_argument_model() -> None:
    tools = {t.name: t for t in shardplan_tools()}
    assert list(tools) == list(capabilities.CAPABILITIES)
    assert {"search_knowledge", "get_rule", "list_models", "list_gpus", "describe_model", "search_strategies",
            "propose_strategy", "submit_dag", "validate_dag", "estimate_cost", "build_dag", "plan"} == set(tools)
    for name, tool in tools.items():
        assert tool.args_schema is capabilities.CAPABILITIES[name].args
        assert tool.description and tool.description == capabilities.CAPABILITIES[name].description
    with pytest.raises(InputError, match="unknown tool"):
        shardplan_tools(["rm_rf"])


def test_arguments_are_checked_before_the_body_runs() -> None:
    with pytest.raises(InputError) as caught:
        capabilities.search_knowledge(query="tensor parallel", k=0)
    assert caught.value.field == "k"
    with pytest.raises(InputError) as caught:
        capabilities.propose_strategy(**SMALL, strategy="tp=2", surprise=1)
    assert caught.value.field == "surprise"
    with pytest.raises(InputError) as caught:
        capabilities.get_rule(rule_id="NOPE-99")
    assert caught.value.field == "rule_id"


def test_propose_strategy_is_compact_and_names_rules_and_fixes() -> None:
    good = capabilities.propose_strategy(**SMALL, strategy="tp=2")
    assert good.valid and good.buildable and good.meets_targets and good.figures is not None
    assert good.figures.fits and good.figures.tpot_ms > 0 and good.figures.source == "steady_state"
    bad = capabilities.propose_strategy(**SMALL, strategy="tp=3")
    assert not bad.valid and not bad.buildable and bad.figures is None
    assert {v.rule for v in bad.violations} == {"TP-3", "HIER-2"}
    assert all(v.fix for v in bad.violations)
    missed = capabilities.propose_strategy(**{**SMALL, "tpot_ms": 0.01}, strategy="tp=2")
    assert missed.valid and not missed.meets_targets and "TPOT" in missed.misses[0].message
    assert missed.misses[0].metric == "tpot" and missed.misses[0].value > missed.misses[0].target
    assert len(json.dumps(good.model_dump())) < 2000  # an LLM reads it


def test_search_reports_infeasible_as_a_result() -> None:
    result = capabilities.search_strategies(model="llama-3.1-405b", gpu="L40S", gpus=2)
    assert not result.feasible and result.min_gpus and result.min_gpus > 2 and not result.candidates
    ranked = capabilities.search_strategies(**SMALL, top=3)
    assert ranked.feasible and 1 <= len(ranked.candidates) <= 3


def test_dags_round_trip_through_build_submit_validate_and_cost() -> None:
    built = capabilities.build_dag(**SMALL, strategy="tp=2", include_dag=True)
    assert built.dag is not None and built.nodes == len(built.dag["nodes"])
    assert capabilities.build_dag(**SMALL, strategy="tp=2").dag is None  # no whole DAG unless asked
    submitted = capabilities.submit_dag(dag_json=json.dumps(built.dag))
    assert submitted.valid and submitted.strategy == "tp=2" and submitted.figures is not None
    from_dag = capabilities.estimate_cost(dag_json=built.dag)
    from_strategy = capabilities.estimate_cost(**SMALL, strategy="tp=2")
    assert from_dag.figures == from_strategy.figures == submitted.figures
    broken = dict(built.dag, nodes=built.dag["nodes"][:10])
    verdict = capabilities.validate_dag(dag_json=broken)
    assert not verdict.valid and verdict.violations and verdict.figures is None
    with pytest.raises(InputError, match="give either dag_json"):
        capabilities.estimate_cost(model="llama-3.1-8b")


def test_a_strategy_smaller_than_the_budget_is_priced_on_the_gpus_it_uses() -> None:
    on_budget = capabilities.estimate_cost(**dict(SMALL, gpus=8), strategy="tp=2", detail=True)
    exact = capabilities.estimate_cost(**SMALL, strategy="tp=2", detail=True)
    assert on_budget.figures == exact.figures  # the same two GPUs, the same figures
    assert on_budget.report is not None and any("priced on the 2 of 8 GPUs" in n for n in on_budget.report.notes)
    with pytest.raises(StrategyError, match="HIER-2"):
        capabilities.estimate_cost(**dict(SMALL, gpus=2), strategy="tp=4")


def test_oversized_dags_are_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    huge = {"schema_version": "1", "nodes": [{}] * (limits.MAX_DAG_NODES + 1), "edges": []}
    with pytest.raises(InputError, match="nodes exceed the limit") as caught:
        capabilities.validate_dag(dag_json=huge)
    assert caught.value.field == "dag_json"
    monkeypatch.setattr(guards, "MAX_DAG_CHARS", 1000)
    with pytest.raises(InputError, match="characters exceed the limit"):
        capabilities.submit_dag(dag_json=" " * 1001)


def test_config_paths_are_read_only_under_allowed_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inside = tmp_path / "work"
    inside.mkdir()
    shutil.copy(BUNDLED, inside / "config.json")
    outside = tmp_path / "elsewhere.json"
    shutil.copy(BUNDLED, outside)
    monkeypatch.chdir(inside)
    assert capabilities.describe_model(model=str(inside / "config.json"))["layers"] == 32
    with pytest.raises(InputError, match="outside the allowed folders"):
        capabilities.describe_model(model=str(outside))
    with pytest.raises(InputError, match="outside the allowed folders"):
        capabilities.propose_strategy(**{**SMALL, "model": "../elsewhere.json"}, strategy="tp=2")
    monkeypatch.setenv("SHARDPLAN_ALLOWED_ROOTS", str(tmp_path))
    assert capabilities.describe_model(model=str(outside))["layers"] == 32


def test_langchain_tools_return_errors_instead_of_raising() -> None:
    tools = {t.name: t for t in shardplan_tools()}
    error = json.loads(tools["propose_strategy"].invoke({**SMALL, "strategy": "tp=2,zz=4"}))
    assert error["error"] == "InputError" and error["field"] == "strategy" and error["fix"]
    call = {"type": "tool_call", "id": "c0", "name": "propose_strategy", "args": {**SMALL, "strategy": "tp=2,zz=4"}}
    reply = tools["propose_strategy"].invoke(call)
    assert reply.status == "error" and json.loads(reply.content)["field"] == "strategy"
    bad_args = tools["search_knowledge"].invoke({"query": "", "k": 99})
    assert json.loads(bad_args)["field"] == "query"
    call = {"type": "tool_call", "id": "c1", "name": "get_rule", "args": {"rule_id": "DEC-1"}}
    message = tools["get_rule"].invoke(call)
    assert json.loads(message.content)["severity"] == "mandatory"
    listed = tools["list_gpus"].invoke({})
    assert {g["name"] for g in listed["results"]} >= {"H100", "H200"}
    plan = tools["plan"].invoke(SMALL)
    assert plan["status"] == "ok" and plan["plan"] is None and plan["validation"]["valid"]


def test_a_cluster_file_without_a_gpu_argument_plans_on_the_clusters_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("SHARDPLAN_ALLOWED_ROOTS", str(root))
    from shardplan.tools.api.arguments import RequestArgs
    from shardplan.tools.planning.planner import resolve_request

    cluster = str(root / "tools" / "data" / "clusters" / "h200-2x8-ib.yaml")
    request = RequestArgs(model="llama-3.1-8b", gpus=16, cluster=cluster).to_request()
    assert request.gpu == "H200"  # the cluster's GPU, not the argument's H100 default
    with pytest.raises(InputError, match="contradicts the cluster file"):
        resolve_request(RequestArgs(model="llama-3.1-8b", gpu="H100", gpus=16, cluster=cluster).to_request())
