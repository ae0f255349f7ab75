"""Traffic as people have it: how long prompts and outputs are, and how requests arrive.

A workload's ``isl`` and ``osl`` are the mean lengths the analytic serving model prices; its ``traffic`` says
how the requests around those means are drawn (a length distribution, or a request trace) and how they arrive
(a Poisson stream, bursts, a closed loop of clients, the trace's own timestamps). The engine simulator replays
exactly that; the analytic model sees the means.

>>> parse_length("lognormal:mean=2048,cv=0.8").mean
2048.0
>>> parse_arrival("closed:32")
ClosedLoop(kind='closed', clients=32)
>>> length_text(parse_length("lognormal:mean=2048,cv=0.8"))
'lognormal:mean=2048,cv=0.8'
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from shardplan.contracts.common import Contract
from shardplan.errors import InputError
from shardplan.text import one_line

__all__ = [
    "FixedLength",
    "LognormalLength",
    "UniformLength",
    "LengthDist",
    "Poisson",
    "GammaArrivals",
    "ClosedLoop",
    "TraceArrivals",
    "Arrival",
    "Traffic",
    "parse_length",
    "parse_arrival",
    "length_text",
    "arrival_text",
]


class FixedLength(Contract):
    """Every request has the same length."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["fixed"] = Field(description="fixed")
    tokens: int = Field(ge=1, description="The length in tokens.")

    @property
    def mean(self) -> float:
        return float(self.tokens)


class LognormalLength(Contract):
    """Lengths drawn from a lognormal distribution with this mean and coefficient of variation, clipped to
    ``[low, high]``: the usual shape of prompt and output lengths in production traces."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["lognormal"] = Field(description="lognormal")
    mean: float = Field(gt=0, description="Mean length in tokens (before clipping).")
    cv: float = Field(gt=0, le=20, description="Standard deviation over the mean.")
    low: int = Field(default=1, ge=1, description="Shortest length drawn.")
    high: int | None = Field(default=None, ge=1, description="Longest length drawn; None: no cap.")

    @property
    def sigma(self) -> float:
        """The standard deviation of the underlying normal."""
        return math.sqrt(math.log1p(self.cv**2))


class UniformLength(Contract):
    """Lengths drawn uniformly from ``low`` to ``high`` tokens, both included."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["uniform"] = Field(description="uniform")
    low: int = Field(ge=1, description="Shortest length.")
    high: int = Field(ge=1, description="Longest length.")

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"uniform:{self.low},{self.high}: the longest length is below the shortest")
        return self

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2


LengthDist = Annotated[FixedLength | LognormalLength | UniformLength, Field(discriminator="kind")]


class Poisson(Contract):
    """Requests arrive independently at the workload's rate (exponential gaps)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["poisson"] = Field(description="poisson")


class GammaArrivals(Contract):
    """Bursty arrivals: gamma-distributed gaps with the workload's mean rate and this coefficient of variation
    (1 is Poisson; 3 sends bursts separated by lulls)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["gamma"] = Field(description="gamma")
    cv: float = Field(gt=0, le=50, description="Standard deviation of the gaps over their mean.")


class ClosedLoop(Contract):
    """``clients`` clients, each sending its next request as soon as its last one completes, as benchmark tools
    run (no rate: the load follows from the deployment's speed)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["closed"] = Field(description="closed")
    clients: int = Field(ge=1, le=1_000_000, description="Clients, hence requests in flight at most.")


class TraceArrivals(Contract):
    """The arrival times of the request trace itself."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["trace"] = Field(description="trace")


Arrival = Annotated[Poisson | GammaArrivals | ClosedLoop | TraceArrivals, Field(discriminator="kind")]


class Traffic(Contract):
    """How the requests of a workload are drawn and how they arrive.

    Lengths come from ``trace`` (a request trace: a JSONL or CSV file, or a bundled trace's name) when one is
    given, else from ``isl`` and ``osl`` (None: the workload's fixed ``isl`` and ``osl``).
    """

    model_config = ConfigDict(frozen=True)

    isl: LengthDist | None = Field(default=None, description="Prompt lengths; None: the workload's isl, fixed.")
    osl: LengthDist | None = Field(default=None, description="Output lengths; None: the workload's osl, fixed.")
    trace: str | None = Field(default=None, description="A request trace (path or bundled name) to draw from.")
    arrival: Arrival = Field(default_factory=lambda: Poisson(kind="poisson"), description="How requests arrive.")

    @model_validator(mode="after")
    def _trace_times_need_a_trace(self) -> Traffic:
        if self.arrival.kind == "trace" and self.trace is None:
            raise ValueError("arrival 'trace' replays a trace's timestamps: give the trace too")
        return self


