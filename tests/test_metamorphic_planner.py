"""Metamorphic relations of the planner: one request written two ways gets one answer (on every surface), a looser
request never gets a worse best deployment, and the simulator meets the serving model's prices where the two must
agree.

Relations that do not hold exactly, and are left out on purpose:

* doubling the replicas at the same load per replica does not give the same simulated percentiles: round robin
  splits a Poisson stream into smoother streams (P99 TTFT of Llama-3.1-8B at 2 requests/s: 47 ms on one replica,
  30 ms on two at 4 requests/s), and a closed loop of identical requests, in lockstep on one replica, falls out of
  step on two when their clocks differ by a rounding;
* a simulated single request under pipeline parallelism decodes a little faster than the steady state's round at
  one sequence (Llama-3.1-8B pp=2: 6.38 against 6.45 ms), which spreads the sequence over the stages' lanes.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_here
from hypothesis import given, settings
from hypothesis import strategies as st

from shardplan.agent.parse.plan_request import to_plan_request
from shardplan.agent.parse.request import parse_request
from shardplan.contracts.figures import Figures
from shardplan.contracts.plan import Plan, PlanRequest, PricedDeployment
from shardplan.contracts.speculation import Speculation
from shardplan.contracts.strategy import PhaseStrategy, Strategy, parse_strategy
from shardplan.contracts.traffic import FixedLength, GammaArrivals, LognormalLength, Traffic
from shardplan.contracts.workload import Workload
from shardplan.tools.api import capabilities
from shardplan.tools.api.registry import dump
from shardplan.tools.api.request_args import RequestArgs
from shardplan.tools.planning.deployment import best_option
from shardplan.tools.planning.planner import plan, resolve_request, review
from shardplan.tools.search.deployments import search
from shardplan.tools.search.simulated import needs_simulation
from shardplan.tools.serving.placement import occupied_cluster, replica_strategy
from shardplan.tools.serving.steps import StepPricer
from shardplan.tools.simulation.run import simulate

SMALL = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 2, "osl": 256, "tpot_ms": 20.0}


@cache
def planned(**arguments: Any) -> Plan:
    """The plan of the API's (and MCP's) arguments, as the ``plan`` tool makes it."""
    return plan(RequestArgs(**arguments).to_request())


def same_answer(a: Plan, b: Plan) -> None:
    assert (a.status, a.strategy, a.deployment is not None) == (b.status, b.strategy, b.deployment is not None)
    assert a.figures == b.figures
    assert a.deployment is not None and b.deployment is not None
    assert (a.deployment.concurrency, a.deployment.replicas, a.deployment.gpus_used) == (
        b.deployment.concurrency, b.deployment.replicas, b.deployment.gpus_used)


# ------------------------------------------------------------------------------------------------- one request


@pytest.mark.parametrize(
    "written",
    [{"isl_dist": "fixed:1024"}, {"isl": 1024, "isl_dist": "fixed:1024"}, {"isl": 1024, "osl_dist": "fixed:256"},
     {"isl": 1024, "arrival": "poisson"}, {"isl": 1024, "prefix_hit": 0.0}],
)
def test_a_request_written_another_way_gets_the_same_plan(written: dict[str, Any]) -> None:
    # A fixed distribution at a length is that length, Poisson arriving: the steady state prices it, and nothing is
    # simulated (a fixed:1024 was once simulated as a lockstep closed loop and planned dp=1, TTFT 423 ms, where
    # --isl 1024 planned dp=2, TTFT 59 ms).
    base = planned(**SMALL, isl=1024)
    other = planned(**{**SMALL, **written})
    same_answer(base, other)
    assert other.figures is not None and other.figures.source == "steady_state" and other.simulation is None


def test_only_traffic_beyond_the_priced_request_is_simulated() -> None:
    fixed = Traffic(isl=FixedLength(kind="fixed", tokens=1024), osl=FixedLength(kind="fixed", tokens=256))
    assert not needs_simulation(Workload(isl=1024, osl=256, traffic=fixed))
    # A fixed length other than the one priced (within the 10% a given length may differ), a distribution,
    # bursts, or a percentile target: the steady state's means do not stand for them.
    assert needs_simulation(Workload(isl=1000, osl=256, traffic=fixed))
    spread = Traffic(isl=LognormalLength(kind="lognormal", mean=1024, cv=0.5))
    assert needs_simulation(Workload(isl=1024, osl=256, traffic=spread))
    assert needs_simulation(Workload(isl=1024, osl=256, traffic=Traffic(arrival=GammaArrivals(kind="gamma", cv=3))))
    assert needs_simulation(Workload(isl=1024, osl=256, slo_percentile="p99"))


@pytest.mark.parametrize(
    ("arguments", "argv"),
    [
        ({"isl": 1024, "tpot_ms": 20.0}, ["--isl", "1024", "--tpot-ms", "20"]),
        ({"isl": 2048, "rate": 5.0, "tpot_ms": 20.0, "gpus": 4},
         ["--isl", "2048", "--rate", "5", "--tpot-ms", "20", "--gpus", "4"]),
        ({"isl_dist": "fixed:1024", "prefix_hit": 0.3}, ["--isl-dist", "fixed:1024", "--prefix-hit", "0.3"]),
    ],
)
def test_the_api_and_the_command_line_answer_one_request_alike(
    arguments: dict[str, Any], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # The same defaults on every surface: the API once planned a request with targets for latency ("objective
    # latency: not given (no targets given)") where the command line planned it for throughput.
    request = {**SMALL, **arguments}
    api = dump(capabilities.plan(**request, detail=True))["plan"]
    cli = ["plan", "-m", SMALL["model"], "--gpu", SMALL["gpu"], "--gpus", str(request["gpus"]), "--osl", "256"]
    if "tpot_ms" not in arguments:
        cli += ["--tpot-ms", "20"]
    done = run_here(capsys, *cli, *argv, "--json")
    assert done.returncode == 0, done.stderr
    here = json.loads(done.stdout)
    assert api["request"]["workload"] == here["request"]["workload"]
    assert api["request"]["workload"]["objective"] == "throughput"
    assert sorted(api["assumptions"]) == sorted(here["assumptions"])
    assert (api["strategy"], api["figures"], api["status"]) == (here["strategy"], here["figures"], here["status"])


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        ("llama 3.1 8b on 2 H100, 1k prompts, 256-token outputs, 5 requests per second", {"rate": 5.0}),
        ("llama 3.1 8b on 2 H100, 1k prompts, 256-token outputs, TPOT under 20 ms", {"tpot_ms": 20.0}),
        ("llama 3.1 8b on 2 H100, 1k prompts, 256-token outputs", {}),
    ],
)
def test_chat_reads_a_request_as_the_api_takes_it(text: str, arguments: dict[str, Any]) -> None:
    # Chat once left a rate out of the default objective: latency for "5 requests per second" where the command
    # line and the API plan for throughput.
    read = to_plan_request(parse_request(text)).workload
    taken = RequestArgs(model="llama-3.1-8b", gpu="H100", gpus=2, isl=1024, osl=256, **arguments).to_request().workload
    assert read == taken


@pytest.mark.parametrize(
    "request_",
    [
        PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=2,
                    workload=Workload(isl=1024, osl=256, tpot_ms=20, objective="throughput")),
        PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=4,
                    workload=Workload(isl=4096, osl=256, ttft_ms=500, tpot_ms=15, objective="throughput")),
        PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=4,
                    workload=Workload(isl=2048, osl=128, rate=5, tpot_ms=20, objective="throughput")),
        PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=4, workload=Workload(isl=2048, osl=128, batch=32)),
    ],
    ids=["dense", "split", "rate", "batch"],
)
def test_reviewing_the_chosen_deployment_gives_the_plan_its_figures(request_: PlanRequest) -> None:
    chosen = plan(request_)
    assert chosen.strategy is not None
    reviewed = review(request_, chosen.strategy)
    same_answer(chosen, reviewed)


def test_a_plan_file_costs_as_its_own_dag_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.json"
    made = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpu", "H100", "--gpus", "4", "--isl", "2048",
                    "--osl", "128", "--batch", "32", "--prefix-hit", "0.5", "-o", str(path))
    assert made.returncode == 0, made.stderr
    costed = run_here(capsys, "cost", str(path), "--json")
    assert costed.returncode == 0, costed.stderr
    assert json.loads(costed.stdout)["figures"] == json.loads(path.read_text())["dag_cost"]["figures"]


@st.composite
def phases(draw: st.DrawFn) -> PhaseStrategy:
    """A phase whose degrees compose: ``ep`` divides the stage's ``adp x tp`` GPUs."""
    tp, adp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2]))
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if (adp * tp) % e == 0]))
    return PhaseStrategy(dp=draw(st.sampled_from([1, 2])), pp=draw(st.sampled_from([1, 2, 4])), adp=adp, tp=tp, ep=ep,
                         mb=draw(st.sampled_from([1, 2])))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(prefill=phases(), decode=phases(), split=st.booleans(), seed=st.integers(0, 1000))
