"""The small deployments the simulator's invariant and metamorphic tests replay, and the checks every finished run
must pass whatever it simulated (tests/test_simulation_invariants.py, tests/test_simulation_metamorphic.py).

Deployments are priced with placeholder steady-state figures: the simulator prices its own steps (roofline
backend, so no measured tables are needed) and only reports the steady state beside what it measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.traffic import Traffic, parse_arrival, parse_length
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.options import priced_deployment
from shardplan.tools.simulation.run import Simulation, SimulationOptions, simulate
from shardplan.tools.simulation.state import Requests

LLAMA_8B = load_model("meta-llama/Llama-3.1-8B")
QWEN3_30B = load_model("Qwen/Qwen3-30B-A3B")
H100 = make_cluster("H100", 8)
WORK = Workload(isl=1024, osl=128, ttft_ms=500, tpot_ms=30)
VARIED = {"isl": "lognormal:mean=1024,cv=0.8,high=6000", "osl": "lognormal:mean=128,cv=1,high=1000"}
"""Lengths that vary as chat traffic does (the means of :data:`WORK`)."""


def deployment(spec: str, sequences: int = 16) -> PricedDeployment:
    """``spec`` on 8 x H100 at ``sequences`` per replica (or decode worker), with placeholder steady-state figures."""
    strategy = parse_strategy(spec)
    return priced_deployment(strategy, WORK, H100, budget=8, concurrency=sequences * strategy.decode.dp,
                             worker_concurrency=sequences, ttft_ms=100.0, tpot_ms=20.0, requests_per_s=1000.0,
                             memory=(40.0, True), prefill_prompts=8)


def workload(arrival: str | None = None, base: Workload = WORK, **fields: object) -> Workload:
    """``base`` with an arrival process and length distributions (``isl``/``osl`` as text); other ``fields`` are
    the workload's own (``prefix_hit``, ``speculation``, ``gpu_memory_utilization``, ...)."""
    lengths = {k: parse_length(str(fields.pop(k))) for k in ("isl", "osl") if k in fields}
    traffic = Traffic(arrival=parse_arrival(arrival or "poisson"), **lengths)  # type: ignore[arg-type]
    return base.model_copy(update={"traffic": traffic, **fields})


@dataclass
class Run:
    """A finished simulation and the completion counts its progress callback heard."""

    sim: Simulation
    heard: list[int]

    @property
    def requests(self) -> Requests:
        return self.sim.requests

    @property
    def summary(self) -> SimulationSummary:
        return self.sim.summary


def replay(spec: str, work: Workload, *, requests: int, rate: float | None = None, seed: int = 0,
           model: ModelSpec = LLAMA_8B, sequences: int = 16, **options: object) -> Run:
    """Simulate ``requests`` requests of ``work`` through :func:`deployment` of ``spec`` (roofline steps)."""
    heard: list[int] = []
    sim = simulate(model, H100, deployment(spec, sequences), work, requests=requests, rate=rate, seed=seed,
                   options=SimulationOptions(backend="roofline", **options),  # type: ignore[arg-type]
                   progress=heard.append)
    return Run(sim, heard)


def in_flight_peak(arrival: np.ndarray, finish: np.ndarray) -> int:
    """Most requests arrived and not finished at any instant (a finish and an arrival at one instant: the finish
    first, as a closed loop's client resends after its answer).

    >>> in_flight_peak(np.array([0.0, 0.0, 1.0]), np.array([1.0, 2.0, 3.0]))
    2
    """
    times = np.concatenate([finish, arrival])
    change = np.concatenate([-np.ones(finish.size), np.ones(arrival.size)])
    order = np.lexsort((change, times))
    return int(np.cumsum(change[order]).max())


def check_invariants(run: Run, clients: int | None = None, delayed: bool = False) -> None:
    """What any finished run must satisfy (``clients``: it was a closed loop of that many, ``delayed``: with a send
    delay between a completion and the next request)."""
    r, s = run.requests, run.summary
    total = len(r)
    # Conservation: every request completes exactly once (the loop's own count ends at the total and never passes
    # it), with every token of its drawn output.
    assert run.heard and run.heard[-1] == total and max(run.heard) == total
    assert not np.isnan(r.finish).any() and not np.isnan(r.first_token).any()
    assert np.array_equal(r.generated, r.osl) and int(r.generated.sum()) == int(r.osl.sum())
    # Times: arrival <= first scheduled <= first token <= last token, none negative.
    assert (r.arrival >= 0).all()
    assert (r.scheduled >= r.arrival).all() and (r.first_token >= r.scheduled).all()
    assert (r.finish >= r.first_token).all()
    f = s.figures
    for metric in ("ttft", "tpot", "e2e"):
        p = f.percentiles[metric]  # type: ignore[index]
        curve = s.distribution[metric]
        assert 0 <= p.p50_ms <= p.p90_ms <= p.p95_ms <= p.p99_ms
        assert curve == sorted(curve) and (not curve or (curve[0] >= 0 and p.p99_ms <= curve[-1]))
    assert 0 <= s.queue_ms <= f.ttft_ms <= f.e2e_ms
    assert s.queue.p99_ms <= s.figures.percentiles["e2e"].p99_ms  # type: ignore[index]
    assert 0 <= s.goodput <= 1 and s.goodput_requests_per_s <= s.completed_per_s * (1 + 1e-12)
    assert s.completed_per_s == pytest.approx(total / s.duration_s, rel=1e-12)
    # The engines: the running batch within max_num_seqs, the KV cache within its blocks (unclipped), preemptions
    # counted once each.
    engines = run.sim.workers.engines
    assert s.mean_running_batch <= s.max_num_seqs and s.mean_running_batch <= s.kv_blocks
    assert max(e.peak_blocks for e in engines) <= s.kv_blocks and s.kv_cache_peak <= 1
    for engine in engines:
        for scheduler in getattr(engine, "ranks", [engine]):
            # Every running sequence holds at least one block of its own (its last token's).
            assert scheduler.peak_running <= min(scheduler.max_num_seqs, scheduler.kv_blocks)
            assert scheduler.peak_blocks <= scheduler.kv_blocks
    use = sum(e.blocks_s for e in engines) / (s.kv_blocks * len(engines) * s.duration_s)
    assert use <= 1 + 1e-12 and s.kv_cache_use == pytest.approx(use, rel=1e-12)
    # The mean in use (over time and workers) is never above the peak (of one worker, cached prefixes in both).
    assert s.kv_cache_use <= s.kv_cache_peak * (1 + 1e-12)
    assert s.preemptions == int(r.preemptions.sum()) and s.steps > 0
    # Little's law on the run itself: the requests in the deployment, integrated step by step over the engines'
    # queues, running sets and transfers, equal throughput x mean latency from each request's own times.
    little = s.completed_per_s * f.e2e_ms / 1e3
    assert s.mean_in_flight == pytest.approx(little, rel=1e-9)
    if clients is not None:
        # A closed loop never has more than its clients in flight, and, resending at once, has exactly that many
        # until the last request is sent; the drain after it lasts at most the longest request, so
        # clients x (1 - longest / duration) <= throughput x mean latency <= clients.
        assert in_flight_peak(r.arrival, r.finish) <= clients and s.mean_in_flight <= clients * (1 + 1e-12)
        if not delayed:
            longest, loop = float((r.finish - r.arrival).max()), min(clients, total)
            assert loop * (1 - longest / s.duration_s) * (1 - 1e-9) <= little <= loop * (1 + 1e-12)
