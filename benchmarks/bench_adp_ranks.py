"""Attention-DP ranks under chunked prefill: the simulated ranks beside the analytic rules that price them.

Run: .venv/bin/python benchmarks/bench_adp_ranks.py [--requests N] [--quick] [--isl N] [--closed]

Each case is one replica of 8 GPUs of an MoE model laid out as ``adp=R,tp=8/R,ep=8`` (attention data-parallel
ranks of R, the experts spread over all 8 GPUs), serving prompts of 2,048 tokens (``--isl``) and outputs of 256 under
continuous batching with chunked prefill (8,192 tokens a step per rank). The load is set by the sequences each
rank carries in steady state under the chosen rule (2 to 32); the rate that gives them is replayed through the
simulator (:mod:`shardplan.tools.simulation.ranks`: one scheduler per rank, requests to the least loaded rank,
each step priced from every rank's own load), Poisson arrivals, fixed lengths, and every analytic rule
(:mod:`shardplan.tools.serving.attention_dp`) is solved at that same rate:

* ``independent`` (the rule the serving model uses): the ranks' schedulers are independent and the steps
  couple them: the ranks carrying a chunk in a step are the prompts that arrived during the step before;
* ``binomial``: each rank carries a chunk in a step independently of the others and of the step lengths;
* ``lockstep`` (AIConfigurator's): every rank carries its chunk in the same steps.

The step prices are the same in all four (the serving model's step pricer, measured tables where they
exist), so the columns differ only in how the ranks' chunks fall into steps. Each figure is the mean TTFT or
TPOT in ms; the percentage is the rule's error against the simulated mean.

``--closed``: a closed loop of ``R x s`` clients instead (each sends its next request when its last completes,
as benchmark clients do), outputs drawn from 128 to 384 tokens so the clients do not run in lockstep, every rule
solved at that fixed concurrency; the first tenth of the requests and the last round are left out of the means.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import numpy as np

from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.traffic import Traffic, parse_arrival, parse_length
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.at_rate import load_for_rate
from shardplan.tools.serving.attention_dp import RankRule
from shardplan.tools.serving.options import priced_deployment
from shardplan.tools.serving.steady import ServingPoint, continuous_point
from shardplan.tools.serving.steps import StepPricer
from shardplan.tools.simulation.results import latencies
from shardplan.tools.simulation.run import SimulationOptions, simulate

MODELS = (("qwen3-30b-a3b", "H100"), ("qwen3-235b-a22b", "H200"), ("deepseek-v3", "H200"), ("mixtral-8x7b", "H100"))
RANKS = (2, 4, 8)
PER_RANK = (2, 8, 16, 32)
RULES: tuple[RankRule, ...] = ("independent", "binomial", "lockstep")
WORK = Workload(isl=2048, osl=256)


@dataclass(frozen=True)
class Case:
    model: str
    ranks: int
    per_rank: int
    rate: float
    simulated: tuple[float, float]
    rules: dict[str, tuple[float, float]]


def point_under(
    pricer: StepPricer, concurrency: float, rule: RankRule, work: Workload, rate: float | None = None
) -> ServingPoint | None:
    """The serving model's steady state at ``concurrency`` with the ranks' chunks spread by ``rule``: requests
    arriving at ``rate`` (Poisson), or without one a closed population of ``concurrency``."""
    return continuous_point(pricer, concurrency, work.model_copy(update={"rate": rate}), rule)


def _ms(point: ServingPoint | None) -> tuple[float, float]:
    return (point.ttft_s * 1e3, point.tpot_s * 1e3) if point is not None else (float("nan"), float("nan"))


def at_rate(pricer: StepPricer, rate: float, rule: RankRule, most: float, work: Workload) -> tuple[float, float]:
    """Mean TTFT and TPOT in ms of ``rule`` at ``rate`` requests/s (NaN where the rule cannot serve it)."""

    def served(load: float) -> float | None:
        point = point_under(pricer, load, rule, work, rate)
        return point.requests_per_s if point is not None else None

    load = load_for_rate(served, rate, 1.0, most)
    return _ms(point_under(pricer, load, rule, work, rate) if load is not None else None)


def run_case(name: str, gpu: str, ranks: int, per_rank: int, requests: int, work: Workload, closed: bool) -> Case:
    model, cluster = load_model(name), make_cluster(gpu, 8)
    strategy = parse_strategy(f"adp={ranks},tp={8 // ranks},ep=8")
    layout = strategy.decode.model_copy(update={"dp": 1})
    pricer = StepPricer.for_workload(model, cluster, layout, work)
    clients = ranks * per_rank
    chosen = point_under(pricer, clients, "independent", work)
    assert chosen is not None
    rate = chosen.requests_per_s
    deployment = priced_deployment(
        strategy, work, cluster, budget=8, concurrency=clients, worker_concurrency=clients,
        ttft_ms=chosen.ttft_s * 1e3, tpot_ms=chosen.tpot_s * 1e3, requests_per_s=rate, memory=(0.0, True),
    )
    options = SimulationOptions(max_num_seqs=100_000)  # no sequence cap: the load alone decides the batch
    if closed:
        loop = work.model_copy(update={"traffic": Traffic(arrival=parse_arrival(f"closed:{clients}"),
                                                          osl=parse_length("uniform:128,384"))})
        total = max(requests, 20 * clients)
        run = simulate(model, cluster, deployment, loop, requests=total, seed=1, options=options)
        kept = run.requests.finish.argsort()[total // 10: total - clients]
        measured = latencies(run.requests)
        simulated = (float(np.nanmean(measured.ttft_ms[kept])), float(np.nanmean(measured.tpot_ms[kept])))
        rules = {rule: _ms(point_under(pricer, clients, rule, work)) for rule in RULES}
        return Case(name, ranks, per_rank, total / float(run.requests.finish.max()), simulated, rules)
    summary = simulate(model, cluster, deployment, work, requests=requests, rate=rate, seed=1, options=options).summary
    rules = {rule: at_rate(pricer, rate, rule, 8.0 * clients, work) for rule in RULES}
    return Case(name, ranks, per_rank, rate, (summary.figures.ttft_ms, summary.figures.tpot_ms), rules)


def _error(value: float, truth: float) -> float:
    return (value - truth) / truth * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--quick", action="store_true", help="one model, attention-DP 8 only")
    parser.add_argument("--isl", type=int, default=WORK.isl, help="prompt tokens (8,192 takes two chunks a prompt)")
    parser.add_argument("--closed", action="store_true", help="a closed loop of clients instead of Poisson arrivals")
    args = parser.parse_args()
    work = WORK.model_copy(update={"isl": args.isl})
    models, ranks_list = (MODELS[:1], (8,)) if args.quick else (MODELS, RANKS)
    began = time.perf_counter()
    arrivals = "closed loops (outputs 128 to 384)" if args.closed else "Poisson arrivals"
    print(f"isl {work.isl}, osl {work.osl}, {arrivals}, {args.requests:,} requests per simulation (at least 20 a "
          "client); mean TTFT / TPOT in ms, each rule's error against the simulated mean")
    print("| model | adp | seqs/rank | req/s | simulated | " + " | ".join(RULES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(RULES))
    cases = []
    for name, gpu in models:
        for ranks in ranks_list:
            for per_rank in PER_RANK:
                case = run_case(name, gpu, ranks, per_rank, args.requests, work, args.closed)
                cases.append(case)
                cells = [
                    f"{ttft:.1f} ({_error(ttft, case.simulated[0]):+.0f}%) / {tpot:.2f} "
                    f"({_error(tpot, case.simulated[1]):+.0f}%)"
                    for ttft, tpot in (case.rules[rule] for rule in RULES)
                ]
                print(f"| {name} | {ranks} | {per_rank} | {case.rate:.2f} | {case.simulated[0]:.1f} / "
                      f"{case.simulated[1]:.2f} | " + " | ".join(cells) + " |", flush=True)
    print()
    print("| rule | TTFT mean abs error | TTFT worst | TPOT mean abs error | TPOT worst |")
    print("|---|---|---|---|---|")
    for rule in RULES:
        errors = [(_error(c.rules[rule][0], c.simulated[0]), _error(c.rules[rule][1], c.simulated[1])) for c in cases]
        ttft, tpot = [e[0] for e in errors], [e[1] for e in errors]
        print(f"| {rule} | {statistics.mean(map(abs, ttft)):.1f}% | {max(ttft, key=abs):+.1f}% | "
              f"{statistics.mean(map(abs, tpot)):.1f}% | {max(tpot, key=abs):+.1f}% |")
    print(f"\n{len(cases)} cases in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