def test_a_strategy_reads_the_same_in_any_order(
    prefill: PhaseStrategy, decode: PhaseStrategy, split: bool, seed: int
) -> None:
    if not split:  # shared GPUs: one replica count
        decode = decode.model_copy(update={"dp": prefill.dp})
    strategy = Strategy(prefill=prefill, decode=decode, disaggregated=split)
    spec = strategy.to_spec()
    assert parse_strategy(spec) == strategy
    shuffle = random.Random(seed).shuffle
    parts = spec.split(";")
    for i, part in enumerate(parts):
        head, _, body = part.rpartition(":")
        items = body.split(",")
        shuffle(items)
        parts[i] = f"{head}:{','.join(items)}" if head else ",".join(items)
    shuffle(parts)
    assert parse_strategy(";".join(parts)) == strategy


# ------------------------------------------------------------------------------------------------------- search


@cache
def best(model: str, gpus: int, **workload: Any) -> PricedDeployment:
    """The search's best deployment, for the throughput objective unless told (what ``plan`` starts from)."""
    sized = Workload(**{"objective": "throughput", **workload})
    request = PlanRequest(model=model, gpu="H100", gpus=gpus, workload=sized)
    resolved, cluster = resolve_request(request)
    return search(resolved, cluster, request.workload, top=3).candidates[0]