def _numbers(text: str, field: str, fix: str) -> dict[str, float]:
    """``mean=2048,cv=0.8`` or ``256,4096`` as named (or positional ``0``, ``1``, ...) numbers."""
    out: dict[str, float] = {}
    for position, part in enumerate(p.strip() for p in text.split(",") if p.strip()):
        key, _, value = part.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise InputError(f"{field}: '{one_line(part, 60)}' is not a number", field=field, fix=fix) from None
        if not math.isfinite(number):
            raise InputError(f"{field}: '{one_line(part, 60)}' is not a finite number", field=field, fix=fix)
        out[key.strip() or str(position)] = number
    return out


_LENGTH_FIX = "write fixed:2048, lognormal:mean=2048,cv=0.8 (optionally low=,high=) or uniform:256,4096"
_ARRIVAL_FIX = "write poisson, gamma:cv=3, closed:32 (clients) or trace (the trace's own timestamps)"


def parse_length(text: str, field: str = "isl_dist") -> LengthDist:
    """A length distribution from its text: ``fixed:N``, ``lognormal:mean=M,cv=C[,low=L,high=H]``,
    ``uniform:LOW,HIGH``.

    >>> parse_length("uniform:256,4096")
    UniformLength(kind='uniform', low=256, high=4096)

    Raises:
        InputError: an unknown kind or a malformed number, naming ``field`` and the accepted forms.
    """
    kind, _, rest = text.strip().partition(":")
    values = _numbers(rest, field, _LENGTH_FIX)
    try:
        if kind == "fixed":
            return FixedLength(kind="fixed", tokens=int(values.get("tokens", values.get("0", 0))))
        if kind == "lognormal":
            high = values.get("high")
            return LognormalLength(kind="lognormal", mean=values.get("mean", values.get("0", 0.0)),
                                   cv=values.get("cv", values.get("1", 0.0)), low=int(values.get("low", 1)),
                                   high=int(high) if high is not None else None)
        if kind == "uniform":
            return UniformLength(kind="uniform", low=int(values.get("low", values.get("0", 0))),
                                 high=int(values.get("high", values.get("1", 0))))
    except ValueError as exc:
        raise InputError(f"{field}: '{text}' is out of range ({exc})".replace("\n", " ")[:300], field=field,
                         fix=_LENGTH_FIX) from None
    raise InputError(f"{field}: unknown length distribution '{kind}'", field=field, fix=_LENGTH_FIX)


def parse_arrival(text: str, field: str = "arrival") -> Arrival:
    """An arrival process from its text: ``poisson``, ``gamma:cv=C``, ``closed:N``, ``trace``.

    Raises:
        InputError: an unknown process or a malformed number, naming ``field`` and the accepted forms.
    """
    kind, _, rest = text.strip().partition(":")
    values = _numbers(rest, field, _ARRIVAL_FIX)
    try:
        if kind == "poisson" and not values:
            return Poisson(kind="poisson")
        if kind == "gamma":
            return GammaArrivals(kind="gamma", cv=values.get("cv", values.get("0", 0.0)))
        if kind == "closed":
            return ClosedLoop(kind="closed", clients=int(values.get("clients", values.get("0", 0))))
        if kind == "trace" and not values:
            return TraceArrivals(kind="trace")
    except ValueError as exc:
        raise InputError(f"{field}: '{text}' is out of range ({exc})".replace("\n", " ")[:300], field=field,
                         fix=_ARRIVAL_FIX) from None
    raise InputError(f"{field}: unknown arrival process '{text}'", field=field, fix=_ARRIVAL_FIX)


def _number(value: float) -> str:
    """A number as its shortest exact text: ``2048`` for 2048.0, ``0.8``."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def length_text(dist: LengthDist) -> str:
    """The text :func:`parse_length` reads back into ``dist``.

    >>> length_text(UniformLength(kind="uniform", low=256, high=4096))
    'uniform:256,4096'
    """
    if isinstance(dist, FixedLength):
        return f"fixed:{dist.tokens}"
    if isinstance(dist, UniformLength):
        return f"uniform:{dist.low},{dist.high}"
    bounds = (f",low={dist.low}" if dist.low != 1 else "") + (f",high={dist.high}" if dist.high is not None else "")
    return f"lognormal:mean={_number(dist.mean)},cv={_number(dist.cv)}{bounds}"


def arrival_text(arrival: Arrival) -> str:
    """The text :func:`parse_arrival` reads back into ``arrival``.

    >>> arrival_text(GammaArrivals(kind="gamma", cv=3))
    'gamma:cv=3'
    """
    if isinstance(arrival, GammaArrivals):
        return f"gamma:cv={_number(arrival.cv)}"
    if isinstance(arrival, ClosedLoop):
        return f"closed:{arrival.clients}"
    return arrival.kind
