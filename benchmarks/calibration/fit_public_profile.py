"""Fit a roofline profile of its own for a GPU the measured tables do not cover, from public kernel measurements of it.

A GPU without a profile inherits the closest profiled GPU's (``tools/cost/profiles.py``): the MI300X inherits the
H200's, fitted to NVIDIA's kernels, and the end-to-end rows price it 20 to 66% fast. This script fits what public
kernel-level measurements of the GPU itself determine, each as ``fit.py`` fits the shared public-kernel parameters
(its search, its predictors, its launch term per measured kernel):

* ``memory.efficiency`` -- weight-streaming rows (GEMMs of one row that read their weights once);
* ``gemm.max_efficiency.fp8`` (int8 tied to it), ``gemm.m_half``, ``gemm.k_half`` -- the GEMM rows; INT8 rows stand
  for FP8 ones where the GPU runs both at one dense peak on the same matrix cores with one-byte operands (CDNA3:
  2614.9 TFLOP/s each), which the script checks against the catalog before using them;
* ``collectives.latency_factor.all_reduce``, ``collectives.bandwidth_efficiency.intra_node`` -- intra-node
  all-reduce rows (rccl-tests) with a size and a time;
* ``moe.m_half`` -- grouped (MoE) GEMM rows, priced as the routed-expert node of one GEMM over its groups (the load
  imbalance is a serving figure, not a kernel's, and stays inherited);
* ``attention.decode_max_efficiency`` -- decode attention rows (``decode_attention``: MLA decode kernels), per
  format, each priced as the DAG's decode attention node of the same batch, query positions, heads and keys.

Every other figure stays the one the GPU inherits today -- bf16 GEMMs, prefill attention, the MoE
row fill and imbalance, the engines' custom all-reduce -- since no public row of the GPU measures it, and the written
profile says which were fitted (``fitted``) and from where (``source``). A category whose rows are too few, or whose fit
does not clearly beat the inherited figures on them (``fit.py``'s rule: RMS log error down 10% and 0.01), keeps the
inherited figures too.

Usage::

    .venv/bin/python benchmarks/calibration/fit_public_profile.py                # MI300X: print the fit
    .venv/bin/python benchmarks/calibration/fit_public_profile.py --write        # add or replace profiles.mi300x

``--write`` adds the profile to ``tools/data/calibration.yaml`` (or replaces the GPU's own), keeping every other.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calibration_yaml import CALIBRATION_YAML, profile_entry, write_profiles  # noqa: E402
from fit import clear_gain  # noqa: E402
from fit_measured import with_moe  # noqa: E402
from fit_search import apply, fit, rms, search_1d, sse  # noqa: E402
from kernel_samples import (  # noqa: E402
    Sample,
    collective_samples,
    compute_node,
    gemm_samples,
    kernel_time_s,
    memory_samples,
)

from shardplan.tools.builder import ops  # noqa: E402
from shardplan.tools.catalogs.gpus import gpu_catalog, make_cluster  # noqa: E402
from shardplan.tools.cost.calibration import Calibration, calibration  # noqa: E402
from shardplan.tools.cost.profiles import inherited_profile  # noqa: E402

KERNELS = {"MI300X": HERE / "kernels_mi300x.yaml", "H20": HERE / "kernels_h20.yaml"}
MIN_ROWS = {"memory": 5, "gemm": 10, "all_reduce": 8, "moe": 6, "decode_attention": 5}
DECODE_ATTENTION = ("decode_attention_bf16", "decode_attention_fp8")
"""The decode attention rows' categories, one per format."""
"""Rows a category needs before its fit replaces the inherited figures."""


