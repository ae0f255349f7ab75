"""A stream of requests to replay: arrival times, prompt and output lengths, prefix groups.

:func:`request_stream` draws one from a workload's traffic with a seeded numpy generator, so the same seed gives
the same requests. Traces are read by :mod:`.traces` and replayed by :mod:`.replay`; here the distributions, the
arrival processes, and the choice between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.contracts.traffic import (
    ClosedLoop,
    FixedLength,
    GammaArrivals,
    LengthDist,
    LognormalLength,
    TraceArrivals,
    Traffic,
    UniformLength,
)
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.traffic.replay import trace_rows, trace_times
from shardplan.tools.traffic.traces import read_trace

__all__ = ["RequestStream", "draw_lengths", "arrival_times", "request_stream"]


@dataclass(frozen=True)
class RequestStream:
    """Requests in arrival order; arrays of one length, one entry per request."""

    arrival_s: np.ndarray
    """Arrival times in seconds from the start, non-decreasing (float64); all zero for a closed loop."""
    isl: np.ndarray
    """Prompt tokens (int64, at least 1)."""
    osl: np.ndarray
    """Output tokens (int64, at least 1)."""
    prefix_group: np.ndarray
    """Shared-prefix group of each request (int64; -1: none)."""
    clients: int | None = None
    """A closed loop of this many clients (each sends its next request when its last completes); None: open."""
    prefix_tokens: np.ndarray | None = None
    """Leading prompt tokens each request shares with earlier requests of its prefix group, as a trace states them
    (int64); None: the trace does not say."""

    def __len__(self) -> int:
        return int(self.isl.shape[0])

    @property
    def mean_isl(self) -> float:
        return float(self.isl.mean()) if len(self) else 0.0

    @property
    def mean_osl(self) -> float:
        return float(self.osl.mean()) if len(self) else 0.0


def draw_lengths(dist: LengthDist, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` lengths drawn from ``dist`` (int64, at least 1).

    >>> draw_lengths(FixedLength(kind="fixed", tokens=7), 3, np.random.default_rng(0)).tolist()
    [7, 7, 7]
    """
    if isinstance(dist, FixedLength):
        return np.full(count, dist.tokens, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.low, dist.high + 1, size=count, dtype=np.int64)
    if isinstance(dist, LognormalLength):
        sigma = dist.sigma
        mu = np.log(dist.mean) - sigma**2 / 2  # the lognormal whose mean is dist.mean
        drawn = np.rint(rng.lognormal(mu, sigma, size=count))
        return np.clip(drawn, dist.low, dist.high if dist.high is not None else None).astype(np.int64)
    raise TypeError(f"unknown length distribution {dist!r}")


def arrival_times(traffic: Traffic, rate: float | None, count: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of ``count`` requests at ``rate`` requests/s under the traffic's process (not a trace's).

    Raises:
        InputError: an open-loop process without a rate.
    """
    arrival = traffic.arrival
    if isinstance(arrival, ClosedLoop):
        return np.zeros(count)
    if rate is None:
        raise InputError(f"{arrival.kind} arrivals need a request rate", field="rate",
                         fix="give --rate R (requests/s), or a closed loop: --arrival closed:N")
    if isinstance(arrival, GammaArrivals):
        shape = 1 / arrival.cv**2  # gamma gaps with mean 1/rate and this coefficient of variation
        gaps = rng.gamma(shape, 1 / (rate * shape), size=count)
    else:
        gaps = rng.exponential(1 / rate, size=count)
    return np.cumsum(gaps) - gaps[0] if count else np.zeros(0)


def request_stream(workload: Workload, *, requests: int, rate: float | None = None, seed: int = 0) -> RequestStream:
    """``requests`` requests of the workload's traffic (its fixed ``isl`` and ``osl`` and Poisson arrivals when it
    states none), arriving at ``rate`` (default: the workload's rate).

    With a trace, the lengths and prefix groups are its rows (:func:`~.replay.trace_rows`: the first
    ``requests`` rows, then rows drawn with the seed), and the arrival times are its timestamps under arrival
    ``trace`` (:func:`~.replay.trace_times`: scaled to the rate when there is one), else drawn by the arrival
    process at the rate.

    Raises:
        InputError: an open-loop process without a rate; a trace that cannot be read, or arrival ``trace`` on a
            trace without times.
    """
    traffic = workload.traffic or Traffic()
    rate = rate if rate is not None else workload.rate
    clients = traffic.arrival.clients if isinstance(traffic.arrival, ClosedLoop) else None
    rng = np.random.default_rng(seed)
    if traffic.trace is not None:
        trace = read_trace(traffic.trace)
        rows = trace_rows(len(trace), requests, rng)
        if isinstance(traffic.arrival, TraceArrivals):
            arrival = trace_times(trace, requests, rate, rng)
        else:
            arrival = arrival_times(traffic, rate, requests, rng)
        shared = trace.prefix_tokens[rows] if trace.prefix_tokens is not None else None
        return RequestStream(arrival, trace.isl[rows], trace.osl[rows], trace.prefix_group[rows], clients, shared)
    isl = draw_lengths(traffic.isl or FixedLength(kind="fixed", tokens=workload.isl), requests, rng)
    osl = draw_lengths(traffic.osl or FixedLength(kind="fixed", tokens=workload.osl), requests, rng)
    arrival = arrival_times(traffic, rate, requests, rng)
    return RequestStream(arrival, isl, osl, np.full(requests, -1, dtype=np.int64), clients)
