"""Attention-DP ranks under chunked prefill: the simulated ranks beside the analytic rules that price them.

Run: .venv/bin/python benchmarks/bench_adp_ranks.py [--requests N] [--quick]

Each case is one replica of 8 GPUs of an MoE model laid out as ``adp=R,tp=8/R,ep=8`` (attention data-parallel
ranks of R, the experts spread over all 8 GPUs), serving prompts of 2,048 tokens and outputs of 256 under
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
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.at_rate import load_for_rate
from shardplan.tools.serving.attention_dp import RankRule
from shardplan.tools.serving.options import priced_deployment
from shardplan.tools.serving.steady import ServingPoint, continuous_point
from shardplan.tools.serving.steps import StepPricer
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


def point_under(pricer: StepPricer, concurrency: float, rule: RankRule) -> ServingPoint | None:
    """The serving model's steady state at ``concurrency`` with the ranks' chunks spread by ``rule``."""
    return continuous_point(pricer, concurrency, WORK, rule)


def at_rate(pricer: StepPricer, rate: float, rule: RankRule, most: float) -> tuple[float, float]:
    """Mean TTFT and TPOT in ms of ``rule`` at ``rate`` requests/s (NaN where the rule cannot serve it)."""

    def served(load: float) -> float | None:
        point = point_under(pricer, load, rule)
        return point.requests_per_s if point is not None else None

    load = load_for_rate(served, rate, 1.0, most)
    point = point_under(pricer, load, rule) if load is not None else None
    if point is None:
        return float("nan"), float("nan")
    return point.ttft_s * 1e3, point.tpot_s * 1e3


def run_case(name: str, gpu: str, ranks: int, per_rank: int, requests: int) -> Case:
    model, cluster = load_model(name), make_cluster(gpu, 8)
    strategy = parse_strategy(f"adp={ranks},tp={8 // ranks},ep=8")
    layout = strategy.decode.model_copy(update={"dp": 1})
    pricer = StepPricer.for_workload(model, cluster, layout, WORK)
    chosen = point_under(pricer, ranks * per_rank, "independent")
    assert chosen is not None
    rate = chosen.requests_per_s
    deployment = priced_deployment(
        strategy, WORK, cluster, budget=8, concurrency=ranks * per_rank, worker_concurrency=ranks * per_rank,
        ttft_ms=chosen.ttft_s * 1e3, tpot_ms=chosen.tpot_s * 1e3, requests_per_s=rate, memory=(0.0, True),
    )
    options = SimulationOptions(max_num_seqs=100_000)  # no sequence cap: the load alone decides the batch
    summary = simulate(model, cluster, deployment, WORK, requests=requests, rate=rate, seed=1, options=options).summary
    rules = {rule: at_rate(pricer, rate, rule, 8.0 * ranks * per_rank) for rule in RULES}
    return Case(name, ranks, per_rank, rate, (summary.figures.ttft_ms, summary.figures.tpot_ms), rules)


def _error(value: float, truth: float) -> float:
    return (value - truth) / truth * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--quick", action="store_true", help="one model, attention-DP 8 only")
    args = parser.parse_args()
    models, ranks_list = (MODELS[:1], (8,)) if args.quick else (MODELS, RANKS)
    began = time.perf_counter()
    print(f"isl {WORK.isl}, osl {WORK.osl}, Poisson arrivals, {args.requests:,} requests per simulation; "
          "mean TTFT / TPOT in ms, each rule's error against the simulated mean")
    print("| model | adp | seqs/rank | req/s | simulated | " + " | ".join(RULES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(RULES))
    cases = []
    for name, gpu in models:
        for ranks in ranks_list:
            for per_rank in PER_RANK:
                case = run_case(name, gpu, ranks, per_rank, args.requests)
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
