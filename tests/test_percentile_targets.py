"""Percentile targets: the verdict reads the percentile a target names, the search screens analytically and then
chooses by simulating its leaders, and the plan says which of its figures were simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_here

from shardplan.cli.common import build_request
from shardplan.contracts.figures import Percentiles, make_figures
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.simulation import DISTRIBUTION_PERCENTS
from shardplan.contracts.targets import Targets, misses, parse_slo_percentile
from shardplan.contracts.traffic import ClosedLoop, Traffic
from shardplan.errors import InputError
from shardplan.tools.planning.planner import plan, resolve_request
from shardplan.tools.report.html import render_report
from shardplan.tools.report.latency import share_within
from shardplan.tools.search import simulated
from shardplan.tools.search.deployments import search
from shardplan.tools.simulation.run import replayed_traffic, simulate
from shardplan.tools.surfaces.langchain_tools import shardplan_tools

# One replica at 18 requests/s of lognormal lengths meets a 150 ms TTFT on average and misses it at P99; two GPUs
# (tp=2) meet it at P99 too.
MIXED = dict(isl_dist="lognormal:mean=1024,cv=1,high=8192", osl_dist="lognormal:mean=256,cv=1,high=2048", rate=18.0,
             ttft_ms=150.0, tpot_ms=40.0)


def _request(percentile: str) -> PlanRequest:
    return build_request("llama-3.1-8b", "H100", 2, slo_percentile=percentile, **MIXED)  # type: ignore[arg-type]


def _figures(p99_ttft: float, source: str = "simulation") -> object:
    spread = Percentiles(p50_ms=80, p90_ms=120, p95_ms=140, p99_ms=p99_ttft)
    return make_figures(source, ttft_ms=90, tpot_ms=20, osl=100, tokens_per_s=1000, requests_per_s=10,  # type: ignore[arg-type]
                        memory_per_gpu_gb=50, gpu_memory_gb=80, fits=True, gpus_used=1, gpu_budget=1,
                        percentiles={"ttft": spread, "tpot": spread, "e2e": spread} if source == "simulation" else None)


def test_a_target_bounds_the_statistic_it_names() -> None:
    measured = _figures(p99_ttft=300)
    assert misses(measured, Targets(ttft_ms=150)) == []  # type: ignore[arg-type]
    [miss] = misses(measured, Targets(ttft_ms=150, percentile="p99"))  # type: ignore[arg-type]
    assert (miss.metric, miss.value, miss.gap) == ("ttft", 300, 1.0)
    assert miss.message.startswith("P99 TTFT 300.0 ms > target 150 ms")
    assert misses(measured, Targets(ttft_ms=150, percentile="p95")) == []  # type: ignore[arg-type]
    # Figures without percentiles (the steady state) are screened by their mean, and the miss says so.
    [screened] = misses(_figures(0, "steady_state"), Targets(ttft_ms=50, percentile="p99"))  # type: ignore[arg-type]
    assert screened.value == 90 and "mean, not simulated" in screened.message


@pytest.mark.parametrize(("text", "expected"), [("99", "p99"), ("p90", "p90"), ("P50", "p50"), ("mean", "mean"),
                                                ("95th", "p95")])
def test_percentile_texts(text: str, expected: str) -> None:
    assert parse_slo_percentile(text) == expected


def test_an_unknown_percentile_names_the_field() -> None:
    with pytest.raises(InputError) as caught:
        parse_slo_percentile("97")
    assert caught.value.field == "slo_percentile" and "99" in caught.value.fix


def test_the_search_passes_over_a_deployment_whose_mean_meets_and_p99_misses() -> None:
    by_mean, by_p99 = (_request(p) for p in ("mean", "99"))
    model, cluster = resolve_request(by_p99)
    on_mean = search(model, cluster, by_mean.workload, top=6)
    on_p99 = search(model, cluster, by_p99.workload, top=6)
    # A rate ranks the fewest GPUs first: judged on means, one GPU serves 18 requests/s within 150 ms.
    assert on_mean.candidates[0].figures.gpus_used == 1 and on_mean.candidates[0].meets_targets
    one_gpu = next(c for c in on_p99.candidates if c.spec == on_mean.candidates[0].spec)
    assert one_gpu.simulation is not None and not one_gpu.meets_targets
    assert one_gpu.figures.ttft_ms < 150 < one_gpu.figures.percentiles["ttft"].p99_ms
    best = on_p99.candidates[0]
    assert best.meets_targets and best.figures.source == "simulation" and best.figures.gpus_used == 2
    assert best.figures.percentiles["ttft"].p99_ms <= 150 and best.simulation is not None
    assert best.simulation.settled is True and best.figures.requests_per_s == 18.0
    # The simulated ones lead; those not simulated keep their steady state, after them.
    sources = [c.figures.source for c in on_p99.candidates]
    assert sources == sorted(sources, key=lambda s: s != "simulation") and on_p99.simulated >= 2
    assert any("ranked them by the simulated figures" in n and "at P99" in n for n in on_p99.notes)


@pytest.fixture(scope="module")
def p99_plan() -> Plan:
    return plan(_request("99"))


def test_the_plan_says_which_figures_are_simulated(p99_plan: Plan) -> None:
    result = p99_plan
    assert result.status == "ok" and result.figures is not None and result.simulation is not None
    assert result.figures.source == "simulation" and result.figures == result.simulation.figures
    p = result.figures.percentiles
    assert set(p) == {"ttft", "tpot", "e2e"} and p["ttft"].p99_ms <= 150 and p["tpot"].p99_ms <= 40
    assert 0.99 <= result.simulation.goodput <= 1
    assert result.simulation.analytic is not None and result.simulation.analytic.source == "steady_state"
    [note] = [m for m in result.messages if m.startswith("simulated: ")]
    assert "analytic: memory" in note and "2,000 requests" in note
    again = Plan.model_validate_json(result.model_dump_json())
    assert again.simulation == result.simulation and again.priced() is not None
    assert again.priced().steady_state == result.simulation.analytic  # type: ignore[union-attr]


def test_simulations_in_worker_processes_give_what_one_process_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request("99")
    model, cluster = resolve_request(request)
    options = search(model, cluster, request.workload.model_copy(update={"slo_percentile": "mean", "traffic": None}),
                     top=3).candidates
    monkeypatch.setattr(simulated, "_workers", lambda jobs: 0)
    here = simulated.simulate_options(model, cluster, options, request.workload, requests=300)
    monkeypatch.setattr(simulated, "_workers", lambda jobs: min(jobs, 2))
    forked = simulated.simulate_options(model, cluster, options, request.workload, requests=300)
    assert [o.model_dump_json() for o in here] == [o.model_dump_json() for o in forked]  # type: ignore[union-attr]


def test_without_a_rate_open_arrivals_replay_as_the_plans_closed_loop() -> None:
    request = build_request("llama-3.1-8b", "H100", 1, isl=1024, osl=256, tpot_ms=30, slo_percentile="90")
    model, cluster = resolve_request(request)
    [best, *_] = search(model, cluster, request.workload.model_copy(update={"slo_percentile": "mean"})).candidates
    workload, rate, note = replayed_traffic(request.workload, best)
    assert rate is None and note is not None and f"closed loop of {best.concurrency} clients" in note
    assert workload.traffic == Traffic(arrival=ClosedLoop(kind="closed", clients=best.concurrency))
    # With a rate the workload's own arrivals stay, at that rate.
    assert replayed_traffic(request.workload, best, 3.0) == (request.workload, 3.0, None)


def test_an_open_loop_past_capacity_misses_its_rate() -> None:
    request = _request("mean")
    model, cluster = resolve_request(request)
    one = next(c for c in search(model, cluster, request.workload.model_copy(update={"traffic": None})).candidates
               if c.figures.gpus_used == 1)
    rate = 3 * one.steady_state.requests_per_s  # far past what one GPU serves
    run = simulate(model, cluster, one, request.workload, requests=1500, rate=rate).summary
    assert run.settled is False and run.figures.requests_per_s == pytest.approx(run.completed_per_s)
    assert run.figures.requests_per_s < rate and "rate" in [m.metric for m in run.misses]
    assert any("queue does not settle" in n for n in run.notes)


def test_the_cli_reads_the_percentile_and_refuses_an_unknown_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["plan", "-m", "llama-3.1-8b", "--gpu", "H100", "--gpus", "2", "--isl-dist", MIXED["isl_dist"],
            "--osl-dist", MIXED["osl_dist"], "--rate", "18", "--ttft-ms", "150", "--tpot-ms", "40"]
    refused = run_here(capsys, *args, "--slo-percentile", "97")
    assert refused.returncode == 2 and "slo_percentile" in refused.stderr + refused.stdout
    assert "Traceback" not in refused.stderr
    target = tmp_path / "p.json"
    done = run_here(capsys, *args, "--slo-percentile", "99", "-o", str(target))
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert "P99 TTFT <= 150 ms" in out and "P90" in out and "goodput" in out
    written = json.loads(target.read_text())
    assert written["request"]["workload"]["slo_percentile"] == "p99"
    assert written["figures"]["source"] == "simulation" and written["simulation"]["goodput"] > 0.99
    monkeypatch.setenv("COLUMNS", "250")  # the table's headers on one line each
    searched = run_here(capsys, "search", *args[1:], "--slo-percentile", "99", "--top", "6")
    assert searched.returncode == 0, searched.stderr
    assert "P99 TTFT ms" in searched.stdout and "simulated the 4 best" in searched.stdout
    assert "(mean)" in searched.stdout  # the candidates past the simulated ones keep their steady-state means


def test_the_plan_tool_takes_a_percentile_and_returns_the_simulation() -> None:
    tools = {t.name: t for t in shardplan_tools()}
    args = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 2, **MIXED, "slo_percentile": "P99"}
    summary = tools["plan"].invoke(args)
    assert summary["status"] == "ok" and summary["request"]["workload"]["slo_percentile"] == "p99"
    assert summary["figures"]["source"] == "simulation" and summary["simulation"]["goodput"] >= 0.99
    assert summary["figures"]["percentiles"]["ttft"]["p99_ms"] <= MIXED["ttft_ms"]
    refused = json.loads(tools["plan"].invoke({**args, "slo_percentile": "p42"}))
    assert refused["field"] == "slo_percentile" and "99" in refused["fix"]


def test_the_report_draws_each_latencys_distribution_beside_its_target(p99_plan: Plan) -> None:
    run = p99_plan.simulation
    assert run is not None and set(run.distribution) == {"ttft", "tpot", "e2e"}
    ttft = run.distribution["ttft"]
    assert len(ttft) == len(DISTRIBUTION_PERCENTS) and ttft == sorted(ttft)
    assert ttft[DISTRIBUTION_PERCENTS.index(99)] == pytest.approx(run.figures.percentiles["ttft"].p99_ms)
    # The share read off the curve at the P99 is 99%, and every request is within the longest.
    assert share_within(ttft, run.figures.percentiles["ttft"].p99_ms) == pytest.approx(0.99)
    assert share_within(ttft, ttft[-1]) == 1.0 and share_within(ttft, ttft[0] - 1) == 0.0
    page = render_report(p99_plan)
    section = page[page.index('id="latency"'):]
    section = section[:section.index("</section>")]
    assert section.count('class="cdf cdf-') == 2 and section.count('class="target"') == 2
    assert "P99 " in section and f"{run.goodput:.1%} met both targets" in section
    # A plan planned for mean targets at fixed lengths is not simulated and has no such section.
    fixed = build_request("llama-3.1-8b", "H100", 1, isl=1024, osl=256, tpot_ms=30)
    assert 'id="latency"' not in render_report(plan(fixed))
