"""A simulated run in figures: per-request latencies to means and percentiles, goodput, and the engines' measures.

Per request: TTFT (arrival to first token), TPOT (first to last token over the ``osl - 1`` tokens between),
request latency (arrival to last token) and queue time (arrival to the first step that carries it). The rate
served is, for an open loop whose queue settles (:func:`queue_settles`), the rate offered: over a long run a
stable system completes what arrives, while completions over a finite run, first arrival to last completion,
fall short of it by the drain at the end. A closed loop, or an open loop whose queue grows, serves what it
completed over the run. Goodput asks :func:`shardplan.contracts.targets.within`
of each request, the bound every other verdict applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardplan.contracts.figures import Figures, LatencyMetric, Percentiles, make_figures
from shardplan.contracts.simulation import DISTRIBUTION_PERCENTS, Router, SimulationSummary
from shardplan.contracts.targets import Targets, misses, within
from shardplan.contracts.traffic import ClosedLoop, Traffic
from shardplan.text import counted
from shardplan.tools.simulation.loop import Workers
from shardplan.tools.simulation.state import Requests

__all__ = ["Latencies", "latencies", "percentiles", "distribution", "goodput_mask", "queue_settles", "RunFacts",
           "summarise", "measured_prefix_hit"]


@dataclass(frozen=True)
class Latencies:
    """Per request, in milliseconds (TPOT is NaN for a request of one output token)."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    queue_ms: np.ndarray


