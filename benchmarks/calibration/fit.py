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
import sys
from collections import Counter
from pathlib import Path

import yaml

from shardplan.tools.cost.calibration import calibration

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calibration_yaml import CALIBRATION_YAML, current_value, write_yaml  # noqa: E402
from fit_search import apply, fit, log_errors, rms, using  # noqa: E402
from kernel_samples import (  # noqa: E402
    Sample,
    attention_samples,
    collective_samples,
    gemm_samples,
    memory_samples,
)

KERNELS = HERE / "kernels.yaml"


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
