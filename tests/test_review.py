"""Reviewing a strategy the user chose: its plan, and the searched strategies that beat it."""

from __future__ import annotations

import json
from pathlib import Path

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


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # a layout whose weights cannot fit: the model on 2 of its GPUs
        (["-m", "deepseek-ai/DeepSeek-V3", "--gpu", "H100", "--gpus", "8", "-s", "tp=2", "--batch", "4"],
         "tp=2 does not fit: "),
        # fewer sequences than the layout's attention data-parallel groups
        (["-m", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--gpus", "8", "-s", "adp=8,ep=8", "--batch", "1"],
         "adp=8,ep=8 is not priced at a batch of 1: it needs at least 8 sequences"),
        # the same for a split deployment's decode worker (it was priced at 8 and reported at 4)
        (["-m", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--gpus", "16", "-s",
          "prefill:tp=8;decode:adp=8,ep=8;disagg", "--batch", "4"],
         "prefill:tp=8;decode:adp=8,ep=8;disagg is not priced at a batch of 4: it needs at least 8 sequences"),
    ],
)
def test_a_given_strategy_without_figures_is_infeasible_with_its_reason_in_text_and_json(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    text = run_here(capsys, "plan", *args)
    assert text.returncode == 0 and "Traceback" not in text.stdout + text.stderr
    assert f"infeasible: {said}" in " ".join(text.stdout.split())
    data = json.loads(run_here(capsys, "plan", *args, "--json").stdout)
    assert data["status"] == "infeasible" and data["strategy"] is not None and data["figures"] is None
    # the reason, not figures of a batch nobody asked for
    assert data["explanation"].startswith(said) and "Predicted" not in data["explanation"]


def test_the_reason_names_the_sequences_each_layout_needs() -> None:
    from shardplan.contracts.arithmetic.feasibility import sequences_needed
    from shardplan.tools.planning.unpriced import unpriced_reason

    assert sequences_needed(parse_strategy("dp=2,adp=4,ep=8,mb=2")) == 16
    assert sequences_needed(parse_strategy("prefill:tp=8;decode:adp=8,ep=8,dp=2")) == 16
    reason = unpriced_reason(parse_strategy("dp=4,tp=2"), Workload(isl=8, osl=8, batch=3), [])
    assert "a batch of 3" in reason and "at least 4 sequences" in reason
    assert "Give a batch of 4 or more (--batch)" in reason
    # enough sequences and no pool over its memory: the request's batch or lengths are what does not fit
    assert "has no concurrency that fits" in unpriced_reason(parse_strategy("tp=2"), Workload(isl=8, osl=8), [])


def test_the_report_of_a_given_strategy_without_figures_shows_its_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plan_file, page = tmp_path / "p.json", tmp_path / "p.html"
    args = ["-m", "deepseek-ai/DeepSeek-V3", "--gpu", "H100", "--gpus", "8", "-s", "tp=2", "--batch", "4"]
    assert run_here(capsys, "plan", *args, "-o", str(plan_file)).returncode == 0
    done = run_here(capsys, "report", str(plan_file), "-o", str(page))
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr
    html = page.read_text()
    assert "tp=2 does not fit: " in html and "nothing to plot" in html and "Not priced for this request" in html


def test_the_tools_check_of_a_batch_below_the_layout_groups_has_no_figures_and_says_why() -> None:
    from shardplan.tools.api.shared import evaluate_strategy

    def request(batch: int) -> PlanRequest:
        return PlanRequest(model="deepseek-ai/DeepSeek-V3", gpu="H200", gpus=8,
                           workload=Workload(isl=1024, osl=128, batch=batch))

    short = evaluate_strategy(request(1), "adp=8,ep=8")
    assert short.buildable and not short.valid and short.figures is None and short.concurrency is None
    assert [v.rule for v in short.violations] == ["MB-3"]
    assert "at least 8 sequences" in short.violations[0].message and "batch of 8" in short.violations[0].fix
    full = evaluate_strategy(request(8), "adp=8,ep=8")
    assert full.valid and full.figures is not None and full.concurrency == 8
