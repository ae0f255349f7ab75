"""Strategy search: enumeration, pruning, objectives, Pareto frontier, infeasible requests."""

from __future__ import annotations

import pytest
from shardplan.errors import InfeasibleError
from shardplan.tools.contracts import Workload
from shardplan.tools.feasibility import strategy_problems
from shardplan.tools.hardware import make_cluster
from shardplan.tools.models import load_model
from shardplan.tools.search import enumerate_strategies, pareto_front, search


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
    best = result.candidates[0].strategy
    assert best.decode.tp <= 8
    assert result.candidates[0].scored_by == "schedule"


def test_seed_001_search_prefers_pp_over_tp_across_two_nodes() -> None:
    result = search(load_model("openai/gpt-oss-120b"), make_cluster("H100", 2, 1), Workload(isl=1024, osl=128),
                    disaggregated=False)
    specs = [c.spec for c in result.candidates]
    assert specs.index("pp=2") < specs.index("tp=2")


def test_throughput_objective_ranks_by_tokens_per_gpu() -> None:
    result = search(load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 4),
                    Workload(isl=1024, osl=256, batch=64, objective="throughput"), scheduled=0)
    rates = [c.tokens_per_s_per_gpu for c in result.candidates]
    assert rates == sorted(rates, reverse=True)


def test_goodput_prefers_strategies_meeting_targets() -> None:
    loose = Workload(isl=1024, osl=128, batch=16, objective="goodput", tpot_ms=1000)
    tight = Workload(isl=1024, osl=128, batch=16, objective="goodput", tpot_ms=0.01)
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 4)
    assert search(model, cluster, loose, scheduled=0).candidates[0].meets_targets
    missed = search(model, cluster, tight, scheduled=0).candidates[0]
    assert not missed.meets_targets and "TPOT" in missed.target_misses[0]


def test_pareto_front_is_non_dominated() -> None:
    result = search(load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 8),
                    Workload(isl=1024, osl=128, batch=32), scheduled=0)
    front = result.frontier
    assert front
    for a in front:
        assert not any(b.tokens_per_s_per_user > a.tokens_per_s_per_user and
                       b.tokens_per_s_per_gpu > a.tokens_per_s_per_gpu for b in result.candidates)
    assert pareto_front(front) == front


def test_a_model_that_does_not_fit_reports_the_minimum_gpu_count() -> None:
    with pytest.raises(InfeasibleError) as info:
        search(load_model("meta-llama/Llama-3.1-405B"), make_cluster("H100", 4), Workload(isl=1024, osl=128))
    assert info.value.min_gpus is not None and info.value.min_gpus > 4
    assert str(info.value.min_gpus) in str(info.value)
