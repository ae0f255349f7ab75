"""Whether figures meet a request's targets: one verdict, typed misses, one tolerance.

Everything that asks "does this deployment meet the targets?" asks :func:`misses`: the serving model's
bisection to the target, the search's ranking and its frontier of deployments that meet them, the plan's
status, the tool results, the agent's checker and the terminal. A miss says which figure, its value, the
target and the gap, and carries the sentence the terminal and the agent print.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from shardplan.contracts.common import Contract
from shardplan.contracts.figures import Figures
from shardplan.errors import InputError

__all__ = [
    "TOLERANCE",
    "Metric",
    "SloPercentile",
    "SLO_PERCENTILES",
    "parse_slo_percentile",
    "Targets",
    "Miss",
    "misses",
    "meets",
    "shortfall",
    "within",
    "judged_latency",
    "miss_texts",
]

TOLERANCE = 1e-9
"""Relative slack on every bound, for floating-point rounding only: a target is a bound, and how far the
figures themselves may be off is the model's stated error, which the near-tie notes carry."""

Metric = Literal["ttft", "tpot", "rate", "memory"]

SloPercentile = Literal["mean", "p50", "p90", "p95", "p99"]
"""Which statistic of TTFT and TPOT the latency targets bound: the mean (the analytic steady state's figure) or a
percentile over requests (which only a simulation measures)."""

SLO_PERCENTILES: tuple[SloPercentile, ...] = ("mean", "p50", "p90", "p95", "p99")


def parse_slo_percentile(text: str, field: str = "slo_percentile") -> SloPercentile:
    """The statistic a target bounds, from ``mean``, ``50``/``p50``, ``90``, ``95``, ``99`` (``P99`` too).

    >>> parse_slo_percentile("99"), parse_slo_percentile("P90"), parse_slo_percentile("mean")
    ('p99', 'p90', 'mean')
    """
    cleaned = text.strip().lower().removesuffix("th")
    name = cleaned if cleaned in ("mean", "avg") else "p" + cleaned.removeprefix("p")
    name = "mean" if name == "avg" else name
    for known in SLO_PERCENTILES:
        if name == known:
            return known
    raise InputError(f"{field}: '{text}' is not a statistic the targets can bound", field=field,
                     fix="give mean, 50, 90, 95 or 99")


class Targets(Contract):
    """What the deployment must meet: latency ceilings and a request rate; None means no target."""

    model_config = ConfigDict(frozen=True)

    ttft_ms: float | None = Field(default=None, gt=0, description="Time to first token at most this, ms.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Time per output token at most this, ms.")
    rate: float | None = Field(default=None, gt=0, description="At least this many requests per second served.")
    percentile: SloPercentile = Field(
        default="mean",
        description="Which statistic of TTFT and TPOT the latency ceilings bound: mean, or p50/p90/p95/p99 over the "
        "requests of a simulated run.",
    )


class Miss(Contract):
    """One target the figures miss."""

    model_config = ConfigDict(frozen=True)

    metric: Metric = Field(description="ttft, tpot, rate, or memory (the worst GPU against its capacity).")
    value: float = Field(description="The figure: ms for ttft and tpot, requests/s for rate, GB for memory.")
    target: float = Field(description="The bound it misses, in the same unit.")
    gap: float = Field(gt=0, description="How far past the bound, relative: 0.2 is 20% over (under, for rate).")
    message: str = Field(description="The miss in words, with the numbers.")


def within(metric: Literal["ttft", "tpot"], value_ms: float, targets: Targets) -> bool:
    """Whether a latency of ``value_ms`` is within its target (True when there is none): the bound :func:`misses`
    applies, for screening a worker's step before a deployment is priced.

    >>> within("tpot", 30.0, Targets(tpot_ms=30)), within("ttft", 501.0, Targets(ttft_ms=500))
    (True, False)
    >>> within("ttft", 9e9, Targets())
    True
    """
    bound = targets.ttft_ms if metric == "ttft" else targets.tpot_ms
    return bound is None or value_ms <= bound * (1 + TOLERANCE)


def _over(metric: Literal["ttft", "tpot"], value: float, bound: float, message: str) -> Miss | None:
    if value <= bound * (1 + TOLERANCE):  # the bound within() applies
        return None
    return Miss(metric=metric, value=value, target=bound, gap=value / bound - 1, message=message)