def latencies(requests: Requests) -> Latencies:
    """Each request's latencies from the times the simulation recorded.

    Raises:
        ValueError: a request never finished (the simulation is incomplete).
    """
    if np.isnan(requests.finish).any():
        raise ValueError(f"{counted(int(np.isnan(requests.finish).sum()), 'request')} never finished")
    between = (requests.osl - 1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(between > 0, (requests.finish - requests.first_token) / between, np.nan)
    return Latencies(
        ttft_ms=(requests.first_token - requests.arrival) * 1e3,
        tpot_ms=tpot * 1e3,
        e2e_ms=(requests.finish - requests.arrival) * 1e3,
        queue_ms=(requests.scheduled - requests.arrival) * 1e3,
    )


def percentiles(values_ms: np.ndarray) -> Percentiles:
    """P50, P90, P95 and P99 of ``values_ms`` (NaNs left out; all 0 when none is left).

    >>> percentiles(np.arange(101.0)).p90_ms
    90.0
    """
    kept = values_ms[~np.isnan(values_ms)]
    if kept.size == 0:
        return Percentiles(p50_ms=0.0, p90_ms=0.0, p95_ms=0.0, p99_ms=0.0)
    p50, p90, p95, p99 = np.percentile(kept, [50, 90, 95, 99]).tolist()
    return Percentiles(p50_ms=p50, p90_ms=p90, p95_ms=p95, p99_ms=p99)


def distribution(values_ms: np.ndarray) -> list[float]:
    """``values_ms`` at each of :data:`DISTRIBUTION_PERCENTS` (NaNs left out; empty when none is left).

    >>> distribution(np.arange(101.0))[:4]
    [0.0, 1.0, 5.0, 10.0]
    """
    kept = values_ms[~np.isnan(values_ms)]
    return np.percentile(kept, DISTRIBUTION_PERCENTS).tolist() if kept.size else []


def _mean(values: np.ndarray) -> float:
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else 0.0


def goodput_mask(measured: Latencies, targets: Targets) -> np.ndarray:
    """Which requests meet both the TTFT and the TPOT target (a request of one token has no TPOT to miss)."""
    good = [
        within("ttft", ttft, targets) and (tpot != tpot or within("tpot", tpot, targets))  # NaN: no TPOT
        for ttft, tpot in zip(measured.ttft_ms.tolist(), measured.tpot_ms.tolist(), strict=True)
    ]
    return np.array(good, dtype=bool)


def queue_settles(arrival: np.ndarray, finish: np.ndarray) -> bool:
    """Whether an open loop kept up with its arrivals: over the middle half of the time requests arrived, as
    many completed as arrived, within three standard deviations of the arrival count.

    A stable queue completes in any long window what arrived in it (the lag is the same at both ends); a
    queue that grows completes at the service rate, below the arrival rate. The count of a renewal process
    over a window of ``n`` expected arrivals has a standard deviation of about ``cv sqrt(n)`` (``cv`` of
    the gaps: 1 for Poisson, more for bursts), so a shortfall within three of those is noise, and an
    overload that small shows in the latencies instead.

    >>> arrive = np.arange(1000.0)
    >>> queue_settles(arrive, arrive + 5.0), queue_settles(arrive, arrive * 1.3 + 5.0)
    (True, False)
    """
    start, end = float(arrival.min()), float(arrival.max())
    low, high = start + 0.25 * (end - start), start + 0.75 * (end - start)
    arrived = int(((arrival >= low) & (arrival < high)).sum())
    completed = int(((finish >= low) & (finish < high)).sum())
    gaps = np.diff(np.sort(arrival))
    cv = float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else 1.0
    return bool(completed >= arrived - 3 * max(cv, 1e-9) * math.sqrt(max(arrived, 1)))


@dataclass(frozen=True)
class RunFacts:
    """What the summary reports about the run beside what it measured."""

    analytic: Figures
    """The deployment's steady-state figures (memory, GPUs used and budget are taken from them)."""
    deployment: str
    workload: str
    traffic: Traffic
    rate: float | None
    seed: int
    router: Router
    max_num_seqs: int
    kv_blocks: int
    block_tokens: int
    targets: Targets
    notes: list[str]
    capacity_rps: float | None = None
    """Requests/s the serving model gives the deployment with its running set full (what its KV cache, or its cap,
    holds): the most it serves. None where not priced; the steady state's own rate then stands in, which for a plan
    made at a rate is that rate, not the most it serves."""


def measured_prefix_hit(requests: Requests) -> float | None:
    """Share of the prompt tokens a prefix cache held when each request was first prefilled; None when no request
    shares a prefix (no prefix caching)."""
    if not requests.prefix.any():
        return None
    return float(np.maximum(requests.hit, 0).sum() / max(int(requests.isl.sum()), 1))


def summarise(requests: Requests, workers: Workers, end_s: float, facts: RunFacts) -> SimulationSummary:
    """The summary of a finished run that ended at ``end_s``.

    Raises:
        ValueError: a request never finished.
    """
    measured = latencies(requests)
    duration = max(end_s - float(requests.arrival.min()), 1e-12)
    count = len(requests)
    open_loop = not isinstance(facts.traffic.arrival, ClosedLoop)
    settled = queue_settles(requests.arrival, requests.finish) if open_loop and count > 1 else None
    span = float(requests.arrival.max() - requests.arrival.min())
    offered = facts.rate if facts.rate is not None else (count - 1) / span if span > 0 else None
    served = offered if settled and offered is not None else count / duration
    engines = workers.engines
    good = goodput_mask(measured, facts.targets)
    metrics: dict[LatencyMetric, np.ndarray] = {
        "ttft": measured.ttft_ms, "tpot": measured.tpot_ms, "e2e": measured.e2e_ms
    }
    analytic = facts.analytic
    figures = make_figures(
        "simulation",
        ttft_ms=_mean(measured.ttft_ms),
        tpot_ms=_mean(measured.tpot_ms),
        osl=max(1, round(float(requests.osl.mean()))),
        tokens_per_s=served * float(requests.osl.mean()),
        requests_per_s=served,
        memory_per_gpu_gb=analytic.memory_per_gpu_gb,
        gpu_memory_gb=analytic.gpu_memory_gb,
        fits=analytic.fits,
        gpus_used=analytic.gpus_used,
        gpu_budget=analytic.gpu_budget,
        e2e_ms=_mean(measured.e2e_ms),
        percentiles={metric: percentiles(values) for metric, values in metrics.items()},
    )
    notes = facts.notes + _dynamics_notes(requests, measured, facts, settled)
    pool = workers.prefill
    resident = sum(e.resident_s for e in engines) + (pool.resident_s if pool else 0.0) + workers.transit_s
    blocks = facts.kv_blocks * len(engines)
    return SimulationSummary(
        figures=figures,
        distribution={metric: distribution(values) for metric, values in metrics.items()},
        analytic=analytic,
        deployment=facts.deployment,
        workload=facts.workload,
        traffic=facts.traffic,
        rate=facts.rate,
        requests=count,
        seed=facts.seed,
        router=facts.router,
        max_num_seqs=facts.max_num_seqs,
        kv_blocks=facts.kv_blocks,
        prefix_hit=measured_prefix_hit(requests),
        block_tokens=facts.block_tokens,
        duration_s=duration,
        completed_per_s=count / duration,
        settled=settled,
        queue_ms=_mean(measured.queue_ms),
        queue=percentiles(measured.queue_ms),
        goodput=float(good.mean()),
        goodput_requests_per_s=float(good.sum()) / duration,
        preemptions=sum(e.preemptions for e in engines),
        mean_running_batch=sum(e.running_s for e in engines) / (len(engines) * duration),
        kv_cache_use=min(1.0, sum(e.blocks_s for e in engines) / (blocks * duration)),
        kv_cache_peak=max(e.peak_blocks for e in engines) / facts.kv_blocks,
        mean_in_flight=resident / duration,
        steps=sum(e.steps for e in engines) + (pool.steps if pool else 0),
        targets=facts.targets,
        misses=misses(figures, facts.targets),
        notes=notes,
    )


_SATURATED = 0.95
"""Share of the steady state's request rate from which an open loop's queue is flagged as not settling."""


def _dynamics_notes(requests: Requests, measured: Latencies, facts: RunFacts, settled: bool | None) -> list[str]:
    """What the run's dynamics make of its figures: a queue that does not settle, a closed loop's cold start,
    identical clients in lockstep."""
    notes = []
    served = facts.capacity_rps
    near = facts.rate is not None and served is not None and served > 0 and facts.rate >= _SATURATED * served
    if settled is False or near:
        quarters = [float(np.nanmean(part)) / 1e3 for part in np.array_split(measured.queue_ms, 4)]
        waits = (f"requests waited {quarters[0]:.2f} s in the first quarter of the run, {quarters[-1]:.2f} s in the "
                 "last")
        if settled is False:
            notes.append(
                f"the queue does not settle: fewer requests completed than arrived over the middle of the run "
                f"({waits}), so the latencies grow with --requests and the rate served is what completed; give a "
                "lower --rate, more replicas, or --arrival closed:N"
            )
        elif facts.rate is not None:
            notes.append(
                f"arrivals at {facts.rate / (served or 1.0):.0%} of the {served or 0.0:.2f} requests/s the deployment "
                f"serves with its running set full, close to the most it can serve ({waits}): the upper percentiles "
                "depend on --requests"
            )
    arrival = facts.traffic.arrival
    if isinstance(arrival, ClosedLoop):
        notes.append(
            f"the {counted(arrival.clients, 'client')} all send their first request at 0: those requests queue behind "
            f"each "
            "other's prompts, a cold start the upper percentiles include"
        )
    identical = bool((requests.isl == requests.isl[0]).all() and (requests.osl == requests.osl[0]).all())
    if identical and isinstance(arrival, ClosedLoop):
        notes.append(
            "a closed loop of identical requests runs in lockstep: clients that start together finish and resend "
            "together, so prompts arrive in bursts; vary the lengths (--osl-dist) for a mixed steady state"
        )
    return notes
