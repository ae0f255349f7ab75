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
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from shardplan.contracts.common import Contract
from shardplan.contracts.parameters import read_parameters
from shardplan.errors import InputError
from shardplan.limits import MAX_TRACE_TOKENS
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
    tokens: int = Field(ge=1, le=MAX_TRACE_TOKENS, description="The length in tokens.")

    @property
    def mean(self) -> float:
        return float(self.tokens)


class LognormalLength(Contract):
    """Lengths drawn from a lognormal distribution with this mean and coefficient of variation, clipped to
    ``[low, high]``: the usual shape of prompt and output lengths in production traces."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["lognormal"] = Field(description="lognormal")
    mean: float = Field(gt=0, le=MAX_TRACE_TOKENS, description="Mean length in tokens (before clipping).")
    cv: float = Field(gt=0, le=20, description="Standard deviation over the mean.")
    low: int = Field(default=1, ge=1, le=MAX_TRACE_TOKENS, description="Shortest length drawn.")
    high: int | None = Field(default=None, ge=1, le=MAX_TRACE_TOKENS,
                             description="Longest length drawn; None: no cap.")

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        if self.high is not None and self.high < self.low:
            raise ValueError(f"low={self.low} is above high={self.high}: the longest length is below the shortest")
        return self

    @property
    def sigma(self) -> float:
        """The standard deviation of the underlying normal."""
        return math.sqrt(math.log1p(self.cv**2))


class UniformLength(Contract):
    """Lengths drawn uniformly from ``low`` to ``high`` tokens, both included."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["uniform"] = Field(description="uniform")
    low: int = Field(ge=1, le=MAX_TRACE_TOKENS, description="Shortest length.")
    high: int = Field(ge=1, le=MAX_TRACE_TOKENS, description="Longest length.")

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"low={self.low} is above high={self.high}: the longest length is below the shortest")
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

    @model_validator(mode="after")
    def _drawable(self) -> GammaArrivals:
        # The gaps are drawn with shape 1/cv^2 (tools/traffic/stream.py): a cv so small that its square
        # underflows, or the shape overflows float64, would divide by zero or draw NaN gaps.
        square = self.cv**2
        if square == 0 or not math.isfinite(1 / square):
            raise ValueError(f"cv={self.cv!r} is too small to draw gaps from (1/cv^2 overflows); for nearly even "
                             "arrivals give a cv such as 0.01")
        return self


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


_LENGTH_FIX = "write fixed:2048, lognormal:mean=2048,cv=0.8 (optionally low=,high=) or uniform:256,4096"
_ARRIVAL_FIX = "write poisson, gamma:cv=3, closed:32 (clients) or trace (the trace's own timestamps)"

_LENGTH_FORMS: dict[str, tuple[type[Contract], tuple[str, ...], tuple[str, ...]]] = {
    "fixed": (FixedLength, ("tokens",), ("tokens",)),
    "lognormal": (LognormalLength, ("mean", "cv", "low", "high"), ("mean", "cv")),
    "uniform": (UniformLength, ("low", "high"), ("low", "high")),
}
"""Each length form: its contract, its parameters in positional order, and the required ones."""
_ARRIVAL_FORMS: dict[str, tuple[type[Contract], tuple[str, ...], tuple[str, ...]]] = {
    "poisson": (Poisson, (), ()),
    "gamma": (GammaArrivals, ("cv",), ("cv",)),
    "closed": (ClosedLoop, ("clients",), ("clients",)),
    "trace": (TraceArrivals, (), ()),
}
_WHOLE = ("tokens", "low", "high", "clients")
"""Parameters that count tokens or clients: a fraction of one is refused, not rounded."""


def _parse_form(text: str, forms: dict[str, tuple[type[Contract], tuple[str, ...], tuple[str, ...]]], *,
                what: str, field: str, fix: str) -> Any:
    """The contract of the form ``text`` spells (``kind:parameters``), its parameters read strictly
    (:func:`~shardplan.contracts.parameters.read_parameters`) and its bounds checked by the contract.

    Raises:
        InputError: an unknown kind, a malformed parameter, or a value out of the contract's range, naming
            ``field`` and the parameter (never pydantic's text).
    """
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in forms:
        raise InputError(f"{field}: unknown {what} '{one_line(kind, 60)}'", field=field, fix=fix)
    contract, names, required = forms[kind]
    values = read_parameters(rest, form=kind, names=names, field=field, fix=fix, whole=_WHOLE, required=required)
    try:
        return contract.model_validate({"kind": kind, **values})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])  # empty for a rule across parameters (low above high)
        reason = str(first["msg"]).removeprefix("Value error, ")
        reason = f"{where} {reason.removeprefix('Input ')}" if where else reason
        raise InputError(f"{field}: '{one_line(text, 60)}': {one_line(reason, 160)}", field=field, fix=fix) from None


def parse_length(text: str, field: str = "isl_dist") -> LengthDist:
    """A length distribution from its text: ``fixed:N``, ``lognormal:mean=M,cv=C[,low=L,high=H]``,
    ``uniform:LOW,HIGH`` (parameters by name or in that order; token counts whole numbers).

    >>> parse_length("uniform:256,4096")
    UniformLength(kind='uniform', low=256, high=4096)

    Raises:
        InputError: an unknown kind, a malformed, repeated, unknown or missing parameter, or one out of range,
            naming ``field`` and the accepted forms.
    """
    dist: LengthDist = _parse_form(text, _LENGTH_FORMS, what="length distribution", field=field, fix=_LENGTH_FIX)
    return dist


def parse_arrival(text: str, field: str = "arrival") -> Arrival:
    """An arrival process from its text: ``poisson``, ``gamma:cv=C``, ``closed:N``, ``trace``.

    Raises:
        InputError: an unknown process, a malformed, repeated, unknown or missing parameter, or one out of
            range, naming ``field`` and the accepted forms.
    """
    arrival: Arrival = _parse_form(text, _ARRIVAL_FORMS, what="arrival process", field=field, fix=_ARRIVAL_FIX)
    return arrival


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