def _no_worse(before: Figures, after: Figures, met_before: bool, met_after: bool) -> bool:
    return not met_before or (met_after and after.tokens_per_s_per_budget_gpu >= before.tokens_per_s_per_budget_gpu)


@pytest.mark.parametrize(
    ("model", "gpus", "isl", "osl"), [("llama-3.1-8b", 2, 1024, 256), ("qwen3-30b-a3b", 2, 1024, 512)]
)
def test_a_looser_target_never_gets_a_worse_best(model: str, gpus: int, isl: int, osl: int) -> None:
    # Every deployment that meets a target meets a looser one: the best can only gain.
    for name, values in (("tpot_ms", [8.0, 12.0, 20.0, 30.0, 50.0]), ("ttft_ms", [50.0, 100.0, 200.0, 1000.0])):
        runs = [best(model, gpus, isl=isl, osl=osl, **{name: v}) for v in values]
        for a, b in zip(runs, runs[1:], strict=False):
            assert _no_worse(a.figures, b.figures, a.meets_targets, b.meets_targets), (name, a.spec, b.spec)


@pytest.mark.parametrize("targets", [{"tpot_ms": 10.0}, {"tpot_ms": 20.0, "ttft_ms": 500.0}])
def test_more_gpus_never_lower_the_best_tokens_per_budget_gpu(targets: dict[str, float]) -> None:
    # GPUs are a budget: N GPUs' best, replicated, is one of 2N's deployments at the same tokens/s per budget GPU
    # (the nodes here hold the whole budget).
    runs = [best("llama-3.1-8b", n, isl=2048, osl=256, **targets) for n in (1, 2, 4)]
    for a, b in zip(runs, runs[1:], strict=False):
        assert _no_worse(a.figures, b.figures, a.meets_targets, b.meets_targets), (a.spec, b.spec)