def _gemm_rows(gpu: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GEMM rows fitted: bf16 and fp8 as published (a derived TFLOP/s where only a time was), and INT8 rows read
    as FP8 only where the GPU's int8 and fp8 dense peaks are the same."""
    peaks = gpu_catalog()[gpu].dense_tflops
    int8_as_fp8 = peaks.get("int8") is not None and peaks.get("int8") == peaks.get("fp8")
    kept = []
    for row in rows:
        tflops = row.get("tflops") or row.get("tflops_derived")
        if row["dtype"] == "int8" and int8_as_fp8:
            kept.append({**row, "dtype": "fp8"})
        elif row["dtype"] in ("bf16", "fp8") and tflops:
            kept.append({**row, "tflops": tflops})
    return kept


def _grouped_samples(gpu: str, rows: list[dict[str, Any]]) -> list[Sample]:
    """Grouped GEMM rows as routed-expert nodes: one GEMM of ``m`` rows in each of ``groups`` experts, filled by the
    MoE kernels' own row-fill curve (no gated three-GEMM blend: the row times one GEMM)."""
    cluster = make_cluster(gpu, 1)
    samples = []
    for row in rows:
        m, n, k, groups = int(row["m"]), int(row["n"]), int(row["k"]), int(row["groups"])
        work = ops.gemm(m * groups, n, k, float(groups), 1.0)
        shape = {key: value for key, value in work.shape.items() if key != "n"} | {"experts": groups}
        label = f"{gpu} fp8 m={m} n={n} k={k} x{groups} groups"
        node = compute_node(label, "expert", "fp8", work.flops, work.bytes_read, m * groups * n * 2.0, shape)
        node = node.model_copy(update={"op": "routed_experts"})
        measured = 2.0 * m * n * k * groups / (float(row["tflops"]) * 1e12)
        samples.append(Sample("moe", label, measured,
                              lambda node=node: kernel_time_s(node, cluster, "prefill")))
    return samples


def _decode_attention_samples(gpu: str, rows: list[dict[str, Any]]) -> list[Sample]:
    """MLA decode attention rows as the DAG's decode attention node: ``s_q`` query positions of ``batch`` sequences,
    ``heads`` query heads over one latent KV head of ``kv_len`` keys, 2 x (d + dv) FLOPs per query row and key."""
    cluster = make_cluster(gpu, 1)
    samples = []
    for row in rows:
        batch, s_q, heads, kv_len = (int(row[key]) for key in ("batch", "s_q", "heads", "kv_len"))
        d, dv, dtype = int(row["d"]), int(row["dv"]), str(row["dtype"])
        width = 1.0 if dtype == "fp8" else 2.0
        flops = 2.0 * (d + dv) * batch * s_q * heads * kv_len
        read = batch * kv_len * d * width + batch * s_q * heads * d * width
        label = f"{gpu} {dtype} MLA decode b={batch} s_q={s_q} h={heads} kv={kv_len}"
        node = compute_node(label, "attention", dtype, flops, read, batch * s_q * heads * dv * 2.0,
                            {"batch": batch, "q_len": s_q, "kv_len": kv_len, "heads": heads, "head_dim": d})
        node = node.model_copy(update={"phase": "decode"})
        samples.append(Sample(f"decode_attention_{dtype}", label, float(row["time_ms"]) * 1e-3,
                              lambda node=node: kernel_time_s(node, cluster, "none")))
    return samples


def with_decode_attention(cal: Calibration, efficiency: dict[str, float]) -> Calibration:
    """``cal`` with the decode attention kernel reaching ``efficiency`` of each format's peak."""
    return cal.model_copy(update={"attention": cal.attention.model_copy(update={"decode_max_efficiency": efficiency})})


def _fit_decode_attention(samples: list[Sample], base: Calibration) -> dict[str, float]:
    """Each format's decode attention efficiency, fitted on that format's rows alone."""
    fitted: dict[str, float] = {}
    for dtype in sorted({s.category.removeprefix("decode_attention_") for s in samples}):
        rows = [s for s in samples if s.category == f"decode_attention_{dtype}"]
        def loss(efficiency: float, rows: list[Sample] = rows, dtype: str = dtype) -> float:
            return sse(rows, with_decode_attention(base, {dtype: efficiency}))

        fitted[dtype] = round(search_1d(loss, 0.05, 1.0, steps=40), 3)
    return fitted


def samples_of(gpu: str) -> list[Sample]:
    data = yaml.safe_load(KERNELS[gpu].read_text())
    gemms = _gemm_rows(gpu, data["gemm"])
    parts = [
        gemm_samples([r for r in gemms if int(r.get("groups", 1)) == 1], "prefill"),
        memory_samples(data["memory"]),
        collective_samples(data["collectives"]),
    ]
    grouped = [r for r in gemms if int(r.get("groups", 1)) > 1 and r["dtype"] == "fp8"]
    return ([s for part in parts for s in part[0]] + _grouped_samples(gpu, grouped)
            + _decode_attention_samples(gpu, data.get("decode_attention", [])))


def inherited(gpu: str) -> tuple[str, Calibration]:
    """The profile ``gpu`` inherits today, as a calibration to fit from."""
    base = calibration()
    name = inherited_profile(gpu_catalog()[gpu])
    profile = base.profiles.get(name)
    if profile is None:
        return name, base
    return name, base.model_copy(update={key: getattr(profile, key)
                                         for key in ("gemm", "memory", "attention", "collectives", "moe")})


def _applied(base: Calibration, values: dict[str, float], categories: set[str]) -> Calibration:
    """``base`` with the fitted values of ``categories``, MoE's row fill included."""
    cal = apply(base, values, categories & {"memory", "gemm", "attention", "collectives"})
    if "moe" in categories:
        cal = with_moe(cal, base.moe.imbalance_per_doubling, values["moe.m_half"])
    if "decode_attention" in categories:
        cal = with_decode_attention(cal, {key.split(".")[-1]: value for key, value in values.items()
                                          if key.startswith("attention.decode_max_efficiency.")})
    return cal


def fit_profile(gpu: str) -> tuple[dict[str, Any], list[str]]:
    """The GPU's profile and the lines that report its fit."""
    samples = samples_of(gpu)
    parent, base = inherited(gpu)
    by_cat: dict[str, list[Sample]] = {}
    for sample in samples:
        by_cat.setdefault(sample.category, []).append(sample)
    decode = [s for s in samples if s.category in DECODE_ATTENTION]
    values = fit([s for s in samples if s.category != "moe" and s not in decode], base)
    values |= {f"attention.decode_max_efficiency.{dtype}": efficiency
               for dtype, efficiency in _fit_decode_attention(decode, base).items()}
    moe_rows = by_cat.get("moe", [])
    values["moe.m_half"] = round(search_1d(
        lambda mh: sse(moe_rows, with_moe(base, base.moe.imbalance_per_doubling, mh)), 1.0, 1024.0, steps=20, log=True
    ), 1) if moe_rows else (base.moe.m_half or 0.0)
    if not by_cat.get("gemm_bf16"):
        values["gemm.max_efficiency.bf16"] = base.gemm.max_efficiency["bf16"]  # no bf16 rows: inherited
    # A category replaces the inherited figures only with enough rows and a clear gain on them, as fit.py writes.
    categories = set()
    for category, rows_of in (("memory", ("memory",)), ("gemm", ("gemm_bf16", "gemm_fp8")),
                              ("collectives", ("all_reduce",)), ("moe", ("moe",)),
                              ("decode_attention", DECODE_ATTENTION)):
        rows = [s for cat in rows_of for s in by_cat.get(cat, [])]
        alone = _applied(base, values, {category})
        if len(rows) >= MIN_ROWS[category if category != "collectives" else "all_reduce"] and clear_gain(
            rms(rows, base), rms(rows, alone)
        ):
            categories.add(category)
    fitted = _applied(base, values, categories)
    lines = [f"{gpu}: inherits {parent} without a profile of its own; {len(samples)} public kernel rows "
             f"({', '.join(f'{c} {len(r)}' for c, r in sorted(by_cat.items()))})", "",
             "| category | rows | RMS log error, inherited | fitted | typical factor fitted |", "|---|---|---|---|---|"]
    residuals: dict[str, float] = {}
    for title, cats in (("gemm", ("gemm_bf16", "gemm_fp8")), ("memory", ("memory",)), ("all_reduce", ("all_reduce",)),
                        ("moe", ("moe",)), ("decode_attention", DECODE_ATTENTION)):
        rows = [s for s in samples if s.category in cats]
        if rows:
            before, after = rms(rows, base), rms(rows, fitted)
            residuals[title] = round(math.exp(after), 3)
            lines.append(f"| {title} | {len(rows)} | {before:.3f} | {after:.3f} | x{math.exp(after):.2f} |")
    kept = sorted({"gemm", "memory", "collectives", "moe", "decode_attention"} - categories)
    def category_of(key: str) -> str:
        return "decode_attention" if key.startswith("attention.decode_max_efficiency.") else key.split(".")[0]

    lines += ["", "fitted: " + (", ".join(sorted(f"{k} {v:g}" for k, v in values.items()
                                                if category_of(k) in categories)) or "nothing"),
              f"inherited from {parent}: prefill attention, the MoE load imbalance, the engines' custom all-reduce"
              + (f", {', '.join(kept)} (too few rows or no clear gain)" if kept else "")]
    source = (f"public kernel rows of benchmarks/calibration/{KERNELS[gpu].name} "
              f"(benchmarks/calibration/fit_public_profile.py); the rest inherited from {parent}")
    profile = profile_entry(gpu, fitted, residuals, source=source, fitted=sorted(categories))
    return profile, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="MI300X", choices=sorted(KERNELS))
    parser.add_argument("--write", action="store_true", help="add or replace the profile in calibration.yaml")
    args = parser.parse_args(argv)
    profile, lines = fit_profile(args.gpu)
    print("\n".join(lines))
    if args.write:
        write_profiles({args.gpu.lower(): profile})
        print(f"\nwrote profiles.{args.gpu.lower()} to {CALIBRATION_YAML}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
