"""What the closed-loop comparison found for each measured row, and the figures it sums them to: median absolute
errors over rows, and each sweep's error taken apart into its base and its growth (``bench_closed_loop.py``).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

import numpy as np

__all__ = ["METRICS", "PERCENTILES", "Row", "base_and_growth", "growth_medians", "median_abs", "request_percentiles",
           "summarise"]

METRICS = ("ttft_ms", "tpot_ms", "tokens_per_s")
PERCENTILES = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")
"""The per-request statistics ``bench_serving`` prints beside its means: median and P99 of TTFT and of TPOT."""


@dataclass
class Row:
    """One measured row beside the simulator's figures for it and the analytic model's (its plan's)."""

    id: str
    clients: int
    osl: int
    past_kv: bool
    kv_sequences: int
    measured: dict[str, float]
    simulated: dict[str, float]
    analytic: dict[str, float]
    statistic: str
    source: str
    notes: list[str] = field(default_factory=list)
    whole_run: bool = False
    """Every request counted, the cold start and the wind-down included (a ``bench_serving`` row)."""
    requests: int = 0
    cold_ttft_ms: float = math.nan
    """Simulated mean TTFT of the clients' first requests, sent together at the start."""
    warm_ttft_ms: float = math.nan
    """Simulated mean TTFT of the requests after those."""
    burst: float = math.nan
    """Of the requests after the first N: how many entered the engine in the same step as each, on average (N when
    the clients run in lockstep, about 1 when they are spread)."""

    def error(self, metric: str, of: str = "simulated") -> float | None:
        """Signed error in % of the simulated (or analytic) figure, None where the row measured none."""
        measured = self.measured.get(metric)
        found = getattr(self, of).get(metric)
        if measured is None or found is None:
            return None
        return (found - measured) / measured * 100.0

    @property
    def sweep(self) -> str:
        """The sweep the row belongs to: its id without the concurrency."""
        return re.sub(r"-conc\d+", "", self.id)

    def little_ttft_ms(self) -> float | None:
        """The TTFT the row's own throughput and TPOT imply by Little's law over its closed loop, N = requests/s x
        (TTFT + (osl - 1) TPOT); a measured TTFT far from it was not taken in a steady state (a run too short for
        its queue to build up). None for a whole run: fewer than N clients are in flight at its start and end, and
        its lengths vary."""
        tokens, tpot = self.measured.get("tokens_per_s"), self.measured.get("tpot_ms")
        if tokens is None or tpot is None or self.whole_run:
            return None
        return self.clients * self.osl / tokens * 1e3 - (self.osl - 1) * tpot


def request_percentiles(ttft_ms: np.ndarray, tpot_ms: np.ndarray) -> dict[str, float]:
    """The median and P99 of each request's TTFT and TPOT as ``bench_serving`` computes them (``np.median`` and
    ``np.percentile``, linear), a TPOT only for requests of two output tokens or more (NaN here otherwise).

    >>> found = request_percentiles(np.arange(101.0), np.array([np.nan, 1.0, 3.0]))
    >>> {name: round(value, 2) for name, value in found.items()}
    {'ttft_p50_ms': 50.0, 'ttft_p99_ms': 99.0, 'tpot_p50_ms': 2.0, 'tpot_p99_ms': 2.98}
    """
    found = {}
    for name, values in (("ttft", ttft_ms), ("tpot", tpot_ms)):
        kept = values[~np.isnan(values)]
        found[f"{name}_p50_ms"] = float(np.median(kept)) if kept.size else math.nan
        found[f"{name}_p99_ms"] = float(np.percentile(kept, 99)) if kept.size else math.nan
    return found


def median_abs(rows: list[Row], metric: str, of: str = "simulated") -> tuple[float, int]:
    """Median absolute error (%) of ``metric`` over the rows that measured it, and how many they are."""
    errors = [abs(e) for r in rows if (e := r.error(metric, of)) is not None]
    return (statistics.median(errors) if errors else math.nan), len(errors)


def base_and_growth(rows: list[Row], metric: str) -> dict[str, tuple[list[float], list[float]]]:
    """The error of ``metric`` taken apart, per sweep: at its lowest concurrency (the *base*: the step prices, one
    engine release's speed, time outside the engine), and of its growth from there (the *growth*: queueing and how
    the clients meet, what the simulator adds to the step prices). A row's growth error is
    ``(simulated / simulated at the base) / (measured / measured at the base) - 1``, in %; nothing is fitted.

    Returns, by source, the |base errors| (one a sweep) and the |growth errors| (one a row past its sweep's base);
    sweeps with a single row measuring ``metric`` have no growth and are left out.

    >>> row = lambda n, m, s: Row("s-conc%d" % n, n, 1, False, 9, {"ttft_ms": m}, {"ttft_ms": s}, {}, "mean", "src")
    >>> base_and_growth([row(1, 100.0, 50.0), row(10, 200.0, 150.0)], "ttft_ms")
    {'src': ([50.0], [50.0])}
    """
    found: dict[str, tuple[list[float], list[float]]] = {}
    for sweep in dict.fromkeys(r.sweep for r in rows):
        chosen = sorted((r for r in rows if r.sweep == sweep and r.error(metric) is not None
                         and r.measured[metric] > 0 and r.simulated[metric] > 0), key=lambda r: r.clients)
        if len(chosen) < 2:
            continue
        first = chosen[0]
        base, growth = found.setdefault(first.source, ([], []))
        base.append(abs(first.error(metric) or 0.0))
        for r in chosen[1:]:
            ratio = (r.simulated[metric] / first.simulated[metric]) / (r.measured[metric] / first.measured[metric])
            growth.append(abs(ratio - 1.0) * 100.0)
    return found


def growth_medians(parts: dict[str, dict[str, tuple[list[float], list[float]]]]) -> dict[str, float]:
    """The median |base| and |growth| errors over every source, per metric, of :func:`base_and_growth`'s ``parts``
    (by metric)."""
    medians: dict[str, float] = {}
    for metric, part in parts.items():
        for i, name in enumerate(("base", "growth")):
            values = [v for pair in part.values() for v in pair[i]]
            medians[f"{metric}_{name}_median_abs_pct"] = statistics.median(values) if values else math.nan
    return medians


def summarise(rows: list[Row]) -> dict[str, dict[str, float]]:
    """Median absolute errors of TTFT and TPOT, simulated and analytic, over all rows and those past the KV cache."""
    out: dict[str, dict[str, float]] = {}
    for part, chosen in (("all", rows), ("past_kv", [r for r in rows if r.past_kv]),
                         ("within_kv", [r for r in rows if not r.past_kv])):
        for of in ("simulated", "analytic"):
            figures: dict[str, float] = {}
            for metric in METRICS:
                value, count = median_abs(chosen, metric, of)
                figures[f"{metric}_median_abs_pct"] = value
                figures[f"{metric}_rows"] = count
            out[f"{part}_{of}"] = figures
    return out
