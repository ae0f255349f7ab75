"""Fit the cost model's kernel-level efficiency parameters to the public kernel measurements.

Reads ``benchmarks/calibration/kernels.yaml`` (every row cites its source) and fits, by minimising the
squared log error between predicted and measured time (each row weighs the same, whatever its size):

* ``gemm.max_efficiency`` for bf16 and fp8 and one shared ``gemm.m_half`` -- GEMM rows;
* ``memory.efficiency`` -- HBM bandwidth rows (STREAM, device copies, weight-streaming GEMV);
* ``attention.max_efficiency`` and ``attention.l_half`` -- FlashAttention-3 prefill rows with a shape;
* ``collectives.latency_factor.all_reduce`` and ``collectives.bandwidth_efficiency.intra_node`` --
  intra-node NCCL all-reduce rows that give both a message size and a time.

Predictions use shardplan's own formulas, not a copy of them: every row becomes a ``ComputeNode`` (sizes
from ``tools/builder/ops.py`` where the operator exists there) or a ``CommNode`` and is timed with
``op_time.compute_time_s`` / ``op_time.collective_time_s`` on a catalog cluster of the row's GPU, with
``op_time.calibration`` swapped for the trial parameters. Kernel benchmarks time one kernel issued
back to back, so a compute prediction is the roofline term plus ONE kernel launch at the configured
``launch.prefill_us`` (``--launch`` changes that; the model's extra kernels per node kind are left out).
Memory rows give only a bandwidth, so they are priced as a 1 GiB transfer without the launch term.

GPUs: H800 rows are timed on the catalog H100, since the H800 has H100 SXM compute and HBM (989 bf16 /
1979 fp8 dense TFLOP/s, 3.35 TB/s) and differs only in NVLink, which no compute row depends on. GB200
and unnamed GPUs are not in the catalog and are left out. Rows that are end-to-end measurements used
as held-out validation by ``error_table.py`` (the gpt-fast A100 bandwidth row) are left out here.

Search: pure-Python coordinate search on bounded grids with two zoom-ins (no scipy). The fit of each
category uses the fitted memory efficiency for the memory-bound side of its rooflines.

Caveats, read with the printed table:

* bf16 GEMM rows are mostly memory-bound (H100 m <= 128); only the B200 m = 128/256 rows constrain
  the bf16 ceiling, so ``max_efficiency.bf16`` is weakly determined. The fp8 rows carry the fit.
* The model's GEMM efficiency depends on m only; shape effects in n and k (DeepGEMM m=4096 k=512 at
  30% of peak) are left in the residuals.
* The all-reduce rows are nccl-tests with NVLS and mostly WITHOUT CUDA graphs (Azure), so the fitted
  latency factor includes eager-mode launch cost; the one CUDA-graph row (2 ranks, 6 us) is then
  over-predicted. The intra-node bandwidth efficiency is fitted on all-reduce only but is shared by
  every intra-node collective kind, hence its upper bound of 1.0.

Usage::

    .venv/bin/python benchmarks/calibration/fit.py            # print the table
    .venv/bin/python benchmarks/calibration/fit.py --rows     # also every row's residual
    .venv/bin/python benchmarks/calibration/fit.py --write    # update tools/data/calibration.yaml

``--write`` edits only the numbers in place (comments and layout kept) and only for a category the fit
clearly improves: RMS log error down by at least 10% and by at least 0.01. Smaller gains are noise
against the spread of the rows and would only churn the file. fp16 and int8 GEMM efficiencies are tied
to bf16 and fp8 (same tensor-core datapaths at the same peaks); fp4 and fp32 have no catalog-GPU rows
and are left as they are.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from shardplan.tools.cost import op_time
from shardplan.tools.cost.calibration import Calibration, calibration

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kernel_samples import (  # noqa: E402
    Sample,
    attention_samples,
    collective_samples,
    gemm_samples,
    memory_samples,
)

KERNELS = HERE / "kernels.yaml"
CALIBRATION_YAML = Path(str(resources.files("shardplan.tools") / "data" / "calibration.yaml"))



# -- search ---------------------------------------------------------------------------------------------


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


# -- YAML edit ------------------------------------------------------------------------------------------

# parameter -> (section, key, key inside a flow mapping or None, format)
_YAML_SLOTS: dict[str, tuple[str, str, str | None, str]] = {
    "gemm.max_efficiency.bf16": ("gemm", "max_efficiency", "bf16", "{:.2f}"),
    "gemm.max_efficiency.fp16": ("gemm", "max_efficiency", "fp16", "{:.2f}"),
    "gemm.max_efficiency.fp8": ("gemm", "max_efficiency", "fp8", "{:.2f}"),
    "gemm.max_efficiency.int8": ("gemm", "max_efficiency", "int8", "{:.2f}"),
    "gemm.m_half": ("gemm", "m_half", None, "{:.1f}"),
    "gemm.k_half": ("gemm", "k_half", None, "{:.1f}"),
    "memory.efficiency": ("memory", "efficiency", None, "{:.2f}"),
    "attention.max_efficiency": ("attention", "max_efficiency", None, "{:.2f}"),
    "attention.l_half": ("attention", "l_half", None, "{:.1f}"),
    "collectives.latency_factor.all_reduce": ("collectives", "latency_factor", "all_reduce", "{:.2f}"),
    "collectives.bandwidth_efficiency.intra_node": ("collectives", "bandwidth_efficiency", "intra_node", "{:.2f}"),
}
_NUMBER = r"[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"


def edit_yaml(text: str, values: dict[str, float]) -> str:
    """``text`` with the numbers of ``values`` replaced in place; every other character kept."""
    done: Counter[str] = Counter()
    lines, section = [], ""
    for line in text.splitlines(keepends=True):
        top = re.match(r"^([A-Za-z_]\w*):", line)
        if top:
            section = top.group(1)
        for name, value in values.items():
            sec, key, sub, fmt = _YAML_SLOTS[name]
            if sec != section or not re.match(rf"^\s+{key}:", line):
                continue
            number = fmt.format(value)  # digits only, safe in a replacement string
            pattern = rf"^(\s+{key}:\s*){_NUMBER}" if sub is None else rf"([{{,]\s*{sub}:\s*){_NUMBER}"
            line, count = re.subn(pattern, rf"\g<1>{number}", line)
            done[name] += count
        lines.append(line)
    missing = [name for name in values if done[name] != 1]
    if missing:
        raise SystemExit(f"could not place {missing} in {CALIBRATION_YAML}; edit it by hand")
    return "".join(lines)


def write_yaml(values: dict[str, float]) -> None:
    text = edit_yaml(CALIBRATION_YAML.read_text(), values)
    check = Calibration.model_validate(yaml.safe_load(text))
    for name, value in values.items():
        sec, key, sub, _ = _YAML_SLOTS[name]
        got = getattr(getattr(check, sec), key)
        got = got[sub] if sub else got
        if not math.isclose(got, value, abs_tol=1e-9):
            raise SystemExit(f"edit check failed for {name}: wrote {got}, wanted {value}")
    CALIBRATION_YAML.write_text(text)


# -- report ---------------------------------------------------------------------------------------------

_CATEGORY_OF = {
    "memory.efficiency": "memory",
    "gemm.max_efficiency.bf16": "gemm",
    "gemm.max_efficiency.fp8": "gemm",
    "gemm.m_half": "gemm",
    "gemm.k_half": "gemm",
    "attention.max_efficiency": "attention",
    "attention.l_half": "attention",
    "collectives.latency_factor.all_reduce": "collectives",
    "collectives.bandwidth_efficiency.intra_node": "collectives",
}
_SAMPLES_OF = {
    "memory.efficiency": ("memory",),
    "gemm.max_efficiency.bf16": ("gemm_bf16",),
    "gemm.max_efficiency.fp8": ("gemm_fp8",),
    "gemm.m_half": ("gemm_bf16", "gemm_fp8"),
    "gemm.k_half": ("gemm_bf16", "gemm_fp8"),
    "attention.max_efficiency": ("attention",),
    "attention.l_half": ("attention",),
    "collectives.latency_factor.all_reduce": ("all_reduce",),
    "collectives.bandwidth_efficiency.intra_node": ("all_reduce",),
}


def current_value(cal: Calibration, name: str) -> float:
    sec, key, sub, _ = _YAML_SLOTS[name]
    got = getattr(getattr(cal, sec), key)
    return float(got[sub] if sub else got)


def clear_gain(before: float, after: float) -> bool:
    """A fit worth writing: RMS log error down by at least 10% of itself and by 0.01 (1%) absolute."""
    return after <= 0.9 * before and before - after >= 0.01


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update tools/data/calibration.yaml in place")
    parser.add_argument("--rows", action="store_true", help="print every row's residual and the excluded rows")
    parser.add_argument(
        "--launch",
        choices=("prefill", "decode", "none"),
        default="prefill",
        help="launch term added to one measured kernel (default: launch.prefill_us)",
    )
    args = parser.parse_args(argv)

    data = yaml.safe_load(KERNELS.read_text())
    parts = [
        gemm_samples(data["gemm"], args.launch),
        memory_samples(data["memory"]),
        attention_samples(data["attention"], args.launch),
        collective_samples(data["collectives"]),
    ]
    samples = [s for part in parts for s in part[0]]
    excluded = [e for part in parts for e in part[1]]

    base = calibration()
    values = fit(samples, base)
    fitted = apply(base, values)

    def cat_rows(cats: tuple[str, ...]) -> list[Sample]:
        return [s for s in samples if s.category in cats]

    print(
        f"Fit of kernel-level parameters to {KERNELS.relative_to(HERE.parents[1])} "
        f"(launch term per measured kernel: {args.launch}).\n"
    )
    print("| parameter | fitted | calibration.yaml | rows used | RMS log error before | after |")
    print("|---|---|---|---|---|---|")
    for name, value in values.items():
        rows = cat_rows(_SAMPLES_OF[name])
        before, after = rms(rows, base), rms(rows, fitted)
        print(f"| {name} | {value:g} | {current_value(base, name):g} | {len(rows)} | {before:.3f} | {after:.3f} |")

    print("\nFit quality per category (RMS of ln(predicted/measured); exp(RMS) is the typical factor off):\n")
    print("| category | rows | RMS before | RMS after | typical factor after | worst row after (ln error) |")
    print("|---|---|---|---|---|---|")
    improved: set[str] = set()
    groups = {
        "gemm": ("gemm_bf16", "gemm_fp8"),
        "gemm (bf16)": ("gemm_bf16",),
        "gemm (fp8)": ("gemm_fp8",),
        "memory": ("memory",),
        "attention": ("attention",),
        "collectives": ("all_reduce",),
    }
    for title, cats in groups.items():
        rows = cat_rows(cats)
        before, after = rms(rows, base), rms(rows, fitted)
        errs = log_errors(rows, fitted)
        worst = max(range(len(rows)), key=lambda i: abs(errs[i]))
        if title in ("gemm", "memory", "attention", "collectives") and clear_gain(before, after):
            improved.add(title)
        print(
            f"| {title} | {len(rows)} | {before:.3f} | {after:.3f} | x{math.exp(after):.2f} | "
            f"{rows[worst].label} ({errs[worst]:+.2f}) |"
        )

    reasons = Counter(f"{e.section}: {e.reason}" for e in excluded)
    print(f"\nRows left out ({len(excluded)}): " + "; ".join(f"{r} ({c})" for r, c in sorted(reasons.items())))

    if args.rows:
        print("\n| category | row | measured us | before us | after us | ln error after |")
        print("|---|---|---|---|---|---|")
        for s in samples:
            with using(base):
                b = s.predict()
            with using(fitted):
                a = s.predict()
            print(
                f"| {s.category} | {s.label} | {s.measured_s * 1e6:.1f} | {b * 1e6:.1f} | {a * 1e6:.1f} | "
                f"{math.log(a / s.measured_s):+.2f} |"
            )
        print("\n| section | excluded row | reason |\n|---|---|---|")
        for e in excluded:
            print(f"| {e.section} | {e.label} | {e.reason} |")

    if args.write:
        chosen = {name: value for name, value in values.items() if _CATEGORY_OF[name] in improved}
        if "gemm.max_efficiency.bf16" in chosen:
            chosen["gemm.max_efficiency.fp16"] = chosen["gemm.max_efficiency.bf16"]
        if "gemm.max_efficiency.fp8" in chosen:
            chosen["gemm.max_efficiency.int8"] = chosen["gemm.max_efficiency.fp8"]
        skipped = sorted({_CATEGORY_OF[n] for n in values} - improved)
        if chosen:
            write_yaml(chosen)
        print(
            f"\nWrote {', '.join(sorted(chosen)) or 'nothing'} to {CALIBRATION_YAML}"
            + (f"; kept {', '.join(skipped)} (no clear gain: RMS down <10% or <0.01)" if skipped else "")
            + (" (fp16/int8 tied to bf16/fp8)" if "gemm" in improved else "")
            + "."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
