"""A deployment serving a given request rate: the load that follows from the rate, not a grid point's own.

Asked for ``R`` requests/s, a replica (or a decode worker) carries the sequences Little's law puts in flight
at ``R``: the concurrency whose steady state serves exactly ``R``. Its TTFT and TPOT are those of that load,
so a plan for 10 requests/s reports the latencies of 10 requests/s, not of the grid concurrency that would
serve 12. A layout whose fullest load still serves less than ``R`` cannot serve it.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["load_for_rate"]

_STEPS = 40


def load_for_rate(served: Callable[[float], float | None], rate: float, low: float, high: float) -> float | None:
    """The load in ``[low, high]`` at which ``served(load)`` (requests/s, growing with the load; None where
    there is no steady state) equals ``rate``: ``low`` when even that serves it, None when ``high`` serves less.

    >>> round(load_for_rate(lambda c: 2 * c, 10.0, 0.5, 64.0), 4)
    5.0
    >>> load_for_rate(lambda c: 2 * c, 1000.0, 0.5, 64.0) is None
    True
    """
    top = served(high)
    if top is None or top < rate:
        return None
    bottom = served(low)
    if bottom is not None and bottom >= rate:
        return low
    lo, hi = low, high
    for _ in range(_STEPS):  # bisection: the rate a load serves grows with it
        middle = (lo + hi) / 2
        value = served(middle)
        if value is not None and value >= rate:
            hi = middle
        else:
            lo = middle
        if hi - lo <= 1e-6 * hi:
            break
    return hi