def test_a_higher_rate_never_needs_fewer_gpus_and_more_prefix_hits_never_more() -> None:
    model, targets = "llama-3.1-8b", {"tpot_ms": 20.0}
    by_rate = [best(model, 4, isl=2048, osl=256, rate=r, **targets) for r in (0.5, 2.0, 8.0, 32.0)]
    for a, b in zip(by_rate, by_rate[1:], strict=False):
        assert not b.meets_targets or (a.meets_targets and a.figures.gpus_used <= b.figures.gpus_used)
    by_hit = [best(model, 4, isl=4096, osl=256, rate=16.0, prefix_hit=h, **targets) for h in (0.0, 0.5, 0.9)]
    for a, b in zip(by_hit, by_hit[1:], strict=False):
        assert not a.meets_targets or (b.meets_targets and b.figures.gpus_used <= a.figures.gpus_used)


# ---------------------------------------------------------------------------------------------------- simulator


@pytest.mark.parametrize(
    ("gpu", "gpus", "spec", "extra"),
    [
        ("H100", 1, "tp=1", {}),
        ("H100", 2, "dp=2", {}),
        ("MI300X", 1, "tp=1", {}),
        ("H100", 1, "tp=1", {"isl": 20_000}),  # three chunks of the step budget
        ("H100", 1, "tp=1", {"prefix_hit": 0.5}),
        ("H100", 1, "tp=1", {"speculation": Speculation(method="eagle", draft_tokens=2, accepted=2)}),
        ("H100", 1, "tp=1", {"speculation": Speculation(method="eagle", draft_tokens=3, accepted=1.5)}),
    ],
)
def test_a_lone_request_is_simulated_at_the_serving_models_step_prices(
    gpu: str, gpus: int, spec: str, extra: dict[str, Any]
) -> None:
    # Far below capacity a request meets an idle replica: its TTFT is its prompt's chunk passes, its TPOT one
    # sequence's step over the tokens a step emits, both as the serving model prices them; the replicas of a
    # deployment see the same, whatever their number.
    workload = Workload(**{"isl": 1024, "osl": 128, "batch": gpus, **extra})
    request = PlanRequest(model="llama-3.1-8b", gpu=gpu, gpus=gpus, workload=workload)
    model, cluster = resolve_request(request)
    strategy = parse_strategy(spec)
    priced = best_option(model, cluster, strategy, workload)
    assert priced is not None
    rate = 0.01 * strategy.decode.dp / (priced.figures.e2e_ms / 1000)
    run = simulate(model, cluster, priced, workload.model_copy(update={"batch": None, "rate": rate}),
                   requests=150, rate=rate, seed=1).summary.figures.percentiles
    replica = replica_strategy(strategy)
    pricer = StepPricer.for_workload(model, occupied_cluster(cluster, replica), replica.decode, workload)
    full, rest = divmod(workload.prefill_tokens, workload.max_batched_tokens)
    chunks = full * pricer.chunk_pass_s(0, workload.max_batched_tokens) + (pricer.chunk_pass_s(0, rest) if rest else 0)
    assert run["ttft"].p50_ms == pytest.approx(chunks * 1e3, rel=1e-6)
    # A request takes whole steps: (osl - 1) / (A + 1) of them, the last one rounded up.
    steps = -(-(workload.osl - 1) // pricer.tokens_per_step)
    rounding = (steps - (workload.osl - 1) / pricer.tokens_per_step) * pricer.step_s(1, 0) / (workload.osl - 1)
    assert run["tpot"].p50_ms == pytest.approx(pricer.tpot_s(1) * 1e3 + rounding * 1e3, rel=1e-6)


@pytest.mark.parametrize("rate", [8.0, 32.0])
def test_under_a_rate_the_objective_leaves_the_best_alone(rate: float) -> None:
    # A rate is ranked by the fewest GPUs, then the request latency, whatever the objective; the latency
    # objective once left split pools out of the search, and at 32 requests/s on up to 4 H100 planned tp=2
    # (request latency 3.71 s) where a split pair on the same 2 GPUs serves it in 3.24 s.
    runs = [best("llama-3.1-8b", 4, isl=1024, osl=256, rate=rate, tpot_ms=20.0, objective=objective)
            for objective in ("latency", "throughput", "goodput")]
    assert all(r.strategy == runs[0].strategy and r.figures == runs[0].figures for r in runs)
