"""How fast the DAG builder is: nodes, edges and seconds (best of N) for three reference cases.

Run ``.venv/bin/python benchmarks/bench_build.py [--repeat 3]``; it prints a markdown table. The target
is the DeepSeek-V3 case (prefill EP64 with SP and two microbatches) in under 2 s.
"""

from __future__ import annotations

import argparse
import gc
import time

from cases import DEEPSEEK_64, LLAMA_8B, LLAMA_405B, Case

from shardplan.contracts.dag import DAG
from shardplan.tools.builder.build import build_dag

CASES = [LLAMA_8B, LLAMA_405B, DEEPSEEK_64]


def time_case(case: Case, repeat: int) -> tuple[DAG, float]:
    """The DAG of ``case`` and the best wall time of ``repeat`` builds (model and cluster loaded once)."""
    model, cluster, strategy = case.parts()
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
