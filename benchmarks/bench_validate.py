"""How fast the validators are, and how many mutants they kill.

Run ``.venv/bin/python benchmarks/bench_validate.py [--repeat 3] [--no-mutations]``. It prints a markdown
table of ``validate(dag)`` timings (best of N, wall and CPU) with nodes + edges per second, then the
mutation kill table of ``tests/mutation_cases.py``. The target is the 110k-node Llama-3.1-405B case in
under 1 s.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

from cases import DEEPSEEK_64, LLAMA_8B, LLAMA_405B_64, Case, build

from shardplan.contracts.dag import DAG
from shardplan.validators.validate import validate

CASES = [LLAMA_8B, DEEPSEEK_64, LLAMA_405B_64]


def time_case(case: Case, repeat: int) -> tuple[DAG, float, float, bool]:
    """The DAG of ``case``, the best wall and CPU seconds of ``repeat`` validations, and the verdict."""
    dag = build(case)
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
    parser.add_argument("--repeat", type=int, default=3, help="validations per case; the best time is reported")
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
        from mutation_cases import format_kill_table, kill_table

        print()
        print(format_kill_table(kill_table()))


if __name__ == "__main__":
    main()
