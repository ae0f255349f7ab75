"""The analytic steady state against the engine simulator: mean TTFT and TPOT of the same replica at the same rate.

Run: .venv/bin/python benchmarks/bench_analytic_vs_simulated.py [--requests N] [--match TEXT] [--engine E] [--json FILE]
Issue 23: improve the analytic model from the simulator, not the other way round; this prints where they agree.

Each scenario is one replica (Llama-3.1-8B on one H100, Llama-3.1-70B on four at tp=4, Qwen3-30B-A3B on one
H200), fixed prompt and output lengths, Poisson arrivals at 30, 50, 70 and 85% of the most the replica serves (its
steady state's rate with as many sequences as its KV cache holds). The analytic figures are the plan's at that rate
(``shardplan plan -s SPEC --rate R``: the load Little's law puts on the replica, its steady state); the simulated
ones are ``shardplan simulate plan.json --rate R`` with N requests, the first tenth left out (the queue's start
from empty). Both price steps with the same step pricer, so the errors are those of the analytic model's
dynamics: queueing for the step budget, the steps that carry prompt chunks, the decoders' share of them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.aggregated import replica_capacity
from shardplan.tools.serving.deployments import given_deployment
from shardplan.tools.serving.steady import serving_point
from shardplan.tools.serving.steps import StepPricer
from shardplan.tools.simulation.results import latencies
from shardplan.tools.simulation.run import simulate

SETUPS = (("llama-3.1-8b", "H100", 1, "tp=1"), ("llama-3.1-70b", "H100", 4, "tp=4"),
          ("qwen3-30b-a3b", "H200", 1, "tp=1"))
LENGTHS = ((1024, 256), (4096, 512), (256, 1024), (8192, 256))
LOADS = (0.3, 0.5, 0.7, 0.85)


@dataclass
class Scenario:
    """One replica at one load: the analytic and simulated mean TTFT and TPOT (ms)."""

    name: str
    load: float
    rate: float
    analytic_ttft_ms: float
    simulated_ttft_ms: float
    analytic_tpot_ms: float
    simulated_tpot_ms: float

    def error(self, metric: str) -> float:
        """Signed error of the analytic mean, in % of the simulated one."""
        analytic, simulated = getattr(self, f"analytic_{metric}_ms"), getattr(self, f"simulated_{metric}_ms")
        return (analytic - simulated) / simulated * 100.0


def scenarios(requests: int, match: str | None, engine: str = "vllm") -> list[Scenario]:
    """Every setup, length and load of the grid (those whose name contains ``match``), planned then simulated, under
    ``engine``'s scheduler (SGLang's runs prompt steps apart from decode steps)."""
    found = []
    for model_name, gpu, gpus, spec in SETUPS:
        model, cluster, strategy = load_model(model_name), make_cluster(gpu, gpus), parse_strategy(spec)
        for isl, osl in LENGTHS:
            name = f"{model_name} {gpus}x{gpu} {spec} {isl}/{osl}"
            if match and match not in name:
                continue
            workload = Workload(isl=isl, osl=osl, engine=engine)  # type: ignore[arg-type]
            limit = min(replica_capacity(model, cluster, strategy.decode, workload), workload.max_batched_tokens - 1)
            pricer = StepPricer.for_workload(model, cluster, strategy.decode, workload)
            fullest = serving_point(pricer, limit, workload)
            assert fullest is not None
            for load in LOADS:
                rate = load * fullest.requests_per_s
                at_rate = workload.model_copy(update={"rate": rate})
                plan = next(o for o in given_deployment(model, cluster, strategy, at_rate)
                            if o.figures.requests_per_s >= rate * 0.999)
                run = simulate(model, cluster, plan, at_rate, requests=requests, rate=rate)
                measured = latencies(run.requests)
                kept = slice(requests // 10, None)
                found.append(Scenario(name, load, rate, plan.figures.ttft_ms,
                                      float(np.nanmean(measured.ttft_ms[kept])), plan.figures.tpot_ms,
                                      float(np.nanmean(measured.tpot_ms[kept]))))
                print(_row(found[-1]), flush=True)
    return found


def _row(s: Scenario) -> str:
    ttft = f"{s.analytic_ttft_ms:,.1f} | {s.simulated_ttft_ms:,.1f} | {s.error('ttft'):+.1f}%"
    tpot = f"{s.analytic_tpot_ms:.2f} | {s.simulated_tpot_ms:.2f} | {s.error('tpot'):+.1f}%"
    return f"| {s.name} | {s.load:.0%} | {s.rate:.3g} | {ttft} | {tpot} |"


def summary(found: list[Scenario]) -> dict[str, float]:
    """Median and largest |error| of each metric, over every scenario and over those at 70% load or less."""
    out: dict[str, float] = {}
    for part, chosen in (("all", found), ("to_70", [s for s in found if s.load <= 0.7])):
        for metric in ("ttft", "tpot"):
            errors = [abs(s.error(metric)) for s in chosen]
            out[f"{part}_{metric}_median_abs_pct"] = statistics.median(errors)
            out[f"{part}_{metric}_max_abs_pct"] = max(errors)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests simulated per scenario (default 5000)")
    parser.add_argument("--match", help="only the setups whose name contains TEXT")
    parser.add_argument("--engine", choices=("vllm", "sglang", "trtllm"), default="vllm",
                        help="the engine whose scheduler both model (default vllm)")
    parser.add_argument("--json", type=Path, help="also write the scenarios and the summary to FILE")
    args = parser.parse_args(argv)
    print("Analytic steady state vs simulated mean (Poisson arrivals, fixed lengths), error in % of the simulated:\n")
    print("| replica, isl/osl | load | req/s | TTFT analytic | simulated | err | TPOT analytic | simulated | err |")
    print("|---|---|---|---|---|---|---|---|---|")
    found = scenarios(args.requests, args.match, args.engine)
    if not found:
        print("no scenario matches")
        return 1
    figures = summary(found)
    for part, label in (("all", f"all {len(found)} scenarios"), ("to_70", "loads up to 70%")):
        print(f"\n{label}: |error| TTFT median {figures[f'{part}_ttft_median_abs_pct']:.1f}%, largest "
              f"{figures[f'{part}_ttft_max_abs_pct']:.1f}%; TPOT median {figures[f'{part}_tpot_median_abs_pct']:.1f}%, "
              f"largest {figures[f'{part}_tpot_max_abs_pct']:.1f}%", end="")
    print()
    if args.json:
        args.json.write_text(json.dumps({"scenarios": [asdict(s) for s in found], "summary": figures}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
