"""The rows of the speculation and prefix comparison (``compare_speculation_prefix.py``): each request's four
pricings and each public MTP row's result, with the cells and summary lines the tables print from them."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from aic_double_count import Breakdown, counts_allreduces_twice, without_double_count
from comparison_tables import fmt
from feature_requests import FeatureRequest
from speculation_rows import PublicRow, source_name

from shardplan.tools.cost.measured.database import system_for_gpu

__all__ = ["Figures", "FeatureRow", "PublicResult", "feature_cells", "feature_summary", "public_cells",
           "public_summary"]

@dataclass(frozen=True)
class Figures:
    ttft_ms: float
    tpot_ms: float


@dataclass
class FeatureRow:
    """One request's four pricings (AIConfigurator and shardplan, feature off and on)."""

    request: FeatureRequest
    aic_off: Figures | None = None
    aic_on: Figures | None = None
    own_off: Figures | None = None
    own_on: Figures | None = None
    notes: list[str] = field(default_factory=list)
    aic_detail: dict[str, Breakdown] = field(default_factory=dict)
    """AIConfigurator's per-op breakdown of the "off" and "on" calls, where its DeepSeek model is asked."""

    def aic_single(self, key: str) -> Figures | None:
        """AIConfigurator's figures of the "off" or "on" call, less the all-reduces it counts twice where it does
        (:mod:`aic_double_count`); as they are elsewhere."""
        figures = self.aic_off if key == "off" else self.aic_on
        breakdown, r = self.aic_detail.get(key), self.request
        if figures is None or breakdown is None or not counts_allreduces_twice(
                breakdown, r.engine, r.worker.tp, r.worker.dp):
            return figures
        return Figures(*without_double_count(breakdown, figures.ttft_ms, figures.tpot_ms, r.batch))


def _error(ours: float | None, theirs: float | None) -> float | None:
    """shardplan's relative error against AIConfigurator's figure."""
    if ours is None or theirs is None or theirs <= 0 or math.isnan(ours):
        return None
    return ours / theirs - 1.0


def _effect(on: Figures | None, off: Figures | None, name: str) -> float | None:
    if on is None or off is None or getattr(off, name) <= 0:
        return None
    return float(getattr(on, name) / getattr(off, name))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _abs_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def feature_cells(row: FeatureRow) -> dict[str, str]:
    """One request's cells: both tools' figures off and on, the error with the feature on, the effects."""
    r, a_off, a_on, s_off, s_on = row.request, row.aic_off, row.aic_on, row.own_off, row.own_on

    def pair(theirs: Figures | None, ours: Figures | None, name: str, digits: int) -> str:
        return f"{fmt(getattr(theirs, name, None), digits)} / {fmt(getattr(ours, name, None), digits)}"

    def effects(name: str) -> str:
        return f"{fmt(_effect(a_on, a_off, name), 2)} / {fmt(_effect(s_on, s_off, name), 2)}"

    return {
        "request": f"{r.label} ({r.isl}/{r.osl}, {r.batching} {r.batch})",
        "feature": r.feature_text,
        "off: TTFT; TPOT ms, AIC / shardplan": f"{pair(a_off, s_off, 'ttft_ms', 0)}; "
        f"{pair(a_off, s_off, 'tpot_ms', 2)}",
        "on: TTFT ms AIC / shardplan": pair(a_on, s_on, "ttft_ms", 0),
        "on: TTFT err": _pct(_error(s_on and s_on.ttft_ms, a_on and a_on.ttft_ms)),
        "on: TPOT ms AIC / shardplan": pair(a_on, s_on, "tpot_ms", 2),
        "on: TPOT err": _pct(_error(s_on and s_on.tpot_ms, a_on and a_on.tpot_ms)),
        "effect on TTFT, TPOT: AIC / shardplan": f"{effects('ttft_ms')}; {effects('tpot_ms')}",
        "notes": "; ".join(row.notes) or "-",
    }


def _median_abs(values: list[float | None]) -> float | None:
    present = [abs(value) for value in values if value is not None]
    return statistics.median(present) if present else None


def _medians(chosen: list[FeatureRow], single: bool = False) -> str:
    """Median |error| of TTFT and TPOT, feature on, off and its effect; ``single``: against AIConfigurator's
    figures less the all-reduces it counts twice (:meth:`FeatureRow.aic_single`)."""
    parts = []
    for name, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        pairs = [(r, r.aic_single("on") if single else r.aic_on, r.aic_single("off") if single else r.aic_off)
                 for r in chosen]
        on = _median_abs([_error(getattr(r.own_on, name, None), getattr(a_on, name, None)) for r, a_on, _ in pairs])
        off = _median_abs([_error(getattr(r.own_off, name, None), getattr(a_off, name, None))
                           for r, _, a_off in pairs])
        effect = _median_abs([
            _error(_effect(r.own_on, r.own_off, name), _effect(a_on, a_off, name)) for r, a_on, a_off in pairs
        ])
        parts.append(f"{label} {_abs_pct(on)} (off {_abs_pct(off)}, effect {_abs_pct(effect)})")
    return ", ".join(parts)


