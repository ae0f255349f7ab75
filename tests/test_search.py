"""Strategy search: enumeration, pruning, objectives, Pareto frontier, infeasible requests."""

from __future__ import annotations

import pytest

from shardplan.contracts.arithmetic.feasibility import strategy_problems
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InfeasibleError
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.planning.deployment import best_option
from shardplan.tools.search.deployments import search
from shardplan.tools.search.layouts import enumerate_strategies
from shardplan.tools.search.ranking import pareto_front


def test_every_enumerated_strategy_uses_all_gpus_and_shares_weights_when_aggregated() -> None:
    model = load_model("Qwen/Qwen3-30B-A3B")
    work = Workload(isl=4096, osl=256, batch=16)
    seen = 0
    for strategy in enumerate_strategies(model, 8, work):
        seen += 1
        assert strategy.gpus == 8
        assert strategy.decode.sp == 1
        if not strategy.disaggregated:
            assert not strategy_problems(model, strategy, work, 8)
    assert seen > 50


def test_latency_search_keeps_tp_inside_a_node() -> None:
    result = search(load_model("meta-llama/Llama-3.1-70B"), make_cluster("H100", 16), Workload(isl=1024, osl=128))
    best = result.candidates[0]
    assert best.strategy.decode.tp <= 8
    assert best.figures.source == "steady_state" and best.concurrency == 1 and best.replicas == 1
    assert best.figures.gpu_budget == 16


def test_seed_001_pp_beats_tp_across_two_nodes() -> None:
    model, cluster = load_model("openai/gpt-oss-120b"), make_cluster("H100", 2, 1)
    work = Workload(isl=1024, osl=128, batch=1)
    pp, tp = (best_option(model, cluster, parse_strategy(spec), work) for spec in ("pp=2", "tp=2"))
    assert pp is not None and tp is not None
    assert pp.figures.e2e_ms < tp.figures.e2e_ms


def test_search_uses_up_to_the_budget_and_says_what_is_idle() -> None:
    """12 GPUs, 3 per node, Llama-3.1-8B at batch 1: a small layout inside one node, the rest idle."""
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 12, 3)
    best = search(model, cluster, Workload(isl=1024, osl=128, batch=1)).candidates[0]
    assert best.figures.gpus_used <= 3 and best.figures.gpu_budget == 12
    assert best.strategy.decode.pp * best.strategy.decode.tp == best.figures.gpus_used


def test_throughput_search_chooses_concurrency_within_the_budget() -> None:
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 8)
    work = Workload(isl=1024, osl=256, objective="throughput", ttft_ms=1000, tpot_ms=30)
    result = search(model, cluster, work, disaggregated=False)
    best = result.candidates[0]
    assert best.meets_targets and best.concurrency > 1
    assert best.replicas == best.strategy.decode.dp
    assert best.figures.gpus_used == best.replicas * best.strategy.decode.replica_gpus <= 8
    assert best.figures.gpu_budget == 8
    assert best.concurrency % best.replicas == 0
    # Every other priced deployment meeting the targets delivers fewer tokens/s per GPU.
    meeting = [c for c in result.candidates if c.meets_targets]
    assert all(c.figures.tokens_per_s_per_gpu <= best.figures.tokens_per_s_per_gpu for c in meeting)


def test_rate_objective_uses_the_fewest_gpus_that_serve_it() -> None:
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 8)
    base = Workload(isl=1024, osl=256, tpot_ms=30, rate=2.0)
    small = search(model, cluster, base, disaggregated=False).candidates[0]
    large = search(model, cluster, base.model_copy(update={"rate": 20.0}), disaggregated=False).candidates[0]
    assert small.meets_targets and small.figures.requests_per_s >= 2.0
    assert large.figures.requests_per_s >= 20.0 or not large.meets_targets
    assert small.figures.gpus_used <= large.figures.gpus_used


def test_a_rate_beyond_the_budget_is_missed_with_the_numbers() -> None:
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 2)
    best = search(model, cluster, Workload(isl=1024, osl=256, rate=10_000.0)).candidates[0]
    assert not best.meets_targets and "10000" in best.misses[-1].message


def test_throughput_objective_ranks_by_tokens_per_gpu() -> None:
    result = search(load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 4),
                    Workload(isl=1024, osl=256, batch=64, objective="throughput"))
    rates = [c.figures.tokens_per_s_per_gpu for c in result.candidates]
    assert rates == sorted(rates, reverse=True)


def test_goodput_prefers_strategies_meeting_targets() -> None:
    loose = Workload(isl=1024, osl=128, batch=16, objective="goodput", tpot_ms=1000)
    tight = Workload(isl=1024, osl=128, batch=16, objective="goodput", tpot_ms=0.01)
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 4)
    assert search(model, cluster, loose).candidates[0].meets_targets
    missed = search(model, cluster, tight).candidates[0]
    assert not missed.meets_targets and "TPOT" in missed.misses[0].message


def test_pareto_front_is_non_dominated() -> None:
    result = search(load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 8),
                    Workload(isl=1024, osl=128, batch=32))
    front = result.frontier
    assert front
    for a in front:
        assert not any(b.figures.tokens_per_s_per_user > a.figures.tokens_per_s_per_user and
                       b.figures.tokens_per_s_per_budget_gpu > a.figures.tokens_per_s_per_budget_gpu
                       for b in result.candidates)
    assert pareto_front(front) == front


def test_a_model_that_does_not_fit_reports_the_minimum_gpu_count() -> None:
    with pytest.raises(InfeasibleError) as info:
        search(load_model("meta-llama/Llama-3.1-405B"), make_cluster("H100", 4), Workload(isl=1024, osl=128))
    assert info.value.min_gpus is not None and info.value.min_gpus > 4
    assert str(info.value.min_gpus) in str(info.value)


def test_a_fixed_batch_screens_layouts_at_that_batch_for_the_latency_objective() -> None:
    # At one sequence DeepSeek-V3's expert-parallel TP=8 variants look fastest; at the batch of 8 the request
    # fixes, plain TP=8 serves it sooner. The screen must price layouts at the batch served, or it drops TP=8.
    from shardplan.tools.planning.deployment import evaluate_deployment

    model, cluster = load_model("deepseek-ai/DeepSeek-V3"), make_cluster("H200", 8)
    workload = Workload(isl=2048, osl=256, batch=8)
    best = search(model, cluster, workload, top=1).candidates[0]
    tp8 = evaluate_deployment(model, cluster, parse_strategy("tp=8"), workload).option
    assert tp8 is not None and best.figures.e2e_ms <= tp8.figures.e2e_ms * 1.001
