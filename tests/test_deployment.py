"""Deployments as plans carry them: the deployment section, explanations computed from the placement, the
done-when requests of issue 12 through the command line, and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import run_here

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import StrategyError
from shardplan.text import agreeing, counted
from shardplan.tools.planning.explain import collectives_by_group
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request


def _plan(spec: str, gpus: int, per_node: int, model: str = "meta-llama/Llama-3.1-8B", batch: int = 4):  # type: ignore[no-untyped-def]
    request = PlanRequest(model=model, gpu="H100", gpus=gpus, gpus_per_node=per_node,
                          workload=Workload(isl=512, osl=64, batch=batch))
    spec_model, cluster = resolve_request(request)
    return plan_for_strategy(request, spec_model, cluster, parse_strategy(spec))


def test_explanation_says_a_tp_group_crosses_nodes_with_its_collective_count() -> None:
    crossing = _plan("tp=2", gpus=2, per_node=1)
    assert crossing.dag is not None and crossing.dag_cost is not None
    total, across = collectives_by_group(crossing.dag)["tp"]
    assert across == total > 0
    assert f"TP=2 groups cross nodes (each spans 2 nodes) (TP-5); {across} of its {total} collectives" \
        in crossing.explanation
    assert "stay inside one node" not in crossing.explanation
    assert crossing.dag_cost.decode.inter_node_collectives >= across


def test_explanation_says_a_tp_group_stays_in_its_node() -> None:
    inside = _plan("tp=2", gpus=2, per_node=2)
    assert inside.dag is not None
    total, across = collectives_by_group(inside.dag)["tp"]
    assert across == 0 and total > 0
    assert f"TP=2 groups stay inside one node (TP-5); none of its {total} collectives" in inside.explanation
    assert "cross" not in inside.explanation


def test_explanation_counts_replicas_gpus_and_idle_ones_from_the_deployment() -> None:
    replicated = _plan("dp=2,tp=2", gpus=8, per_node=8, batch=8)
    d = replicated.deployment
    assert d is not None and d.replicas == 2 and d.gpus_used == 4 and d.idle_gpus == 4 and d.concurrency == 8
    assert d.pools[0].concurrency_per_worker == 4 and d.pools[0].workers == 2
    assert "2 replicas of tp=2" in replicated.explanation and "4 of 8 H100 GPUs" in replicated.explanation
    assert f"{counted(d.idle_gpus, 'GPU')} {agreeing(d.idle_gpus, 'stays', 'stay')} idle" in replicated.explanation
    assert replicated.dag is not None and replicated.dag.meta.gpus == 2  # the DAG is one replica's


def test_a_deployment_beyond_the_budget_or_splitting_nodes_is_refused() -> None:
    with pytest.raises(StrategyError, match="budget is 4"):
        _plan("dp=4,tp=2", gpus=4, per_node=4)
    with pytest.raises(StrategyError, match="split a node of 3"):
        _plan("tp=4", gpus=12, per_node=3, model="meta-llama/Llama-3.1-70B")


def test_split_pools_of_unequal_workers_sit_on_node_boundaries() -> None:
    # Two 4-GPU prefill workers share one node; the 8-GPU decode worker takes the other whole.
    split = _plan("prefill:dp=2,tp=4;decode:tp=8;disagg", gpus=16, per_node=8, model="meta-llama/Llama-3.1-70B")
    assert split.dag is not None and split.deployment is not None
    assert split.deployment.gpus_used == 16 and split.deployment.prefill_workers == 2
    meta = split.dag.meta
    assert meta.rank_pools["prefill"] == [0, 1, 2, 3] and meta.rank_pools["decode"] == list(range(8, 16))
    assert collectives_by_group(split.dag)["tp"][1] == 0  # no TP collective leaves its node
    assert split.validation is not None and split.validation.valid


def test_a_fixed_batch_the_prefill_pool_cannot_feed_runs_the_largest_it_can_and_says_so() -> None:
    request = PlanRequest(model="meta-llama/Llama-3.1-70B", gpu="H200", gpus=16,
                          workload=Workload(isl=2048, osl=256, batch=64))
    model, cluster = resolve_request(request)
    plan = plan_for_strategy(request, model, cluster, parse_strategy("prefill:dp=2,tp=4;decode:tp=8;disagg"))
    assert plan.deployment is not None and plan.figures is not None
    fed = plan.deployment.pools[1].concurrency_per_worker
    assert 1 < fed < 64
    assert any("cannot feed 64 sequences" in n and n.endswith(f"batch they feed, {fed}") for n in plan.messages)


def test_split_pools_that_cannot_share_the_nodes_are_refused() -> None:
    # Three 4-GPU workers are 12 GPUs, the budget, but a 6-GPU node holds only one of them.
    with pytest.raises(StrategyError, match="without splitting a worker across nodes"):
        _plan("prefill:tp=4;decode:dp=2,tp=4;disagg", gpus=12, per_node=6, model="meta-llama/Llama-3.1-70B")


def test_plan_chooses_the_concurrency_for_the_70b_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    result = run_here(capsys, "plan", "-m", "meta-llama/Llama-3.1-70B", "--gpu", "H200", "--gpus", "8", "--isl", "3000",
                      "--osl", "300", "--ttft-ms", "1500", "--tpot-ms", "40", "-o", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    d = plan["deployment"]
    assert d["concurrency"] > 1 and d["gpus_used"] <= 8 and d["batching"] == "continuous"
    assert {"concurrency", "replicas", "gpus_used", "idle_gpus", "batching"} <= set(d)
    assert {"request", "strategy", "figures", "misses", "dag_cost", "validation"} <= set(plan)
    assert plan["status"] == "ok" and plan["figures"]["tpot_ms"] <= 40 and plan["figures"]["ttft_ms"] <= 1500
    assert plan["figures"]["source"] == "steady_state" and plan["dag_cost"]["figures"]["source"] == "static_batch"
    assert re.search(rf"deployment: .*{d['concurrency']} sequences in flight.*{d['gpus_used']} of 8 GPUs used",
                     result.stdout)


def test_the_12_gpu_latency_request_uses_a_small_layout_inside_one_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    result = run_here(capsys,
                      "plan", "-m", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--gpus", "12", "--gpus-per-node",
                      "3", "--isl", "1024", "--osl", "128", "--batch", "1", "-o", str(out))
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    d = plan["deployment"]
    assert d["gpus_used"] < 12 or d["replicas"] > 1
    assert plan["dag_cost"]["decode"]["inter_node_collectives"] == 0
    tp = plan["strategy"]["decode"]["tp"]
    if tp > 1:
        assert f"TP={tp} groups stay inside one node" in plan["explanation"]
    assert "cross nodes" not in plan["explanation"]
    assert f"{counted(d['idle_gpus'], 'GPU')} {agreeing(d['idle_gpus'], 'stays', 'stay')} idle" in plan["explanation"]


@pytest.mark.parametrize(("option", "value", "named"), [
    ("--rate", "0", "--rate"),
    ("--gpu-memory-utilization", "1.5", "--gpu-memory-utilization"),
    ("--batching", "dynamic", "--batching"),
])
def test_bad_deployment_options_exit_2_naming_the_option(
    option: str, value: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpus", "1", option, value)
    assert result.returncode == 2
    assert named in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_a_rate_the_budget_cannot_serve_is_targets_missed_with_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpus", "2", "--rate", "5000", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["status"] == "targets_missed" and not plan["feasible"]
    rate = next(miss for miss in plan["misses"] if miss["metric"] == "rate")
    assert rate["target"] == 5000 and rate["value"] < 5000 and "rate 5000" in rate["message"]


def test_search_command_lists_deployments_with_their_concurrency(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "search", "-m", "llama-3.1-8b", "--gpus", "4", "--isl", "1024", "--osl", "128",
                      "--tpot-ms", "30", "--top", "3", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["objective"] == "throughput" and data["candidates"]
    for c in data["candidates"]:
        assert c["figures"]["gpu_budget"] == 4 and c["concurrency"] >= c["strategy"]["decode"]["dp"] >= 1
    assert all(f["meets_targets"] for f in data["frontier"])


def test_prefill_sp_that_becomes_decode_dp_on_shared_gpus_is_one_replica() -> None:
    # Seed combination "SP alone": prefill shards one prompt four ways; decode, where SP does not exist,
    # serves four sequences data-parallel on the same four GPUs. That is one replica, not four.
    from shardplan.tools.catalogs.gpus import make_cluster
    from shardplan.tools.catalogs.models import load_model
    from shardplan.tools.planning.deployment import evaluate_deployment
    from shardplan.tools.serving.placement import replica_strategy

    strategy = parse_strategy("prefill:sp=4;decode:dp=4")
    replica = replica_strategy(strategy)
    assert (replica.prefill.gpus, replica.decode.gpus) == (4, 4)
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 4)
    evaluated = evaluate_deployment(model, cluster, strategy, Workload(isl=32768, osl=256, batch=4))
    assert evaluated.evaluation.validation.valid
    assert evaluated.option is not None and evaluated.option.figures.gpus_used == 4


def test_cost_of_a_strategy_smaller_than_the_budget_prices_the_gpus_it_uses(capsys: pytest.CaptureFixture[str]) -> None:
    # plan picks tp=2 for Llama-3.1-8B at batch 1 with GPUs to spare; cost must price that same strategy.
    on_budget = run_here(capsys, "cost", "-m", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--gpus", "8", "-s", "tp=2",
                         "--batch", "1", "--json")
    exact = run_here(capsys, "cost", "-m", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--gpus", "2", "-s", "tp=2",
                     "--batch", "1", "--json")
    assert on_budget.returncode == exact.returncode == 0, on_budget.stderr
    budget, two = json.loads(on_budget.stdout), json.loads(exact.stdout)
    assert budget["figures"] == two["figures"]
    assert any("priced on the 2 of 8 GPUs" in note for note in budget["notes"])
    too_big = run_here(capsys, "cost", "-m", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--gpus", "2", "-s", "tp=4")
    assert too_big.returncode == 2 and "HIER-2" in too_big.stderr
