"""Speculative decoding and prefix caching as the terminal, the report and ``shardplan simulate`` show them. The
effects are filled in by hand here (the cost model prices them elsewhere): these tests check what is shown."""

from __future__ import annotations

import pytest

from shardplan.cli.commands.simulate import print_simulation
from shardplan.cli.plan_text import print_plan
from shardplan.contracts.feature_effects import PrefixCacheEffect, SpeculationEffect
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.speculation import parse_speculation
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.planning.feature_words import effect_lines, feature_words
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request
from shardplan.tools.report.html import render_report
from shardplan.tools.simulation.run import simulate

SPEC = SpeculationEffect(tokens_per_step=1.8, verify_tokens=2, step_ms=11.5, draft_ms=1.25, step_without_ms=10.0,
                         tpot_without_ms=10.0, draft_memory_gb=1.5, notes=["the MTP layer priced as one decoder layer"])
PREFIX = PrefixCacheEffect(hit=0.5, source="request", prefill_tokens_computed=1024, prefill_work_saved=0.42,
                           ttft_without_ms=250.0, shared_kv_gb=0.25, max_concurrency=120, max_concurrency_without=96,
                           prefill_gpus_without=3, notes=["one shared prefix, every request routed to its cache"])


def _plan(strategy: str = "tp=2", gpus: int = 2) -> Plan:
    workload = Workload(isl=2048, osl=128, batch=8, speculation=parse_speculation("eagle:2", 0.8), prefix_hit=0.5)
    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=gpus, workload=workload)
    model, cluster = resolve_request(request)
    plan = plan_for_strategy(request, model, cluster, parse_strategy(strategy))
    assert plan.dag_cost is not None
    return plan.model_copy(update={"dag_cost": plan.dag_cost.model_copy(
        update={"speculation": SPEC, "prefix_cache": PREFIX})})


@pytest.fixture(scope="module")
def plan() -> Plan:
    return _plan()


def test_the_request_words_name_both_features(plan: Plan) -> None:
    words = feature_words(plan.request.workload)
    assert words == (", speculative decoding eagle:2, 0.8 accepted per step (1.8 tokens per step), prefix hit 50% of "
                     "prompt tokens")
    assert feature_words(Workload(isl=1, osl=1)) == ""


def test_effect_lines_set_each_figure_beside_its_value_without(plan: Plan) -> None:
    assert plan.figures is not None
    spec_line, spec_note, prefix_line, prefix_note = effect_lines(plan)
    assert spec_line.startswith("speculative decoding eagle:2, 0.8 of 2 drafts accepted: 1.8 tokens per step")
    assert "step 11.50 ms (drafting 1.25) vs 10.00 ms plain" in spec_line
    assert f"TPOT {plan.figures.tpot_ms:.2f} ms, 10.00 ms without" in spec_line and "1.50 GB per GPU" in spec_line
    assert spec_note == SPEC.notes[0] and prefix_note == PREFIX.notes[0]
    assert "50% of prompt tokens hit (the request's)" in prefix_line
    assert "computes 1,024 of 2,048 prompt tokens, 42% of its time saved" in prefix_line
    assert f"TTFT {plan.figures.ttft_ms:,.1f} ms, 250.0 ms without" in prefix_line
    assert "120 sequences per worker fit, 96 without" in prefix_line and "3 prefill GPUs without" in prefix_line
    bare = plan.model_copy(update={"dag_cost": plan.dag_cost.model_copy(  # type: ignore[union-attr]
        update={"speculation": None, "prefix_cache": None})})
    assert effect_lines(bare) == []


def test_the_terminal_prints_the_features(plan: Plan, capsys: pytest.CaptureFixture[str]) -> None:
    print_plan(plan)
    out = capsys.readouterr().out
    assert "speculative decoding eagle:2, 0.8 accepted per step" in out.splitlines()[0]
    assert "vs 10.00 ms plain" in out and "250.0 ms without" in out


def test_the_report_has_a_section_with_and_without(plan: Plan) -> None:
    page = render_report(plan)
    assert 'id="features"' in page and "Speculative decoding and prefix caching" in page
    assert "<th>TPOT</th>" in page and "<td>10.00 ms</td>" in page
    assert "eagle:2: 2 draft tokens per step, 0.8 accepted on average (given)" in page
    assert "50% of prompt tokens found in the cache (from the request)" in page
    assert "prefix hit 50% of prompt tokens" in page  # the header's request line
    assert "EAGLE head" in page  # the launch section says why it has no command without the head's path
    bare = plan.model_copy(update={"dag_cost": plan.dag_cost.model_copy(  # type: ignore[union-attr]
        update={"speculation": None, "prefix_cache": None})})
    assert 'id="features"' not in render_report(bare)


def test_a_split_deployment_shows_the_prefill_gpus_without_the_cache() -> None:
    split = _plan("prefill:tp=1;decode:tp=1;disagg", 2)
    page = render_report(split)
    assert "<th>prefill GPUs for the rate</th><td>1</td><td>3</td>" in page


@pytest.mark.skipif("prefix_hit" not in SimulationSummary.model_fields,
                    reason="the simulator does not measure a prefix hit yet (SimulationSummary.prefix_hit)")
def test_simulate_prints_the_measured_prefix_hit(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan("tp=1", 1)
    deployment = plan.priced()
    assert deployment is not None
    model, cluster = resolve_request(plan.request)
    summary = simulate(model, cluster, deployment, plan.request.workload, requests=40, rate=2.0).summary
    summary = summary.model_copy(update={"prefix_hit": 0.375})
    print_simulation(summary, plan)
    assert "prefix cache: 37.5% of prompt tokens found in the simulated cache (the plan assumed 50%)" in (
        capsys.readouterr().out)
