"""Judging deployments by a simulation of the engine: percentile targets and traffic that is not its mean.

The serving model prices a deployment's steady state at the workload's mean lengths, in seconds for hundreds
of deployments; under load its means are optimistic, and it has no percentiles at all. Where the request asks
for a percentile (``slo_percentile``) or describes its traffic (length distributions, a trace, bursts, a closed
loop), the search screens analytically and then replays the best candidates through the engine simulator
(:mod:`shardplan.tools.simulation`), a handful at a time in worker processes, and ranks those by what the
simulation measured:

1. the leading ``per_round`` candidates of the analytic ranking are simulated;
2. when none of them meets the targets, the mean-to-percentile inflation the simulations showed (for each
   latency, the largest ratio of the judged simulated figure to the steady state's mean) is applied to the
   remaining candidates' steady states, and the best of those that would then meet the targets are simulated
   next, for at most ``rounds`` rounds;
3. the simulated candidates come first, ranked by their simulated figures; the others follow in their analytic
   order, their figures still the steady state's (``figures.source`` says which).

A simulated deployment's ``figures`` are the run's (means, percentiles, the rate served); its ``simulation``
holds the run's summary with the steady state it replaced (``simulation.analytic``).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from shardplan.contracts.figures import Figures
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.targets import Targets, judged_latency, within
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.search.ranking import ranked
from shardplan.tools.simulation.run import replayed_traffic, simulate

__all__ = [
    "SIMULATED_REQUESTS",
    "SimulatedSearch",
    "needs_simulation",
    "simulate_option",
    "simulate_options",
    "simulate_leaders",
]

SIMULATED_REQUESTS = 2000
"""Requests replayed per candidate: a P99 then rests on the 20 slowest, enough to rank deployments whose tails
differ by more than sampling noise, in well under a second per replica."""


def needs_simulation(workload: Workload) -> bool:
    """Whether the workload's figures must come from a simulation: a percentile target, or traffic described
    beyond the fixed lengths and Poisson arrivals the steady state prices (continuous batching only: the simulator
    runs the engine's scheduler)."""
    if workload.batching != "continuous":
        return False
    return workload.slo_percentile != "mean" or not workload.drawn_as_priced


def _run(
    model: ModelSpec, cluster: Cluster, option: PricedDeployment, workload: Workload, requests: int, seed: int
) -> SimulationSummary:
    replayed, rate, note = replayed_traffic(workload, option)
    summary = simulate(model, cluster, option, replayed, requests=requests, rate=rate, seed=seed).summary
    return summary if note is None else summary.model_copy(update={"notes": [note, *summary.notes]})


def simulate_option(
    model: ModelSpec,
    cluster: Cluster,
    option: PricedDeployment,
    workload: Workload,
    *,
    requests: int = SIMULATED_REQUESTS,
    seed: int = 0,
) -> PricedDeployment:
    """``option`` with the figures of a simulated run of ``requests`` requests of the workload's traffic, judged
    against its targets.

    Raises:
        InputError: the deployment cannot run the traffic (a request longer than a worker's KV cache holds).
    """
    return with_simulation(option, _run(model, cluster, option, workload, requests, seed), workload.targets)


def with_simulation(option: PricedDeployment, summary: SimulationSummary, targets: Targets) -> PricedDeployment:
    """``option`` with a simulated run's figures in place of its steady state, judged against ``targets``."""
    return option.model_copy(update={"figures": summary.figures, "simulation": summary}).judged(targets)


@dataclass(frozen=True)
class _Job:
    model: ModelSpec
    cluster: Cluster
    option: PricedDeployment
    workload: Workload
    requests: int
    seed: int


def _simulate_job(job: _Job) -> SimulationSummary | str:
    """One candidate's run, or why it cannot be simulated (in a worker process: errors come back as text)."""
    try:
        return _run(job.model, job.cluster, job.option, job.workload, job.requests, job.seed)
    except InputError as exc:
        return str(exc)


def _workers(jobs: int) -> int:
    """Worker processes for ``jobs`` runs: one per run up to the CPUs, or none (run here).

    The workers are forked, so they start at once with the modules and the step prices already loaded, and
    never re-run the caller's script as spawned workers would. Forking is safe only where this process runs a
    single thread (a thread holding a lock at the fork would leave it held in the child forever), on Linux
    (macOS's system libraries refuse it), and outside a daemon process (the MCP server's tool workers, which
    may not start children); anywhere else, and for a single run or a single CPU, the runs go one by one here.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    alone = threading.active_count() == 1 and not multiprocessing.current_process().daemon
    if jobs < 2 or cpus < 2 or sys.platform != "linux" or not alone:
        return 0
    return min(jobs, cpus)


def simulate_options(
    model: ModelSpec,
    cluster: Cluster,
    options: Sequence[PricedDeployment],
    workload: Workload,
    *,
    requests: int = SIMULATED_REQUESTS,
    seed: int = 0,
) -> list[PricedDeployment | str]:
    """Each of ``options`` simulated (in worker processes when there are several and CPUs to run them), or the
    reason it could not be. Seeded: the same options give the same figures however they are spread."""
    jobs = [_Job(model, cluster, o, workload, requests, seed) for o in options]
    workers = _workers(len(jobs))
    if workers:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            runs = list(pool.map(_simulate_job, jobs))
    else:
        runs = [_simulate_job(job) for job in jobs]
    return [run if isinstance(run, str) else with_simulation(o, run, workload.targets)
            for o, run in zip(options, runs, strict=True)]


def _inflation(simulated: Sequence[PricedDeployment], targets: Targets) -> tuple[float, float]:
    """The largest ratio, over the simulated candidates, of the judged TTFT and TPOT to the steady state's means."""
    ttft, tpot = 1.0, 1.0
    for option in simulated:
        steady = option.simulation.analytic if option.simulation else None
        if steady is None:
            continue
        judged_ttft = judged_latency(option.figures, "ttft", targets.percentile)[0]
        judged_tpot = judged_latency(option.figures, "tpot", targets.percentile)[0]
        ttft = max(ttft, judged_ttft / max(steady.ttft_ms, 1e-9))
        tpot = max(tpot, judged_tpot / max(steady.tpot_ms, 1e-9))
    return ttft, tpot


def _would_meet(figures: Figures, inflation: tuple[float, float], targets: Targets) -> bool:
    """Whether steady-state ``figures`` would meet the latency targets with the simulations' inflation applied."""
    return within("ttft", figures.ttft_ms * inflation[0], targets) and within(
        "tpot", figures.tpot_ms * inflation[1], targets
    )


@dataclass(frozen=True)
class SimulatedSearch:
    """Candidates re-ranked by simulation, and what the simulations did, one sentence each."""

    candidates: list[PricedDeployment]
    simulated: int
    notes: list[str]


def simulate_leaders(
    model: ModelSpec,
    cluster: Cluster,
    ordered: list[PricedDeployment],
    workload: Workload,
    *,
    per_round: int = 4,
    rounds: int = 3,
    requests: int = SIMULATED_REQUESTS,
) -> SimulatedSearch:
    """``ordered`` (the analytic ranking, best first) with its leaders simulated and ranked by what they measured
    (see the module's steps)."""
    targets = workload.targets
    pending = list(ordered)
    simulated: list[PricedDeployment] = []
    refused: list[str] = []
    for round_ in range(rounds):
        if round_ == 0:
            batch = pending[:per_round]
        else:
            inflation = _inflation(simulated, targets)
            batch = [o for o in pending if _would_meet(o.figures, inflation, targets)][:per_round]
        if not batch:
            break
        for option, run in zip(batch, simulate_options(model, cluster, batch, workload, requests=requests),
                               strict=True):
            pending.remove(option)
            if isinstance(run, str):
                refused.append(f"{option.spec}: {run}")
            else:
                simulated.append(run)
        if any(o.meets_targets for o in simulated):
            break
    simulated = ranked(simulated, workload)
    notes = []
    if simulated:
        traffic = simulated[0].simulation.workload if simulated[0].simulation else ""
        meeting = sum(o.meets_targets for o in simulated)
        notes.append(
            f"simulated the {counted(len(simulated), 'best candidate deployment')} of the steady state's ranking, each "
            f"replaying {traffic}, and ranked them by the simulated figures ({meeting} meet the targets"
            + (f" at {workload.slo_percentile.upper()}" if workload.slo_percentile != "mean" else "")
            + "); the other candidates keep their steady-state figures"
        )
    notes += [f"could not simulate {text}" for text in refused[:3]]
    return SimulatedSearch(candidates=simulated + pending, simulated=len(simulated), notes=notes)
