"""What an infeasible request costs to explain: the fewest GPUs and the fit hints, in milliseconds (best of N).

Run ``.venv/bin/python benchmarks/bench_fit_hints.py [--repeat 3]``; it prints a markdown table with the
hints each request gets. Every request here does not fit, so the search raises at once and this is the
extra time its answer takes.
"""

from __future__ import annotations

import argparse
import time

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload
from shardplan.tools.planning.planner import resolve_request
from shardplan.tools.search.fit_hints import fit_hints
from shardplan.tools.search.fitting import min_gpus_to_fit

REQUESTS = [
    PlanRequest(model="meta-llama/Llama-3.1-405B", gpu="H100", gpus=8, workload=Workload(isl=2048, osl=256)),
    PlanRequest(model="deepseek-ai/DeepSeek-V3", gpu="H100", gpus=8, workload=Workload(isl=2048, osl=256)),
    PlanRequest(model="Qwen/Qwen3-32B", gpu="H100", gpus=1, workload=Workload(isl=32768, osl=256)),
    PlanRequest(model="meta-llama/Llama-3.1-70B", gpu="H100", gpus=4, workload=Workload(isl=100000, osl=256, batch=8)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| request | ms | hints |")
    print("| --- | ---: | --- |")
    for request in REQUESTS:
        model, cluster = resolve_request(request)
        best = float("inf")
        for _ in range(args.repeat):
            began = time.perf_counter()
            need = min_gpus_to_fit(model, cluster, request.workload)
            hints = fit_hints(model, cluster, request.workload, need)
            best = min(best, time.perf_counter() - began)
        w = request.workload
        what = f"{request.model} on {request.gpus} x {request.gpu}, {w.isl}+{w.osl} tokens" + (
            f", batch {w.batch}" if w.batch else ""
        )
        print(f"| {what} | {best * 1e3:.0f} | {', '.join(f'{h.change}={h.value}' for h in hints)} |")


if __name__ == "__main__":
    main()
