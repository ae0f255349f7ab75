"""Constraints: their text form, the pure checks, the search honouring them, and every way in (CLI, tools)."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_here

from shardplan.contracts.constraints import Constraints, parse_constraint, parse_constraints
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InfeasibleError, InputError
from shardplan.tools.api import capabilities
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.planning.planner import plan
from shardplan.tools.search.constraint_checks import (
    allowed_layouts,
    phase_violations,
    strategy_violations,
    unsatisfiable,
)
from shardplan.tools.search.deployments import search

TEXTS = ["tp<=8", "pp=1", "ep>=8", "decode:tp=4", "prefill:sp>=2", "tp-in-node", "ep-in-node", "pp-across-nodes",
         "pow2", "colocated", "gpus-per-replica=8", "engine=vllm"]


@pytest.mark.parametrize("text", TEXTS)
def test_each_constraint_reads_back_to_its_own_text(text: str) -> None:
    parsed = parse_constraint(text)
    assert parsed.to_texts() == [text]
    assert parse_constraints(parsed.to_texts()) == parsed


def test_spellings_and_merging() -> None:
    assert parse_constraint("sp=off").to_texts() == ["sp=1"]
    assert parse_constraint("PP == 2").to_texts() == ["pp=2"]
    assert parse_constraint("engine=TensorRT-LLM").engine == "trtllm"
    merged = parse_constraints(["pp=4,tp=8", "disaggregated", "colocated"])
    assert merged.to_texts() == ["pp=4", "tp=8", "colocated"]
    assert Constraints().is_empty() and not merged.is_empty()


@pytest.mark.parametrize("text", ["tp<8x", "qq=2", "tp=0", "pp>=off", "engine=llamacpp", "gpus-per-replica=0", ""])
def test_unreadable_constraints_name_the_field_and_the_syntax(text: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_constraint(text)
    assert caught.value.field == "constraint"
    assert caught.value.fix and ("tp<=8" in caught.value.fix or "1 or more" in caught.value.fix
                                 or "at least 1" in caught.value.fix)


def test_degree_bounds_apply_per_phase_and_sp_only_to_prefill() -> None:
    bounds = parse_constraints(["decode:tp<=4", "sp>=2"])
    wide = PhaseStrategy(tp=8)
    assert phase_violations("prefill", wide, bounds, 8) == ["sp>=2"]
    assert phase_violations("decode", wide, bounds, 8) == ["decode:tp<=4"]
    assert phase_violations("decode", PhaseStrategy(tp=4, dp=2), bounds, 8) == []


@pytest.mark.parametrize(
    ("spec", "per_node", "broken"),
    [
        ("tp=8", 8, []),
        ("tp=16", 8, ["tp-in-node"]),
        ("tp=4,dp=2", 6, ["tp-in-node"]),  # 4 does not divide a 6-GPU node: a group straddles two nodes
        ("pp=2,tp=8", 8, []),
        ("pp=2,tp=4", 8, ["pp-across-nodes"]),  # both stages share one node
        ("adp=4,tp=4,ep=16", 8, ["ep-in-node"]),
        ("adp=2,tp=4,ep=8", 8, []),
    ],
)
def test_placement_follows_the_rank_order(spec: str, per_node: int, broken: list[str]) -> None:
    placement = parse_constraints(["tp-in-node", "ep-in-node", "pp-across-nodes"])
    assert strategy_violations(parse_strategy(spec), placement, per_node) == broken


@pytest.mark.parametrize(
    ("spec", "broken"),
    [("tp=4", []), ("dp=3,tp=2", []), ("adp=3,tp=2", ["pow2"]), ("tp=4,ep=4", []),
     ("prefill:adp=3,tp=2;decode:tp=8;disagg", ["pow2"]), ("pp=3,tp=2", ["pow2"])],
)
def test_pow2_bounds_every_degree_inside_a_worker_but_not_the_worker_count(spec: str, broken: list[str]) -> None:
    assert strategy_violations(parse_strategy(spec), parse_constraints(["pow2"]), 8) == broken


def test_serving_replica_size_and_engine() -> None:
    split = parse_strategy("prefill:tp=8;decode:tp=8;disagg")
    assert strategy_violations(split, parse_constraints(["colocated"]), 8) == ["colocated"]
    assert strategy_violations(parse_strategy("tp=8"), parse_constraints(["disaggregated"]), 8) == ["disaggregated"]
    assert strategy_violations(parse_strategy("tp=4,dp=2"), parse_constraints(["gpus-per-replica=4"]), 8) == []
    assert strategy_violations(parse_strategy("tp=8"), parse_constraints(["gpus-per-replica=4"]), 8) == [
        "gpus-per-replica=4"]
    engine = parse_constraints(["engine=vllm"])
    assert strategy_violations(parse_strategy("prefill:sp=2,tp=4;decode:tp=4,dp=2"), engine, 8) == ["engine=vllm"]
    assert strategy_violations(parse_strategy("pp=2,tp=4,mb=2"), engine, 8) == ["engine=vllm"]
    assert strategy_violations(parse_strategy("pp=2,tp=4"), engine, 8) == []


def test_filters_count_what_they_reject_and_blame_the_constraint_alone() -> None:
    rejected: dict[str, int] = {}
    layouts = [PhaseStrategy(tp=t, dp=8 // t) for t in (1, 2, 4, 8)]
    kept = list(allowed_layouts(layouts, "decode", parse_constraints(["tp>=4"]), 8, rejected))
    assert [p.tp for p in kept] == [4, 8] and rejected == {"constraint tp>=4": 2}
    pool = [parse_strategy(f"tp={t},dp={8 // t}") for t in (1, 2, 4, 8)]
    assert unsatisfiable(pool, parse_constraints(["tp>=16", "pp=1"]), 8) == ["tp>=16"]
    assert unsatisfiable(pool, parse_constraints(["tp>=4", "tp<=2"]), 8) == ["tp>=4", "tp<=2"]


def test_search_keeps_only_strategies_that_respect_the_constraints() -> None:
    model, cluster = load_model("meta-llama/Llama-3.1-70B"), make_cluster("H100", 16)
    work = Workload(isl=1024, osl=128, batch=8)
    free = search(model, cluster, work, top=20)
    wanted = parse_constraints(["pp=2", "tp-in-node", "colocated"])
    bound = search(model, cluster, work, top=20, constraints=wanted)
    assert bound.candidates
    for candidate in bound.candidates:
        assert not strategy_violations(candidate.strategy, wanted, 8)
        assert candidate.strategy.decode.pp == 2 and not candidate.strategy.disaggregated
    assert any(key.startswith("constraint") for key in bound.rejected)
    assert {c.spec for c in bound.candidates} != {c.spec for c in free.candidates}


def test_a_constraint_nothing_satisfies_makes_an_infeasible_plan_that_names_it() -> None:
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 8)
    # 16 pipeline stages need 16 GPUs: more than the budget of 8 holds.
    with pytest.raises(InfeasibleError, match="pp=16"):
        search(model, cluster, Workload(isl=512, osl=64), constraints=parse_constraints(["pp=16"]))
    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=8, workload=Workload(isl=512, osl=64),
                          constraints=parse_constraints(["pp=16", "tp<=8"]))
    result = plan(request)
    assert result.status == "infeasible" and result.strategy is None
    assert "pp=16" in result.explanation and "tp<=8" not in result.explanation.split("constraint")[1]
    assert "MEM-1" not in result.explanation


@pytest.mark.parametrize(("texts", "objective", "replicas"), [
    (["dp=2", "tp=4"], "latency", {2}), (["dp=2"], "latency", {2}), (["dp>=2"], "latency", {2}),
    (["dp<=2"], "throughput", {1, 2}), (["dp=2"], "throughput", {2}),
])
def test_a_bound_on_the_replica_count_is_kept_not_read_as_every_layout_breaking_it(
    texts: list[str], objective: str, replicas: set[int]
) -> None:
    """Layouts are screened as one replica's, dp 1, so "dp=2" used to rule out every layout, and the search said the
    allowed strategies did not fit in memory (Llama-3.1-70B on 8 H100 as 2 replicas of tp=4 fits at 45 GB a GPU);
    and a search without a rate priced one replica (latency) or as many as the budget holds (throughput), never the
    count a bound asks for."""
    model, cluster = load_model("meta-llama/Llama-3.1-70B"), make_cluster("H100", 8)
    wanted = parse_constraints(texts)
    result = search(model, cluster, Workload(isl=1024, osl=256, objective=objective), top=20,  # type: ignore[arg-type]
                    constraints=wanted)
    assert result.candidates
    assert {c.strategy.decode.dp for c in result.candidates} <= replicas
    assert all(not strategy_violations(c.strategy, wanted, 8) for c in result.candidates)


@pytest.mark.parametrize("text", ["sp=2", "prefill:sp>=2"])
def test_a_constraint_asking_for_sequence_parallelism_says_the_search_prices_none(text: str) -> None:
    """The search screens layouts by their decode step, which has no sequence parallelism, so "sp=2" emptied it and
    the answer was that Llama-3.1-8B fits on no GPU count up to 1024."""
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 8)
    with pytest.raises(InfeasibleError, match="prices no prefill worker with sequence parallelism") as raised:
        search(model, cluster, Workload(isl=8192, osl=256, rate=5.0), constraints=parse_constraints([text]))
    assert "does not fit" not in str(raised.value)


def test_a_constraint_asking_for_microbatches_under_continuous_batching_says_why_none() -> None:
    """Continuous batching keeps one microbatch; "mb=2" emptied the search, which said 9 strategies did not fit in
    memory. Under static batching the search prices microbatches."""
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 8)
    with pytest.raises(InfeasibleError, match="continuous batching runs one microbatch") as raised:
        search(model, cluster, Workload(isl=1024, osl=256), constraints=parse_constraints(["mb=2"]))
    assert "do not fit" not in str(raised.value)
    static = search(model, cluster, Workload(isl=1024, osl=256, batching="static"),
                    constraints=parse_constraints(["mb=2"]))
    assert static.candidates and all(c.strategy.decode.mb == 2 for c in static.candidates)


def test_a_budget_that_a_constrained_layout_does_not_divide_leaves_gpus_idle() -> None:
    # --gpus is a budget: pp=3 replicas of 3 GPUs fit twice into 8, leaving 2 idle rather than refusing.
    model, cluster = load_model("meta-llama/Llama-3.1-8B"), make_cluster("H100", 8)
    result = search(model, cluster, Workload(isl=512, osl=64), constraints=parse_constraints(["pp=3"]))
    for candidate in result.candidates:
        assert candidate.strategy.decode.pp == 3
        assert candidate.figures.gpus_used % 3 == 0 and candidate.figures.gpus_used <= 6


def test_cli_405b_on_four_nodes_with_pp4_tp8(capsys: pytest.CaptureFixture[str]) -> None:
    done = run_here(capsys, "plan", "-m", "llama-3.1-405b", "--gpu", "H100", "--gpus", "32", "--gpus-per-node", "8",
                    "--isl", "4096", "--osl", "512", "--constraint", "pp=4", "--constraint", "tp=8", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for phase in ("prefill", "decode"):
        assert (result["strategy"][phase]["pp"], result["strategy"][phase]["tp"]) == (4, 8)
    assert "TP=8 groups stay inside one node" in result["explanation"]
    assert result["request"]["constraints"]["degrees"][0] == {"dim": "pp", "op": "=", "value": 4, "phase": "both"}
    assert any("sequences in flight: not given" in line for line in result["assumptions"])


def test_cli_refuses_an_unreadable_constraint_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    done = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpus", "2", "--constraint", "tp<<2")
    assert done.returncode == 2
    assert "constraint" in done.stderr and "Traceback" not in done.stderr


def test_tools_take_constraints_and_state_assumptions() -> None:
    args = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 4, "isl": 512, "osl": 64}
    summary = capabilities.search_strategies(**args, constraints=["tp=2"])
    assert summary.candidates and all("tp=2" in c.strategy for c in summary.candidates)
    check = capabilities.propose_strategy(**args, constraints=["tp=2"], strategy="tp=4")
    assert "breaks the constraint tp=2" in check.constraint_breaks and not check.meets_targets
    planned = capabilities.plan(**args, batch=4, constraints=["pp=1", "tp<=1"], detail=True)  # 4 replicas: 4 sequences
    assert planned.plan is not None and planned.plan.strategy is not None and planned.plan.strategy.decode.tp == 1
    assert not any(line.startswith("batch") for line in planned.assumptions)
    assert not any(line.startswith("prompt length") for line in planned.assumptions)
    with pytest.raises(InputError) as caught:
        capabilities.plan(**args, constraints=["warp=9"])
    assert caught.value.field == "constraint"


def test_the_examples_in_the_docstrings_run() -> None:
    import doctest

    from shardplan.contracts import constraints as contract
    from shardplan.evals import readings
    from shardplan.tools.catalogs import model_names
    from shardplan.tools.planning import assumptions
    from shardplan.tools.search import constraint_checks

    for module in (contract, constraint_checks, model_names, assumptions, readings):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_constraints_that_leave_more_attention_groups_than_sequences_say_so_not_memory() -> None:
    model, cluster = load_model("deepseek-ai/DeepSeek-V3"), make_cluster("H200", 8)
    only_adp8 = parse_constraints(["adp=8"])
    with pytest.raises(InfeasibleError) as caught:
        search(model, cluster, Workload(isl=1024, osl=128, batch=2), constraints=only_adp8)
    assert "need at least 8 sequences" in str(caught.value) and "give a batch of 8 or more" in str(caught.value)
    assert "memory" not in str(caught.value)
    # a batch that fills the groups is served
    assert search(model, cluster, Workload(isl=1024, osl=128, batch=8), constraints=only_adp8).candidates
