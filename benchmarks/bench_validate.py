"""How fast the validators are, and how many mutants they kill.

Run ``.venv/bin/python benchmarks/bench_validate.py [--repeat 3] [--no-mutations]``. It prints a markdown
table of ``validate(dag)`` timings (best of N, wall and CPU) with nodes + edges per second, then the
mutation kill table of ``tests/mutations.py``. The target is the 110k-node Llama-3.1-405B case in
under 1 s.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from shardplan.tools.builder import build_dag
from shardplan.tools.contracts import DAG, Workload, parse_strategy
from shardplan.tools.hardware import make_cluster
from shardplan.tools.models import load_model
from shardplan.validators import validate


@dataclass(frozen=True)
class Case:
    """One DAG to validate."""

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
        "DeepSeek-V3 SP8 TP8 EP64 mb2 / ADP8 TP8 EP64",
        "deepseek-ai/DeepSeek-V3",
        64,
        "prefill:sp=8,tp=8,ep=64,mb=2;decode:adp=8,tp=8,ep=64",
        Workload(isl=4096, osl=512, batch=64),
    ),
    Case(
        "Llama-3.1-405B SP4 TP8 PP2 mb8 / ADP4 TP8 PP2 mb8",
        "meta-llama/Llama-3.1-405B",
        64,
        "prefill:sp=4,tp=8,pp=2,mb=8;decode:adp=4,tp=8,pp=2,mb=8",
        Workload(isl=4096, osl=256, batch=256),
    ),
]


def time_case(case: Case, repeat: int) -> tuple[DAG, float, float, bool]:
    """The DAG of ``case``, the best wall and CPU seconds of ``repeat`` validations, and the verdict."""
    dag = build_dag(
        load_model(case.model), make_cluster("H100", case.gpus), parse_strategy(case.strategy), case.workload
    )
    best_wall, best_cpu, valid = float("inf"), float("inf"), False
    for _ in range(repeat):
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        valid = validate(dag).valid
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return dag, best_wall, best_cpu, valid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=3, help="validations per case; the best time is reported"
    )
    parser.add_argument("--no-mutations", action="store_true", help="skip the mutation kill table")
    args = parser.parse_args()
    print(f"| case | nodes | edges | valid | wall s (best of {args.repeat}) | CPU s | nodes+edges per s |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for case in CASES:
        dag, wall, cpu, valid = time_case(case, args.repeat)
        size = len(dag.nodes) + len(dag.edges)
        print(
            f"| {case.label} | {len(dag.nodes):,} | {len(dag.edges):,} | {valid} | {wall:.3f} | {cpu:.3f} "
            f"| {size / wall:,.0f} |"
        )
    if not args.no_mutations:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from mutations import format_kill_table, kill_table

        print()
        print(format_kill_table(kill_table()))


if __name__ == "__main__":
    main()
