"""Reviewing a strategy the user chose: its plan, and the searched strategies that beat it."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_here

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import StrategyError
from shardplan.tools.planning.deployment import evaluate_deployment
from shardplan.tools.planning.planner import resolve_request, review
from shardplan.tools.search.ranking import rank_key

REQUEST = PlanRequest(model="meta-llama/Llama-3.1-70B", gpu="H100", gpus=16,
                      workload=Workload(isl=1024, osl=128, batch=8))


def test_a_cross_node_tp_layout_is_priced_and_beaten_by_the_searched_ones() -> None:
    plan = review(REQUEST, parse_strategy("tp=16"))
    assert plan.strategy is not None and plan.strategy.to_spec() == "tp=16"
    assert plan.validation is not None and plan.validation.valid
    assert any(v.rule == "TP-5" and v.severity == "warning" for v in plan.validation.violations)
    assert plan.alternatives, "a layout whose TP crosses nodes should be beaten"
    model, cluster = resolve_request(REQUEST)
    assert plan.figures is not None
    key = rank_key(REQUEST.workload)
    # The reason is what the reviewed strategy has against each, without a preamble repeated on every row.
    assert f"Beaten by {plan.alternatives[0].strategy}" in plan.explanation and "Runner-up" not in plan.explanation
    for alt in plan.alternatives:
        assert alt.why_not and not alt.why_not.startswith("beats")
        priced = evaluate_deployment(model, cluster, parse_strategy(alt.strategy), REQUEST.workload).option
        assert priced is not None and key(priced.figures) <= key(plan.figures)


def test_the_best_strategy_has_nothing_that_beats_it() -> None:
    from shardplan.tools.planning.planner import plan as search_plan

    best = search_plan(REQUEST).strategy
    assert best is not None
    reviewed = review(REQUEST, best)
    assert reviewed.alternatives == []
    assert any("no searched strategy beats it" in m for m in reviewed.messages)


def test_an_unbuildable_strategy_is_refused_with_its_rule() -> None:
    with pytest.raises(StrategyError, match="TP-3"):
        review(REQUEST, parse_strategy("tp=3"))


def test_cli_plan_with_strategy_writes_a_plan_and_refuses_bad_ones(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "plan.json"
    result = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpus", "2", "--isl", "512", "--osl", "32", "-s", "pp=2",
                      "-o", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    assert plan["strategy"]["decode"]["pp"] == 2 and plan["validation"]["valid"]
    bad = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpus", "2", "-s", "tp=3")
    assert bad.returncode == 2 and "TP-3" in bad.stderr and "Traceback" not in bad.stderr
