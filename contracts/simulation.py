"""What a simulation of a deployment reports: the measured figures and how the engine behaved on the way.

The analytic serving model gives a deployment's steady state (``Figures`` from ``steady_state``); the engine
simulator replays a stream of requests through the same step prices and reports the same ``Figures`` record
(``source: simulation``, with percentiles), plus what only a replay shows: the queue, goodput per request,
preemptions, the running batch and the KV cache in use.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from shardplan.contracts.common import Contract
from shardplan.contracts.figures import Figures, LatencyMetric, Percentiles
from shardplan.contracts.targets import Miss, Targets
from shardplan.contracts.traffic import Traffic

__all__ = ["Router", "ROUTERS", "DISTRIBUTION_PERCENTS", "SimulationSummary"]

Router = Literal["round_robin", "least_outstanding", "cache_affinity"]
"""How requests are spread over replicas: in turn, to the replica with the fewest requests not yet finished, or to the
replica whose prefix cache holds the request's prefix unless the load is out of balance (SGLang's cache-aware
router)."""

ROUTERS: tuple[Router, ...] = ("round_robin", "least_outstanding", "cache_affinity")

DISTRIBUTION_PERCENTS: tuple[float, ...] = (0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97.5, 99, 99.9, 100)
"""The percentiles a summary's ``distribution`` gives: enough points to draw each latency's CDF, dense in the tail
where targets are judged."""


class SimulationSummary(Contract):
    """One simulated run of a deployment over a stream of requests."""

    model_config = ConfigDict(frozen=True)

    figures: Figures = Field(
        description="Means over the completed requests (source simulation) with P50/P90/P95/P99 of TTFT, TPOT "
        "and request latency; the rate served: the rate offered where an open loop's queue settled, else what "
        "completed per second over the run."
    )
    distribution: dict[LatencyMetric, list[float]] = Field(
        default_factory=dict,
        description="Each latency (TTFT, TPOT, request) in ms at the percentiles DISTRIBUTION_PERCENTS (0, 1, 5, 10, "
        "20, ..., 90, 95, 97.5, 99, 99.9, 100) of the completed requests: the curve of its distribution.",
    )
    analytic: Figures | None = Field(
        default=None, description="The deployment's steady-state figures from the serving model, for comparison."
    )
    deployment: str = Field(description="The deployment simulated, as SPEC text (dp counts replicas or workers).")
    workload: str = Field(description="The requests replayed, in words: arrivals, rate and lengths.")
    traffic: Traffic = Field(description="The traffic the requests were drawn from.")
    rate: float | None = Field(default=None, gt=0, description="Arrival rate in requests/s; None for a closed loop.")
    requests: int = Field(ge=1, description="Requests replayed (all of them complete).")
    seed: int = Field(description="Seed of the request stream: the same seed replays the same requests.")
    router: Router = Field(description="How requests were spread over replicas or decode workers.")
    max_num_seqs: int = Field(ge=1, description="Running sequences one replica (or decode worker) admits at most.")
    kv_blocks: int = Field(
        ge=1, description="KV-cache blocks of one replica (or decode worker), from the memory model."
    )
    prefix_hit: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of the prompt tokens that a prefix cache (the replica's, or the prefill worker's) held when "
        "each request was first prefilled, as measured over the run; None: no prefix caching.",
    )
    block_tokens: int = Field(ge=1, description="Tokens per KV-cache block.")
    duration_s: float = Field(ge=0, description="Simulated time from the first arrival to the last completion.")
    completed_per_s: float = Field(
        ge=0, description="Requests completed over the run, first arrival to last completion (the drain included)."
    )
    settled: bool | None = Field(
        default=None,
        description="Open loop: whether the queue kept up with the arrivals (as many completed as arrived over the "
        "middle half of the arrivals, within sampling noise); then figures.requests_per_s is the rate offered, "
        "otherwise what completed per second. None for a closed loop.",
    )
    queue_ms: float = Field(ge=0, description="Mean wait from arrival until a step first carries the request.")
    queue: Percentiles = Field(description="Percentiles of that wait.")
    goodput: float = Field(ge=0, le=1, description="Share of requests meeting both the TTFT and TPOT targets.")
    goodput_requests_per_s: float = Field(ge=0, description="Requests per second meeting both targets.")
    preemptions: int = Field(ge=0, description="Times a running sequence lost its KV cache and was recomputed.")
    mean_running_batch: float = Field(
        ge=0, description="Sequences in a replica's (or decode worker's) running set, averaged over the run."
    )
    kv_cache_use: float = Field(
        ge=0, le=1, description="Share of the KV-cache blocks in use, averaged over the run and the workers."
    )
    kv_cache_peak: float = Field(ge=0, le=1, description="Largest share of one worker's KV-cache blocks in use.")
    mean_in_flight: float = Field(
        ge=0, description="Requests in the deployment (queued, running or in transfer), averaged over the run."
    )
    steps: int = Field(ge=0, description="Engine steps simulated, over every replica or worker.")
    targets: Targets = Field(description="The targets goodput and misses are judged against.")
    misses: list[Miss] = Field(default_factory=list, description="The targets the simulated means miss.")
    notes: list[str] = Field(default_factory=list, description="What the simulation assumes, one line each.")
