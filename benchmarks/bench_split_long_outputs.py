"""Speed of simulating several engines under open arrivals with long outputs: the case that took minutes.

Run: .venv/bin/python benchmarks/bench_split_long_outputs.py

Llama-3.1-8B on 4 H100s, one prefill worker and three decode workers (``prefill:tp=1;decode:dp=3,tp=1;disagg``,
as ``shardplan plan -m llama-3.1-8b -n 4 --strategy ... --osl 4096 --rate 0.2`` prices it), replays 2,000 requests
with lognormal output lengths of mean 4,096 tokens (cv 1) at 2 and 0.2 requests/s. Printed per rate: the engine
steps taken (a run of identical steps counts once) and the best of three wall times of ``simulate``.

When the decode workers stepped in lockstep (each stopping at any other's next step, so that least-outstanding
routing would read their loads), a step was taken per token of every sequence while another worker was busy:
291,094 steps at 2 requests/s and 4,170,133 at 0.2 (199 s on a busy 2-core machine). An engine's load at an
arrival is the same either way (tools/simulation/loop.py says why), so they now step in runs.
"""

from __future__ import annotations

import time

from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.traffic import Traffic, parse_length
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.search.ranking import ranked
from shardplan.tools.serving.deployments import given_deployment
from shardplan.tools.simulation import engine as engine_module
from shardplan.tools.simulation.run import simulate

REQUESTS = 2000
SPEC = "prefill:tp=1;decode:dp=3,tp=1;disagg"


def main() -> None:
    model, cluster = load_model("llama-3.1-8b"), make_cluster("H100", 4)
    workload = Workload(isl=2048, osl=4096, rate=0.2, objective="throughput")
    deployment = ranked(given_deployment(model, cluster, parse_strategy(SPEC), workload), workload)[0]
    drawn = workload.model_copy(update={"traffic": Traffic(osl=parse_length("lognormal:mean=4096,cv=1"))})
    calls = [0]
    step = engine_module.Engine.step

    def counting(self: engine_module.Engine, horizon: float) -> object:
        calls[0] += 1
        return step(self, horizon)

    engine_module.Engine.step = counting  # type: ignore[method-assign,assignment]
    print(f"{SPEC}, {REQUESTS:,} requests, output lengths lognormal mean 4096 cv 1")
    print("| rate (requests/s) | engine steps | seconds (best of 3) |")
    print("|---|---|---|")
    for rate in (2.0, 0.2):
        best = float("inf")
        for _ in range(3):
            calls[0] = 0
            began = time.perf_counter()
            simulate(model, cluster, deployment, drawn, requests=REQUESTS, rate=rate)
            best = min(best, time.perf_counter() - began)
        print(f"| {rate:g} | {calls[0]:,} | {best:.2f} |")


if __name__ == "__main__":
    main()
