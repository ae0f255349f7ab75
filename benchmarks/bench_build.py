"""How fast the DAG builder is: nodes, edges and seconds (best of N) for three reference cases.

Run ``.venv/bin/python benchmarks/bench_build.py [--repeat 3]``; it prints a markdown table. The target
is the DeepSeek-V3 case (prefill EP64 with SP and two microbatches) in under 2 s.
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import dataclass

from shardplan.tools.builder import build_dag
from shardplan.tools.contracts import DAG, Workload, parse_strategy
from shardplan.tools.hardware import make_cluster
from shardplan.tools.models import load_model


@dataclass(frozen=True)
class Case:
    """One build to time."""

    label: str
    model: str
    gpus: int
    strategy: str
    workload: Workload


CASES = [
    Case(
        "Llama-3.1-8B TP2 PP2",
        "meta-llama/Llama-3.1-8B",
        4,
        "tp=2,pp=2",
        Workload(isl=2048, osl=256, batch=8),
    ),
    Case(
        "Llama-3.1-405B TP8 PP2",
        "meta-llama/Llama-3.1-405B",
        16,
        "tp=8,pp=2",
        Workload(isl=2048, osl=256, batch=8),
    ),
    Case(
        "DeepSeek-V3 SP8 TP8 EP64 mb2 / ADP8 TP8 EP64",
        "deepseek-ai/DeepSeek-V3",
        64,
        "prefill:sp=8,tp=8,ep=64,mb=2;decode:adp=8,tp=8,ep=64",
        Workload(isl=4096, osl=512, batch=64),
    ),
]


def time_case(case: Case, repeat: int) -> tuple[DAG, float]:
    """The DAG of ``case`` and the best wall time of ``repeat`` builds (model and cluster loaded once)."""
    model = load_model(case.model)
    cluster = make_cluster("H100", case.gpus)
    strategy = parse_strategy(case.strategy)
    best, dag = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        dag = build_dag(model, cluster, strategy, case.workload)
        best = min(best, time.perf_counter() - start)
    assert dag is not None
    return dag, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="builds per case; the best time is reported")
    args = parser.parse_args()
    print(f"| case | GPUs | strategy | nodes | edges | seconds (best of {args.repeat}) |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for case in CASES:
        dag, seconds = time_case(case, args.repeat)
        print(
            f"| {case.label} | {case.gpus} | `{case.strategy}` | {len(dag.nodes):,} | {len(dag.edges):,} "
            f"| {seconds:.3f} |"
        )


if __name__ == "__main__":
    main()
