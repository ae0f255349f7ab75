"""Split pools against aggregated replicas: the pool frontier between grid batches, the simpler deployment on
a lead the model cannot resolve."""

from __future__ import annotations

import pytest

from shardplan.contracts.figures import make_figures
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.strategy import PhaseStrategy, Strategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.measured.database import measured_available
from shardplan.tools.search.ranking import prefer_aggregated
from shardplan.tools.serving.disaggregated import decode_workers, pool_frontier, pool_options, prefill_worker
from shardplan.tools.serving.steps import StepPricer

LLAMA_8B = load_model("meta-llama/Llama-3.1-8B")


SPLIT = parse_strategy("prefill:tp=2,dp=2;decode:tp=4;disagg")
AGG = parse_strategy("tp=4,dp=2")
TARGETS = Workload(isl=2048, osl=256, ttft_ms=1000, tpot_ms=30, objective="throughput")


def priced(strategy: Strategy, tokens_per_s: float, ttft_ms: float = 100.0, tpot_ms: float = 20.0) -> PricedDeployment:
    """A deployment with these figures, judged against TARGETS' latency bounds."""
    figures = make_figures("steady_state", ttft_ms=ttft_ms, tpot_ms=tpot_ms, osl=256, tokens_per_s=tokens_per_s,
                           requests_per_s=tokens_per_s / 256, memory_per_gpu_gb=40.0, gpu_memory_gb=80.0, fits=True,
                           gpus_used=8, gpu_budget=8)
    return PricedDeployment(strategy=strategy, concurrency=8, worker_concurrency=8, figures=figures).judged(
        TARGETS.targets
    )


def test_a_split_lead_inside_the_stated_error_goes_to_the_aggregated_deployment() -> None:
    ordered = [priced(SPLIT, 1050.0), priced(AGG, 1000.0)]
    reordered, note = prefer_aggregated(ordered, TARGETS, error_pct=10.0)
    assert [o.strategy for o in reordered] == [AGG, SPLIT]
    assert note is not None and "4.8%" in note and SPLIT.to_spec() in note and AGG.to_spec() in note


@pytest.mark.parametrize(
    ("ordered", "workload"),
    [
        ([priced(SPLIT, 1200.0), priced(AGG, 1000.0)], TARGETS),  # a lead beyond the error stands
        ([priced(SPLIT, 1050.0), priced(AGG, 1000.0, tpot_ms=31.0)], TARGETS),  # the aggregated one misses TPOT
        ([priced(SPLIT, 1050.0, ttft_ms=1200.0), priced(AGG, 1000.0)], TARGETS),  # so does the split one
        ([priced(SPLIT, 1050.0), priced(AGG, 1000.0)], TARGETS.model_copy(update={"rate": 1.0})),  # fewest GPUs
        ([priced(AGG, 1050.0), priced(SPLIT, 1000.0)], TARGETS),  # already aggregated
    ],
)
def test_the_order_stands_otherwise(ordered: list[PricedDeployment], workload: Workload) -> None:
    reordered, note = prefer_aggregated(ordered, workload, error_pct=10.0)
    assert reordered == ordered and note is None


def test_the_pool_frontier_refines_the_batch_the_prefill_pool_feeds_between_grid_points() -> None:
    cluster = make_cluster("H100", 8)
    work = Workload(isl=2048, osl=256)
    layout = PhaseStrategy(tp=1)
    pricer = StepPricer.for_workload(LLAMA_8B, cluster, layout, work)
    prefill = prefill_worker(LLAMA_8B, cluster, layout, work)
    assert prefill is not None
    grid = decode_workers(LLAMA_8B, cluster, layout, work, pricer)
    sizing = (1, 1)
    on_grid = [o for d in grid for o in pool_options(LLAMA_8B, cluster, prefill, d, work, budget=8, counts=sizing)]
    refined = pool_frontier(LLAMA_8B, cluster, prefill, grid, work, budget=8, pricer=pricer, counts=sizing)
    largest_on_grid = max(o.worker_concurrency for o in on_grid)
    largest = max(o.worker_concurrency for o in refined)
    above = min(d.sequences for d in grid if d.sequences > largest_on_grid)
    # The prefill worker feeds a batch between the last grid batch it feeds and the next one ...
    assert largest_on_grid < largest < above
    # ... and the refined batch is a steady state: its prefill worker is not saturated.
    best = max(refined, key=lambda o: o.worker_concurrency)
    assert best.figures.requests_per_s < prefill.requests_per_s
    assert best.figures.tokens_per_s > max(o.figures.tokens_per_s for o in on_grid)


def test_the_pool_frontier_leaves_the_tpot_limit_on_the_grid() -> None:
    cluster = make_cluster("H100", 8)
    layout = PhaseStrategy(tp=1)
    loose = Workload(isl=2048, osl=256)
    pricer = StepPricer.for_workload(LLAMA_8B, cluster, layout, loose)
    grid = decode_workers(LLAMA_8B, cluster, layout, loose, pricer)
    # A TPOT target between two grid batches that the prefill pool both feeds (four prefill workers).
    low, high = grid[-4], grid[-3]
    tight = loose.model_copy(update={"tpot_ms": (low.step_s + high.step_s) / 2 * 1e3})
    prefill = prefill_worker(LLAMA_8B, cluster, layout, tight)
    assert prefill is not None
    options = pool_frontier(LLAMA_8B, cluster, prefill, grid, tight, budget=8, pricer=pricer, counts=(4, 1))
    meeting = [o.worker_concurrency for o in options if o.figures.tpot_ms <= tight.tpot_ms]
    assert max(meeting) == low.sequences


@pytest.mark.skipif(not measured_available(), reason="the figures below are the measured backend's")
def test_a_plan_says_why_it_passed_over_the_split_deployment() -> None:
    from shardplan.contracts.plan import PlanRequest
    from shardplan.tools.cost.estimate import stated_error_pct
    from shardplan.tools.planning.planner import plan

    work = Workload(isl=8192, osl=512, ttft_ms=3000, tpot_ms=25, objective="throughput")
    chosen = plan(PlanRequest(model="Qwen/Qwen3-8B", gpu="H200", gpus=4, workload=work))
    assert chosen.strategy is not None and not chosen.strategy.disaggregated
    (said,) = [m for m in chosen.messages if m.startswith("the split deployment")]
    split = [a for a in chosen.alternatives if "disagg" in a.strategy]
    assert split and split[0].figures.tokens_per_s_per_gpu > chosen.figures.tokens_per_s_per_gpu
    lead = 1 - chosen.figures.tokens_per_s_per_gpu / split[0].figures.tokens_per_s_per_gpu
    assert f"leads by {lead:.1%}" in split[0].why_not
    assert f"{lead * 100:.1f}%" in said and f"{stated_error_pct('measured', 'tokens/s'):.1f}%" in said
