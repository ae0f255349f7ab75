"""The search behind ``fit.py`` and ``fit_measured.py``: trial calibrations, the log-error loss of a set of
samples under one, a bounded grid search with zoom-ins, and the fit of every kernel-level parameter.

Predictions use shardplan's own ``op_time`` formulas with ``op_time.calibration`` swapped for the trial
parameters (:func:`using`), so the fit prices rows exactly as the planner would.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from shardplan.tools.cost import op_time
from shardplan.tools.cost.calibration import Calibration

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_samples import Sample  # noqa: E402

__all__ = [
    "using",
    "log_errors",
    "sse",
    "rms",
    "search_1d",
    "with_gemm",
    "with_memory",
    "with_attention",
    "with_collectives",
    "fit",
    "apply",
]


@contextmanager
def using(cal: Calibration) -> Iterator[None]:
    """Price with ``cal`` instead of the bundled calibration (and instead of any GPU's own profile)."""
    with mock.patch.object(op_time, "calibration", lambda: cal), mock.patch.object(
        op_time, "profile_for", lambda gpu: cal
    ):
        yield


def log_errors(samples: list[Sample], cal: Calibration) -> list[float]:
    with using(cal):
        return [math.log(s.predict() / s.measured_s) for s in samples]


def sse(samples: list[Sample], cal: Calibration) -> float:
    return sum(e * e for e in log_errors(samples, cal))


def rms(samples: list[Sample], cal: Calibration) -> float:
    return math.sqrt(sse(samples, cal) / len(samples)) if samples else float("nan")


def search_1d(
    loss: Callable[[float], float], lo: float, hi: float, *, steps: int = 40, log: bool = False, zooms: int = 2
) -> float:
    """Grid search on [lo, hi], then two finer grids around the best point (bounds respected)."""

    def grid(a: float, b: float) -> list[float]:
        if log:
            la, lb = math.log(a), math.log(b)
            return [math.exp(la + (lb - la) * i / steps) for i in range(steps + 1)]
        return [a + (b - a) * i / steps for i in range(steps + 1)]

    a, b = lo, hi
    best = min(grid(a, b), key=loss)
    for _ in range(zooms):
        points = grid(a, b)
        i = min(range(len(points)), key=lambda j: abs(points[j] - best))
        a, b = points[max(i - 1, 0)], points[min(i + 1, len(points) - 1)]
        best = min(grid(a, b) + [best], key=loss)
    return best


def with_gemm(
    cal: Calibration, efficiency: dict[str, float], m_half: float, k_half: float | None = None
) -> Calibration:
    update: dict[str, Any] = {"max_efficiency": {**cal.gemm.max_efficiency, **efficiency}, "m_half": m_half}
    if k_half is not None:
        update["k_half"] = k_half
    gemm = cal.gemm.model_copy(update=update)
    return cal.model_copy(update={"gemm": gemm})


def with_memory(cal: Calibration, efficiency: float) -> Calibration:
    return cal.model_copy(update={"memory": cal.memory.model_copy(update={"efficiency": efficiency})})


def with_attention(cal: Calibration, max_efficiency: float, l_half: float) -> Calibration:
    attention = cal.attention.model_copy(update={"max_efficiency": max_efficiency, "l_half": l_half})
    return cal.model_copy(update={"attention": attention})


def with_collectives(cal: Calibration, factor: float, efficiency: float) -> Calibration:
    coll = cal.collectives.model_copy(
        update={
            "latency_factor": {**cal.collectives.latency_factor, "all_reduce": factor},
            "bandwidth_efficiency": {**cal.collectives.bandwidth_efficiency, "intra_node": efficiency},
        }
    )
    return cal.model_copy(update={"collectives": coll})


def fit(samples: list[Sample], base: Calibration) -> dict[str, float]:
    """Fitted values, rounded to what the YAML will hold."""
    by_cat: dict[str, list[Sample]] = {}
    for s in samples:
        by_cat.setdefault(s.category, []).append(s)
    out: dict[str, float] = {}

    memory = by_cat.get("memory", [])
    mem_eff = round(search_1d(lambda e: sse(memory, with_memory(base, e)), 0.5, 1.0), 2)
    out["memory.efficiency"] = mem_eff
    cal = with_memory(base, mem_eff)

    def best_eff(dtype: str, m_half: float, k_half: float) -> float:
        rows = by_cat.get(f"gemm_{dtype}", [])
        return search_1d(lambda e: sse(rows, with_gemm(cal, {dtype: e}, m_half, k_half)), 0.2, 1.0, steps=32)

    def gemm_loss(m_half: float, k_half: float) -> float:
        return sum(
            sse(by_cat.get(f"gemm_{d}", []), with_gemm(cal, {d: best_eff(d, m_half, k_half)}, m_half, k_half))
            for d in ("bf16", "fp8")
        )

    # The inner-dimension term on a coarse grid (0 switches it off); m_half fitted for each.
    best: tuple[float, float, float] | None = None
    for k_half in (0.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0):
        m_half = round(search_1d(lambda mh, kh=k_half: gemm_loss(mh, kh), 1.0, 2048.0, steps=24, log=True), 1)
        loss = gemm_loss(m_half, k_half)
        if best is None or loss < best[0]:
            best = (loss, m_half, k_half)
    assert best is not None
    _, m_half, k_half = best
    effs = {d: round(best_eff(d, m_half, k_half), 2) for d in ("bf16", "fp8")}
    out.update(
        {
            "gemm.max_efficiency.bf16": effs["bf16"],
            "gemm.max_efficiency.fp8": effs["fp8"],
            "gemm.m_half": m_half,
            "gemm.k_half": k_half,
        }
    )

    attention = by_cat.get("attention", [])

    def attn_eff(l_half: float) -> float:
        return search_1d(lambda e: sse(attention, with_attention(cal, e, l_half)), 0.3, 1.0, steps=28)

    l_half = round(
        search_1d(lambda lh: sse(attention, with_attention(cal, attn_eff(lh), lh)), 1.0, 8192.0, steps=26, log=True)
    )
    out["attention.l_half"] = float(l_half)
    out["attention.max_efficiency"] = round(attn_eff(l_half), 2)

    reduce_rows = by_cat.get("all_reduce", [])

    def coll_factor(efficiency: float) -> float:
        return search_1d(lambda f: sse(reduce_rows, with_collectives(cal, f, efficiency)), 0.1, 8.0, steps=32, log=True)

    # Upper bound 1.0: the intra-node efficiency is shared with all-gather, all-to-all and send, which get
    # no in-switch reduction (NVLS all-reduce alone reaches a bus bandwidth above the link rate).
    bw_eff = round(
        search_1d(lambda e: sse(reduce_rows, with_collectives(cal, coll_factor(e), e)), 0.3, 1.0, steps=28), 2
    )
    out["collectives.bandwidth_efficiency.intra_node"] = bw_eff
    out["collectives.latency_factor.all_reduce"] = round(coll_factor(bw_eff), 2)
    return out


def apply(base: Calibration, values: dict[str, float], categories: set[str] | None = None) -> Calibration:
    """``base`` with the fitted values of ``categories`` (all when None)."""
    want = categories if categories is not None else {"memory", "gemm", "attention", "collectives"}
    cal = base
    if "memory" in want:
        cal = with_memory(cal, values["memory.efficiency"])
    if "gemm" in want:
        effs = {
            "bf16": values["gemm.max_efficiency.bf16"],
            "fp16": values["gemm.max_efficiency.bf16"],
            "fp8": values["gemm.max_efficiency.fp8"],
            "int8": values["gemm.max_efficiency.fp8"],
        }
        cal = with_gemm(cal, effs, values["gemm.m_half"], values.get("gemm.k_half"))
    if "attention" in want:
        cal = with_attention(cal, values["attention.max_efficiency"], values["attention.l_half"])
    if "collectives" in want:
        cal = with_collectives(
            cal, values["collectives.latency_factor.all_reduce"], values["collectives.bandwidth_efficiency.intra_node"]
        )
    return cal