def judged_latency(figures: Figures, metric: Literal["ttft", "tpot"], percentile: SloPercentile) -> tuple[float, str]:
    """The value of ``metric`` a target of ``percentile`` judges, and its name in a sentence: the percentile where
    the figures measured one (a simulation), else the mean, which never exceeds a percentile above the median,
    so analytic figures screen a percentile target without ever rejecting a deployment that could meet it.

    >>> from shardplan.contracts.figures import Percentiles, make_figures
    >>> p = Percentiles(p50_ms=90, p90_ms=200, p95_ms=260, p99_ms=400)
    >>> f = make_figures("simulation", ttft_ms=120, tpot_ms=20, osl=2, tokens_per_s=200, requests_per_s=9.5,
    ...                  memory_per_gpu_gb=70, gpu_memory_gb=80, fits=True, gpus_used=1, gpu_budget=1,
    ...                  percentiles={"ttft": p, "tpot": p, "e2e": p})
    >>> judged_latency(f, "ttft", "p99"), judged_latency(f, "ttft", "mean")
    ((400.0, 'P99 TTFT'), (120.0, 'TTFT'))
    """
    label = metric.upper()
    mean = float(getattr(figures, f"{metric}_ms"))
    if percentile == "mean":
        return mean, label
    measured = figures.percentiles.get(metric)
    if measured is None:
        return mean, f"{label} (mean, not simulated)"
    return float(getattr(measured, f"{percentile}_ms")), f"{percentile.upper()} {label}"


def misses(figures: Figures, targets: Targets) -> list[Miss]:
    """Each target ``figures`` miss, in the order TTFT, TPOT, rate, memory. Latency targets bound the statistic
    ``targets.percentile`` names (:func:`judged_latency`).

    >>> from shardplan.contracts.figures import make_figures
    >>> f = make_figures("steady_state", ttft_ms=120, tpot_ms=20, osl=2, tokens_per_s=200, requests_per_s=9.5,
    ...                  memory_per_gpu_gb=70, gpu_memory_gb=80, fits=True, gpus_used=1, gpu_budget=1)
    >>> [m.message for m in misses(f, Targets(ttft_ms=100, tpot_ms=25, rate=10))]
    ['TTFT 120.0 ms > target 100 ms (+20.0 ms)', 'serves 9.50 requests/s < rate 10 (-0.50 requests/s)']
    >>> round(shortfall(f, Targets(ttft_ms=100, tpot_ms=25, rate=10)), 3)
    0.25
    """
    found: list[Miss | None] = []
    if targets.ttft_ms is not None:
        t = targets.ttft_ms
        v, name = judged_latency(figures, "ttft", targets.percentile)
        found.append(_over("ttft", v, t, f"{name} {v:,.1f} ms > target {t:g} ms (+{v - t:,.1f} ms)"))
    if targets.tpot_ms is not None:
        t = targets.tpot_ms
        v, name = judged_latency(figures, "tpot", targets.percentile)
        found.append(_over("tpot", v, t, f"{name} {v:.2f} ms > target {t:g} ms (+{v - t:.2f} ms)"))
    if targets.rate is not None and figures.requests_per_s < targets.rate * (1 - TOLERANCE):
        v, t = figures.requests_per_s, targets.rate
        found.append(Miss(metric="rate", value=v, target=t, gap=1 - v / t,
                          message=f"serves {v:.2f} requests/s < rate {t:g} (-{t - v:.2f} requests/s)"))
    if not figures.fits:
        v, t = figures.memory_per_gpu_gb, figures.gpu_memory_gb
        # A report may say it does not fit within the engine's headroom while the total is under the GPU's size.
        found.append(Miss(metric="memory", value=v, target=t, gap=max(v / t - 1, TOLERANCE),
                          message=f"memory: {v:.1f} GB per GPU does not fit {t:g} GB with the engine's headroom "
                                  "(MEM-1)"))
    return [m for m in found if m is not None]


def meets(figures: Figures, targets: Targets) -> bool:
    """Whether ``figures`` meet every target (and fit in memory)."""
    return not misses(figures, targets)


def shortfall(figures: Figures, targets: Targets) -> float:
    """How far ``figures`` miss the targets: the relative gaps summed, 0 when they meet them all."""
    return sum(m.gap for m in misses(figures, targets))


def miss_texts(found: list[Miss]) -> list[str]:
    """The sentences of ``found``, for a line of text."""
    return [m.message for m in found]
