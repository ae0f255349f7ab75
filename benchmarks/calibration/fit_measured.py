"""Fit one roofline profile per GPU to that GPU's measured kernel tables (aiconfigurator-core, vLLM).

For each GPU the database measured (H100, H200, B200, A100, L40S), samples are read from its tables
through the package's public op evaluation: GEMMs over a grid of rows and weight shapes (bf16, and
fp8 where the GPU has it), weight-streaming GEMMs at one row (memory bandwidth), causal prefill
attention and decode attention of GQA layers over a grid of batches and lengths, and the engine's
custom all-reduce over 2, 4 and 8 GPUs and 4 KiB to 64 MiB. The profile's parameters are then fitted
exactly as ``fit.py`` fits the public-kernel profile (its search, its predictors: shardplan's own
``op_time`` formulas with the trial parameters swapped in), plus the decode attention's KV-read
efficiency and the engine all-reduce's step latency. The residuals (typical factor off, exp of the
RMS log error) are printed and stored with each profile.

Usage::

    .venv/bin/python benchmarks/calibration/fit_measured.py [--write] [--gpus H100,H200]

``--write`` replaces these GPUs' profiles in ``tools/data/calibration.yaml`` and keeps any other (a public-kernel
profile, ``fit_public_profile.py``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from calibration_yaml import CALIBRATION_YAML, profile_entry, write_profiles  # noqa: E402
from fit_search import apply, fit, rms, search_1d, sse  # noqa: E402
from kernel_samples import Sample, compute_node, kernel_time_s  # noqa: E402

from shardplan.contracts.dag import CommNode  # noqa: E402
from shardplan.tools.builder import ops  # noqa: E402
from shardplan.tools.catalogs.gpus import make_cluster  # noqa: E402
from shardplan.tools.cost import op_time  # noqa: E402
from shardplan.tools.cost.calibration import Calibration, calibration  # noqa: E402
from shardplan.tools.cost.measured.database import measured_tables  # noqa: E402
from shardplan.tools.cost.measured.lookup import lookup_seconds  # noqa: E402
from shardplan.tools.cost.measured.queries import Query  # noqa: E402

GPUS = ["H100", "H200", "B200", "A100", "L40S"]
ROWS = [1, 8, 32, 128, 512, 2048, 8192]
WEIGHTS = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (1536, 4096), (4096, 1792), (10240, 5120),
           (5120, 8192), (2560, 2048), (2048, 768)]
FP8_GPUS = {"H100", "H200", "B200", "L40S"}
PREFILL = [(1, 512), (1, 1024), (1, 4096), (4, 2048), (8, 1024), (1, 8192), (16, 512)]
DECODE = [(1, 1024), (8, 2048), (32, 2048), (64, 4096), (128, 1024), (256, 8192)]
HEADS = [(32, 8), (8, 1), (64, 8)]
HEAD_DIM = 128


def _measured(gpu: str, queries: list[Query], engine: str = "vllm") -> dict[Query, float | None]:
    tables = measured_tables(gpu, engine)
    assert tables is not None, f"no measured tables for {gpu}"
    return lookup_seconds(tables, queries)


def gemm_samples(gpu: str) -> list[Sample]:
    cluster = make_cluster(gpu, 1)
    dtypes = ["bf16"] + (["fp8"] if gpu in FP8_GPUS else [])
    wanted = {(d, m, n, k): Query("gemm", (n, k, "bfloat16" if d == "bf16" else "fp8"), False, m)
              for d in dtypes for m in ROWS for n, k in WEIGHTS}
    answers = _measured(gpu, list(wanted.values()))
    samples = []
    for (dtype, m, n, k), query in wanted.items():
        seconds = answers[query]
        if seconds is None:
            continue
        wb = 1.0 if dtype == "fp8" else 2.0
        work = ops.gemm(m, n, k, wb, wb)
        node = compute_node(f"{gpu} {dtype} m={m} n={n} k={k}", "linear", dtype, work.flops, work.bytes_read,
                             m * n * 2.0, dict(work.shape))
        launch = "decode" if m <= 128 else "prefill"
        category = "memory" if m == 1 and dtype == "bf16" else f"gemm_{dtype}"
        samples.append(Sample(category, node.name, seconds,
                              lambda node=node, launch=launch: kernel_time_s(node, cluster, launch)))
    return samples


def attention_samples(gpu: str) -> list[Sample]:
    cluster = make_cluster(gpu, 1)
    samples = []
    for heads, kv_heads in HEADS:
        prefill = {(b, s): Query("context_attention", (heads, kv_heads, "bfloat16", "bfloat16", HEAD_DIM, 0), True,
                                 b, s) for b, s in PREFILL}
        decode = {(b, s): Query("generation_attention", (heads, kv_heads, "bfloat16", HEAD_DIM, 0), False, b, s)
                  for b, s in DECODE}
        answers = _measured(gpu, [*prefill.values(), *decode.values()])
        for phase, wanted in (("prefill", prefill), ("decode", decode)):
            for (b, s), query in wanted.items():
                seconds = answers[query]
                if seconds is None:
                    continue
                q_len = s if phase == "prefill" else 1
                flops = 4.0 * b * heads * HEAD_DIM * q_len * s * (0.5 if phase == "prefill" else 1.0)
                kv = 2.0 * b * s * kv_heads * HEAD_DIM * 2
                q = 2.0 * b * q_len * heads * HEAD_DIM
                node = compute_node(f"{gpu} {phase} attention h={heads}/{kv_heads} b={b} s={s}", "attention", "bf16",
                                     flops, q + kv, q, {"batch": b, "q_len": q_len, "kv_len": s, "heads": heads,
                                                        "head_dim": HEAD_DIM})
                node = node.model_copy(update={"phase": phase})
                launch = "prefill" if phase == "prefill" else "decode"
                category = "attention" if phase == "prefill" else "decode_attention"
                samples.append(Sample(category, node.name, seconds,
                                      lambda node=node, launch=launch: kernel_time_s(node, cluster, launch)))
    return samples


def allreduce_samples(gpu: str) -> list[Sample]:
    samples = []
    for ranks in (2, 4, 8):
        cluster = make_cluster(gpu, ranks)
        sizes = [4096 * 4**i for i in range(8)]
        wanted = {size: Query("custom_allreduce", (4096, ranks), False, max(1, size // 8192)) for size in sizes}
        answers = _measured(gpu, list(wanted.values()))
        for size, query in wanted.items():
            seconds = answers[query]
            if seconds is None:
                continue
            message = max(1, size // 8192) * 4096 * 2.0
            node = CommNode(id=f"fit/ar{ranks}/{size}", name="all_reduce", phase="decode", ranks=list(range(ranks)),
                            kind="all_reduce", purpose="tp_reduce", message_bytes=message, scope="intra_node")
            samples.append(Sample("all_reduce", f"{gpu} all_reduce x{ranks} {int(message)} B", seconds,
                                  lambda node=node, cluster=cluster: op_time.collective_time_s(node, cluster)))
    return samples


MOE_MODELS = ["Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B", "openai/gpt-oss-120b"]
MOE_TOKENS = [1, 16, 128, 1024, 8192]
BALANCED = "balanced"


def moe_samples(gpu: str) -> tuple[list[Sample], list[Sample]]:
    """:func:`engine_moe_samples` from the vLLM tables, or from SGLang's where vLLM's hold no balanced rows (A100: its
    vLLM 0.14 tables time the power-law routings only)."""
    fill, skew = engine_moe_samples(gpu, "vllm")
    return (fill, skew) if fill else engine_moe_samples(gpu, "sglang")


def engine_moe_samples(gpu: str, engine: str) -> tuple[list[Sample], list[Sample]]:
    """Routed experts of three MoE models at EP 1/4/8, as two sets of samples.

    The tables time every shape twice: with the tokens spread evenly over the experts (``balanced``) and under
    the power-law routing the database's own estimator uses for these families, with the busiest expert rank
    swapped onto the timed one. The balanced rows fit the grouped GEMMs' row fill (``moe`` samples: the
    roofline of one rank at the mean load); the ratio of the two times at the same shape is the busiest rank's
    load factor itself (``moe_imbalance`` samples), so the imbalance is fitted to what skew does to the same
    kernel, not to whatever else separates the roofline from the kernel at EP > 1.
    """
    from shardplan.tools.catalogs.models import load_model
    from shardplan.tools.cost.measured.queries import _MOE_QUANT, POWER_LAW_ALPHA

    fill, skew = [], []
    skewed = f"power_law_{POWER_LAW_ALPHA['default']}"
    for name in MOE_MODELS:
        spec = load_model(name)
        moe = spec.moe
        assert moe is not None
        dtype = spec.expert_dtype or spec.weight_dtype
        for ep in (1, 4, 8):
            cluster = make_cluster(gpu, ep)
            wanted = {
                (tokens, routing): Query("moe", (spec.hidden_size, moe.expert_intermediate_size, moe.experts_per_token,
                                                 moe.num_experts, 1, ep, _MOE_QUANT[dtype], routing), tokens > 128,
                                         tokens)
                for tokens in MOE_TOKENS for routing in (BALANCED, skewed)
            }
            answers = _measured(gpu, list(wanted.values()), engine)
            for tokens in MOE_TOKENS:
                even, busiest = answers[wanted[tokens, BALANCED]], answers[wanted[tokens, skewed]]
                label = f"{gpu} {engine} {name.split('/')[1]} ep={ep} tokens={tokens}"
                if even is not None:
                    work = ops.expert_ffn(spec, tokens, moe.num_experts // ep, ep, 1)
                    node = compute_node(label, "expert", dtype, work.flops, work.bytes_read, work.bytes_written,
                                        dict(work.shape)).model_copy(update={"op": "routed_experts"})
                    launch = "decode" if tokens <= 128 else "prefill"
                    fill.append(Sample("moe", node.name, even, lambda node=node, cluster=cluster, launch=launch, ep=ep:
                                       kernel_time_s(node, cluster, launch)
                                       * op_time.expert_load_factor(ep, cluster.gpu, dispatched=False, skewed=False)))
                if even is not None and busiest is not None and ep > 1:
                    skew.append(Sample("moe_imbalance", f"{label} {skewed}/{BALANCED}", busiest / even,
                                       lambda ep=ep, cluster=cluster: op_time.expert_load_factor(ep, cluster.gpu)))
    return fill, skew


def with_moe(cal: Calibration, per_doubling: float, m_half: float, ep_overhead: float | None = None) -> Calibration:
    update: dict[str, float] = {"imbalance_per_doubling": per_doubling, "m_half": m_half}
    if ep_overhead is not None:
        update["ep_overhead_per_doubling"] = ep_overhead
    moe = cal.moe.model_copy(update=update)
    return cal.model_copy(update={"moe": moe})


def with_decode_attention(cal: Calibration, efficiency: float) -> Calibration:
    attention = cal.attention.model_copy(update={"decode_memory_efficiency": efficiency})
    return cal.model_copy(update={"attention": attention})


def with_engine_allreduce(cal: Calibration, step_us: float, efficiency: float) -> Calibration:
    coll = cal.collectives.model_copy(update={
        "engine_allreduce_us": step_us,
        "bandwidth_efficiency": {**cal.collectives.bandwidth_efficiency, "intra_node": efficiency},
    })
    return cal.model_copy(update={"collectives": coll})


def fit_gpu(gpu: str, base: Calibration) -> tuple[dict[str, Any], dict[str, float]]:
    """The fitted profile of ``gpu`` and its residual per category (typical factor off)."""
    samples = gemm_samples(gpu) + attention_samples(gpu)
    reduce_rows = allreduce_samples(gpu)
    categories = {s.category for s in samples}
    values = fit([s for s in samples if s.category != "decode_attention"], base)
    if "gemm_fp8" not in categories:
        values["gemm.max_efficiency.fp8"] = base.gemm.max_efficiency["fp8"]
    cal = apply(base, values, {"memory", "gemm", "attention"})
    decode_rows = [s for s in samples if s.category == "decode_attention"]
    decode_eff = round(search_1d(lambda e: sse(decode_rows, with_decode_attention(cal, e)), 0.2, 1.0), 2)
    cal = with_decode_attention(cal, decode_eff)

    def step_us(efficiency: float) -> float:
        return search_1d(lambda us: sse(reduce_rows, with_engine_allreduce(cal, us, efficiency)), 0.5, 50.0, log=True)

    bw_eff = round(search_1d(lambda e: sse(reduce_rows, with_engine_allreduce(cal, step_us(e), e)), 0.3, 1.0), 2)
    cal = with_engine_allreduce(cal, round(step_us(bw_eff), 2), bw_eff)
    moe_rows, imbalance_rows = moe_samples(gpu)
    if moe_rows:
        def overhead(m_half: float) -> float:
            return search_1d(lambda o: sse(moe_rows, with_moe(cal, 0.0, m_half, o)), 0.0, 3.0, steps=20)

        m_half = round(search_1d(lambda mh: sse(moe_rows, with_moe(cal, 0.0, mh, overhead(mh))), 1.0, 1024.0,
                                 steps=20, log=True), 1)
        per_rank = round(overhead(m_half), 2)
        per_doubling = search_1d(lambda f: sse(imbalance_rows, with_moe(cal, f, m_half, per_rank)), 0.0, 3.0,
                                 steps=20) if imbalance_rows else 0.0
        cal = with_moe(cal, round(per_doubling, 2), m_half, per_rank)
    samples += moe_rows + imbalance_rows
    residuals = {}
    for title, cats in (("gemm", ("gemm_bf16", "gemm_fp8")), ("memory", ("memory",)), ("attention", ("attention",)),
                        ("decode_attention", ("decode_attention",)), ("all_reduce", ("all_reduce",)),
                        ("moe", ("moe",)), ("moe_imbalance", ("moe_imbalance",))):
        rows = [s for s in samples + reduce_rows if s.category in cats]
        residuals[title] = round(math.exp(rms(rows, cal)), 3) if rows else 1.0
        print(f"  {gpu} {title}: {len(rows)} samples, RMS log error public profile {rms(rows, base):.3f} -> "
              f"fitted {rms(rows, cal):.3f} (x{math.exp(rms(rows, cal)):.2f})")
    profile = profile_entry(gpu, cal, residuals)
    return profile, residuals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the profiles in tools/data/calibration.yaml")
    parser.add_argument("--gpus", default=",".join(GPUS), help="comma-separated catalog GPUs")
    args = parser.parse_args(argv)
    base = calibration().model_copy(update={"profiles": {}})
    profiles: dict[str, Any] = {}
    lines = ["| GPU | gemm | memory | prefill attention | decode attention | engine all-reduce | MoE experts |",
             "|---|---|---|---|---|---|---|"]
    for gpu in args.gpus.split(","):
        profile, residuals = fit_gpu(gpu, base)
        profiles[gpu.lower()] = profile
        lines.append(f"| {gpu} | " + " | ".join(f"x{residuals[k]:.2f}" for k in
                                               ("gemm", "memory", "attention", "decode_attention", "all_reduce",
                                                "moe")) + " |")
    print("\nResiduals after the fit (typical factor off, exp of the RMS log error):\n")
    print("\n".join(lines))
    if args.write:
        write_profiles(profiles)
        print(f"\nwrote {len(profiles)} profiles to {CALIBRATION_YAML}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
