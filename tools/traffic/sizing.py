"""The workload a traffic description implies: its mean lengths, its sequences in flight, its rate.

The analytic serving model prices a workload's ``isl`` and ``osl``; a length distribution or a request trace says
how requests spread around them. One set of rules, shared by the command line, the tools' arguments and chat:

* A length left out is the mean of the distribution or the trace, rounded; with neither, the default (2048 and
  256). A length given is kept when it lies within 10% of that mean, and refused otherwise: the plan would
  price one workload and the simulator replay another.
* A closed loop of N clients (``closed:N``) with no batch means N sequences in flight; a batch above N is
  refused, since N clients never have more than N requests out.
* Arrivals replayed from a trace (``trace``) with no rate take the trace's mean rate.
* A trace gives the lengths, so a length distribution beside it is refused, as is ``trace`` arrival without a
  trace.

>>> traffic = parse_traffic("uniform:1000,3000", None, None, "closed:16")
>>> fields = workload_fields(traffic, isl=None, osl=None, batch=None, rate=None)
>>> fields["isl"], fields["osl"], fields["batch"]
(2000, 256, 16)
"""

from __future__ import annotations

import math
from typing import Any

from shardplan.contracts.traffic import (
    ClosedLoop,
    LengthDist,
    LognormalLength,
    TraceArrivals,
    Traffic,
    length_text,
    parse_arrival,
    parse_length,
)
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.traffic.traces import read_trace, require_times

__all__ = ["LENGTH_TOLERANCE", "parse_traffic", "length_mean", "traffic_means", "length_source", "workload_fields"]

LENGTH_TOLERANCE = 0.10
"""How far a given isl or osl may lie from the mean of its distribution or trace, as a share of that mean."""

_WORKLOAD_FIX = "give --workload FILE (or a bundled trace such as azure-conv), or another arrival process"


def parse_traffic(isl_dist: str | None, osl_dist: str | None, workload: str | None,
                  arrival: str | None) -> Traffic | None:
    """The traffic that the options describe; None when none is given.

    Raises:
        InputError: a malformed distribution or arrival process (its field named), a distribution beside a
            trace, or ``trace`` arrival without a trace.
    """
    if isl_dist is None and osl_dist is None and workload is None and arrival is None:
        return None
    for name, text in (("isl_dist", isl_dist), ("osl_dist", osl_dist)):
        if text is not None and workload is not None:
            raise InputError(f"{name} '{text}' and the trace '{workload}' both give the lengths", field=name,
                             fix=f"give the trace or {name}, not both")
    process = parse_arrival(arrival) if arrival is not None else None
    if isinstance(process, TraceArrivals) and workload is None:
        raise InputError("arrival 'trace' replays a trace's timestamps, and no trace is given", field="arrival",
                         fix=_WORKLOAD_FIX)
    fields: dict[str, Any] = {
        "isl": parse_length(isl_dist, "isl_dist") if isl_dist is not None else None,
        "osl": parse_length(osl_dist, "osl_dist") if osl_dist is not None else None,
        "trace": workload,
    }
    if process is not None:
        fields["arrival"] = process
    return Traffic(**fields)


def _normal_cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def length_mean(dist: LengthDist) -> float:
    """The mean length ``dist`` draws: a lognormal's mean after clipping to ``[low, high]``.

    >>> round(length_mean(parse_length("lognormal:mean=2048,cv=0.8,high=4096")))
    1880
    """
    if not isinstance(dist, LognormalLength):
        return dist.mean
    sigma, mean = dist.sigma, dist.mean

    def below(k: float) -> tuple[float, float]:
        """P(X < k) and E[X; X < k] for the lognormal X of this mean and sigma."""
        z = math.log(k / mean) / sigma
        return _normal_cdf(z + sigma / 2), mean * _normal_cdf(z - sigma / 2)

    p_low, part_low = below(dist.low)
    p_high, part_high = below(dist.high) if dist.high is not None else (1.0, mean)
    return dist.low * p_low + (part_high - part_low) + (dist.high or 0) * (1 - p_high)


def traffic_means(traffic: Traffic | None) -> tuple[float | None, float | None]:
    """The mean prompt and output lengths the traffic draws (the trace's, or each distribution's); None where it
    states none.

    Raises:
        InputError: the trace cannot be read.
    """
    if traffic is None:
        return None, None
    if traffic.trace is not None:
        trace = read_trace(traffic.trace)
        return trace.mean_isl, trace.mean_osl
    return (length_mean(traffic.isl) if traffic.isl is not None else None,
            length_mean(traffic.osl) if traffic.osl is not None else None)


def length_source(traffic: Traffic | None, which: str) -> str | None:
    """What the traffic draws ``which`` (``isl`` or ``osl``) from, in words: ``trace 'azure-conv'``,
    ``lognormal:mean=2048,cv=0.8``; None when it draws from neither."""
    if traffic is None:
        return None
    if traffic.trace is not None:
        return f"trace '{traffic.trace}'"
    dist = traffic.isl if which == "isl" else traffic.osl
    return length_text(dist) if dist is not None else None


def _settle_length(which: str, given: int | None, mean: float | None, default: int, source: str | None) -> int:
    if mean is None:
        return default if given is None else given
    if given is None:
        return max(1, round(mean))
    if given >= 1 and abs(given / mean - 1) > LENGTH_TOLERANCE:
        what = "prompt" if which == "isl" else "output"
        raise InputError(f"{which} {given} and the mean {what} length of {source} ({mean:.0f}) differ by "
                         f"{abs(given / mean - 1):.0%}", field=which,
                         fix=f"leave out {which} (the mean is planned), or give one within "
                             f"{LENGTH_TOLERANCE:.0%} of the mean")
    return given


def workload_fields(traffic: Traffic | None, *, isl: int | None, osl: int | None, batch: int | None,
                    rate: float | None, default_isl: int = 2048, default_osl: int = 256) -> dict[str, Any]:
    """The workload's ``isl``, ``osl``, ``batch``, ``rate`` and ``traffic`` under the rules above, from the values
    given (None: not given).

    Raises:
        InputError: a given length more than 10% from its mean, a batch above a closed loop's clients, ``trace``
            arrival on a trace without times, or a trace that cannot be read.
    """
    mean_isl, mean_osl = traffic_means(traffic)
    fields: dict[str, Any] = {
        "isl": _settle_length("isl", isl, mean_isl, default_isl, length_source(traffic, "isl")),
        "osl": _settle_length("osl", osl, mean_osl, default_osl, length_source(traffic, "osl")),
        "batch": batch,
        "rate": rate,
        "traffic": traffic,
    }
    if traffic is None:
        return fields
    arrival = traffic.arrival
    if isinstance(arrival, ClosedLoop):
        if batch is None:
            fields["batch"] = arrival.clients
        elif batch > arrival.clients:
            raise InputError(f"batch {batch} exceeds the {counted(arrival.clients, 'client')} of arrival closed:"
                             f"{arrival.clients}: they never have more than {counted(arrival.clients, 'request')} out",
                             field="batch", fix=f"give a batch of at most {arrival.clients}, or more clients")
    if isinstance(arrival, TraceArrivals) and traffic.trace is not None:
        trace = read_trace(traffic.trace)
        require_times(trace)
        if rate is None:
            if trace.mean_rate is None:
                raise InputError(f"trace '{traffic.trace}' has all its requests at one instant: it has no rate",
                                 field="rate", fix="give --rate R (requests/s)")
            fields["rate"] = trace.mean_rate
    return fields
