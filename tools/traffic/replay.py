"""Requests drawn from a request trace: which rows, and when they arrive.

* Rows: the first ``count`` rows, in the trace's order, so a stream replays what the trace did (lengths, groups
  and times stay together). Asked for more requests than the trace holds, the whole trace comes first and the
  rest are rows drawn from it uniformly, with replacement, with the stream's seed.
* Times (``arrival trace``): the trace's own, from 0. With a rate, the trace's clock runs faster or slower by
  its mean rate over that rate, so the gaps keep their shape and the whole trace arrives at the rate asked for.
  Requests past the trace's end follow it with gaps drawn from the trace's own gaps, with the seed.

>>> import numpy as np
>>> trace_rows(3, 5, np.random.default_rng(0)).tolist()[:3]
[0, 1, 2]
"""

from __future__ import annotations

import numpy as np

from shardplan.errors import InputError
from shardplan.tools.traffic.traces import Trace, require_times

__all__ = ["trace_rows", "trace_times"]


def trace_rows(rows: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``count`` requests into a trace of ``rows`` rows: ``0 .. count-1`` while the trace lasts, then
    rows drawn uniformly with replacement (int64)."""
    first = np.arange(min(rows, count), dtype=np.int64)
    if count <= rows:
        return first
    return np.concatenate([first, rng.integers(0, rows, size=count - rows, dtype=np.int64)])


def trace_times(trace: Trace, count: int, rate: float | None, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in seconds of ``count`` requests replaying ``trace``'s timestamps, on the trace's clock scaled
    to ``rate`` requests/s when one is given (float64, non-decreasing, from 0).

    Raises:
        InputError: the trace has no arrival times (field ``arrival``), or a rate is asked of a trace whose
            requests all arrive at one instant.
    """
    own = require_times(trace)
    times = own[: min(count, len(trace))].astype(np.float64)
    if count > len(trace):
        gaps = np.diff(own) if len(trace) > 1 else np.zeros(1)
        extra = rng.choice(gaps, size=count - len(trace), replace=True)
        times = np.concatenate([times, times[-1] + np.cumsum(extra)])
    if rate is not None:
        if trace.mean_rate is None:
            raise InputError(f"trace '{trace.name}' has all its requests at one instant: it has no rate to scale",
                             field="rate", fix="leave out --rate to replay it as it is, or use --arrival poisson")
        times *= trace.mean_rate / rate
    return times