def feature_summary(rows: list[FeatureRow]) -> list[str]:
    """Per feature, over every request, then per engine where the feature was asked of several: median |error| of
    TTFT and TPOT with the feature on, off, and of the feature's effect (on / off), each over every request and
    over the static batches alone (where neither tool's queueing enters)."""
    lines = []
    for feature in ("spec", "prefix"):
        chosen = [row for row in rows if row.request.feature == feature]
        if not chosen:
            continue
        title = "speculation (--nextn / --spec)" if feature == "spec" else "prefix caching (--prefix / --prefix-hit)"
        lines += _summary_lines(f"{title}, {len(chosen)} requests", chosen, "")
        engines = sorted({row.request.engine for row in chosen})
        if len(engines) > 1:
            for engine in engines:
                on_engine = [row for row in chosen if row.request.engine == engine]
                lines += _summary_lines(f"  on {engine} ({len(on_engine)} requests)", on_engine, "  ")
    return lines


def _summary_lines(title: str, chosen: list[FeatureRow], indent: str) -> list[str]:
    lines = [f"{title}, median |shardplan - AIC| / AIC: {_medians(chosen)}"]
    static = [row for row in chosen if row.request.batching == "static"]
    if static and len(static) < len(chosen):
        lines.append(f"{indent}  the {len(static)} static batches: {_medians(static)}")
    single = [row for row in chosen if row.aic_single("off") is not row.aic_off]
    if single:
        lines.append(f"{indent}  AIC less the all-reduces its DeepSeek vLLM model counts twice ({len(single)} "
                     f"requests): {_medians(chosen, single=True)}")
        if static and len(static) < len(chosen):
            lines.append(f"{indent}    the {len(static)} static batches: {_medians(static, single=True)}")
    return lines


@dataclass
class PublicResult:
    public: PublicRow
    measured_tpot_ms: float | None = None
    own_off: Figures | None = None
    own_on: Figures | None = None
    error: str | None = None

    @property
    def tpot_error(self) -> float | None:
        return _error(self.own_on and self.own_on.tpot_ms, self.measured_tpot_ms)

    @property
    def speedups(self) -> tuple[float | None, float | None]:
        """(measured, shardplan's) speed-up over the same source's row without speculation."""
        row = self.public.row
        measured = None
        if row.get("no_spec_value"):  # in the row's own metric: a per-user speed grows, a TPOT shrinks
            ratio = float(row["value"]) / float(row["no_spec_value"])
            measured = 1 / ratio if row["metric"] == "tpot_ms" else ratio
        ours = _effect(self.own_off, self.own_on, "tpot_ms")
        return measured, ours


def public_cells(result: PublicResult) -> dict[str, str]:
    """One public row's cells: its stated speculation, the measured and predicted TPOT, the speed-ups."""
    public, row = result.public, result.public.row
    measured, ours = result.speedups
    return {
        "row": public.id,
        "source": source_name(row),
        "speculation (stated)": f"mtp:{public.draft_tokens}, A={public.accepted:g}",
        "TPOT ms measured / shardplan": f"{fmt(result.measured_tpot_ms, 2)} / "
        f"{fmt(result.own_on.tpot_ms if result.own_on else None, 2)}",
        "TPOT err": _pct(result.tpot_error),
        "speed-up over no MTP: measured / shardplan": f"{fmt(measured, 2)} / {fmt(ours, 2)}",
        "notes": result.error or "-",
    }


def public_summary(results: list[PublicResult]) -> str:
    """The median errors over every priced row, then apart for the rows whose GPU NVIDIA's measured tables cover and
    for those the roofline prices (where the baseline step, not the speculation, sets most of the error)."""
    lines = [_public_line("public MTP rows", results)]
    measured = [r for r in results if system_for_gpu(str(r.public.row["gpu"])) is not None]
    roofline = [r for r in results if system_for_gpu(str(r.public.row["gpu"])) is None]
    if measured and roofline:
        gpus = ", ".join(sorted({str(r.public.row["gpu"]) for r in roofline}))
        lines += [_public_line("  on GPUs with measured kernel tables", measured),
                  _public_line(f"  on GPUs the roofline prices ({gpus})", roofline)]
    return "\n".join(lines)


def _public_line(label: str, results: list[PublicResult]) -> str:
    errors = [result.tpot_error for result in results]
    speedups = [_error(result.speedups[1], result.speedups[0]) for result in results]
    priced = sum(1 for error in errors if error is not None)
    return (f"{label}, {priced} priced: median |TPOT error| {_abs_pct(_median_abs(errors))}, "
            f"median |speed-up error| {_abs_pct(_median_abs(speedups))}")
