"""Public kernel measurements (``kernels.yaml``) as samples for the fit: each usable row becomes a measured
time and a predictor that prices the same kernel with shardplan's own formulas (a ``ComputeNode`` or a
``CommNode`` timed by ``op_time``), or an exclusion with its reason. :mod:`fit` searches the parameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardplan.contracts.dag import CommNode, ComputeNode
from shardplan.contracts.hardware import Cluster
from shardplan.tools.builder import ops
from shardplan.tools.catalogs.gpus import gpu_catalog, make_cluster
from shardplan.tools.cost import op_time

__all__ = [
    "Sample",
    "Excluded",
    "GPU_ALIAS",
    "gemm_samples",
    "memory_samples",
    "attention_samples",
    "collective_samples",
    "compute_node",
    "kernel_time_s",
]

GPU_ALIAS = {"H800": "H100"}  # same compute and HBM as H100 SXM; only NVLink is cut
GIB = float(2**30)


@dataclass
class Sample:
    """One usable measurement: its category, a label, the measured seconds and a predictor."""

    category: str
    label: str
    measured_s: float
    predict: Callable[[], float]


@dataclass
class Excluded:
    section: str
    label: str
    reason: str


def _catalog_gpu(name: str) -> str | None:
    name = GPU_ALIAS.get(name, name)
    return name if name in gpu_catalog() else None


def kernel_time_s(node: ComputeNode, cluster: Cluster, launch: str) -> float:
    """``compute_time_s`` with the model's per-node launch term replaced by one kernel launch (or none)."""
    seconds = op_time.compute_time_s(node, cluster) - op_time._launch_s(node, node.phase)
    if launch != "none":
        cal = op_time.calibration().launch
        seconds += (cal.prefill_us if launch == "prefill" else cal.decode_us) * 1e-6
    return seconds


def compute_node(
    label: str, kind: str, dtype: str, flops: float, read: float, written: float, shape: dict[str, int]
) -> ComputeNode:
    return ComputeNode(
        id=f"fit/{label}",
        name=label,
        phase="prefill",
        ranks=[0],
        kind=kind,
        op=label,
        dtype=dtype,
        shape=shape,
        flops=flops,
        bytes_read=read,
        bytes_written=written,
    )


def gemm_samples(rows: list[dict[str, Any]], launch: str) -> tuple[list[Sample], list[Excluded]]:
    samples, excluded = [], []
    for row in rows:
        label = f"{row['gpu']} {row['dtype']} m={row['m']} n={row['n']} k={row['k']}" + (
            f" x{row['groups']} groups" if row.get("groups", 1) > 1 else ""
        )
        gpu = _catalog_gpu(row["gpu"])
        if gpu is None:
            excluded.append(Excluded("gemm", label, f"GPU {row['gpu']} not in the catalog"))
            continue
        if row["dtype"] not in ("bf16", "fp8"):
            excluded.append(Excluded("gemm", label, f"dtype {row['dtype']} not fitted"))
            continue
        groups = int(row.get("groups", 1))
        m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
        wb = 1.0 if row["dtype"] == "fp8" else 2.0  # fp8 GEMMs read fp8 activations, write bf16
        work = ops.gemm(m * groups, n, k, wb * groups, wb)  # weight bytes of all groups
        shape = dict(work.shape)
        if groups > 1:
            shape["experts"] = groups  # grouped GEMM: compute_time_s takes rows per group for the tile fill
        node = compute_node(
            label,
            "expert" if groups > 1 else "linear",
            row["dtype"],
            work.flops,
            work.bytes_read,
            m * groups * n * 2.0,
            shape,
        )
        cluster = make_cluster(gpu, 1)
        measured = 2.0 * m * n * k * groups / (float(row["tflops"]) * 1e12)
        samples.append(
            Sample(
                f"gemm_{row['dtype']}",
                label,
                measured,
                lambda node=node, cluster=cluster: kernel_time_s(node, cluster, launch),
            )
        )
    return samples, excluded


def memory_samples(rows: list[dict[str, Any]]) -> tuple[list[Sample], list[Excluded]]:
    samples, excluded = [], []
    for row in rows:
        label = f"{row['gpu']} {row['kernel'][:48]}"
        gpu = _catalog_gpu(row["gpu"])
        kernel = row["kernel"].lower()
        if gpu is None:
            excluded.append(Excluded("memory", label, f"GPU {row['gpu']} not in the catalog"))
        elif "gpt-fast" in kernel:
            excluded.append(Excluded("memory", label, "end-to-end decode (held-out gpt-fast rows, 330 W cap)"))
        elif "flashmla" in kernel:
            excluded.append(Excluded("memory", label, "attention KV read, an 'up to' bound: not fitted"))
        else:
            node = compute_node(label, "elementwise", "bf16", 0.0, GIB / 2, GIB / 2, {"m": 1, "n": 1})
            cluster = make_cluster(gpu, 1)
            samples.append(
                Sample(
                    "memory",
                    label,
                    GIB / (float(row["achieved_gb_per_s"]) * 1e9),
                    lambda node=node, cluster=cluster: kernel_time_s(node, cluster, "none"),
                )
            )
    return samples, excluded


def attention_samples(rows: list[dict[str, Any]], launch: str) -> tuple[list[Sample], list[Excluded]]:
    samples, excluded = [], []
    for row in rows:
        shape_text = f" b={row['batch']} h={row['heads']} s={row['seq']}" if row.get("heads") else ""
        label = f"{row['gpu']} {row['kernel'][:34]}{shape_text}"
        gpu = _catalog_gpu(row["gpu"])
        kernel = row["kernel"]
        if row["phase"] != "prefill":
            excluded.append(Excluded("attention", label, "decode row ('up to' figure): not fitted"))
        elif gpu is None:
            excluded.append(Excluded("attention", label, f"GPU {row['gpu']} not in the catalog"))
        elif "FlashAttention-3" not in kernel:
            excluded.append(Excluded("attention", label, "not FlashAttention-3 (model assumes FA3-class prefill)"))
        elif not row.get("batch") or not row.get("heads") or row.get("dtype") != "bf16":
            excluded.append(Excluded("attention", label, "headline best case without a full shape"))
        else:
            b, h, s, d = (int(row[key]) for key in ("batch", "heads", "seq", "head_dim"))
            # Read as tritonbench's default non-causal forward: 4*B*H*S^2*D FLOPs. The same FLOP count goes
            # into both sides, so the fitted efficiency is "counted FLOPs per second / peak" either way.
            flops = 4.0 * b * h * s * s * d
            tensor = b * s * h * d * 2.0
            node = compute_node(
                label,
                "attention",
                "bf16",
                flops,
                3 * tensor,
                tensor,
                {"batch": b, "q_len": s, "kv_len": s, "heads": h, "head_dim": d},
            )
            cluster = make_cluster(gpu, 1)
            samples.append(
                Sample(
                    "attention",
                    label,
                    flops / (float(row["tflops"]) * 1e12),
                    lambda node=node, cluster=cluster: kernel_time_s(node, cluster, launch),
                )
            )
    return samples, excluded


def collective_samples(rows: list[dict[str, Any]]) -> tuple[list[Sample], list[Excluded]]:
    samples, excluded = [], []
    for row in rows:
        seconds = row.get("time_us", row.get("time_us_derived"))
        n = int(row["ranks"])
        if seconds is None and row.get("bytes") and row.get("busbw_gb_per_s") and row["op"] == "all_reduce":
            # nccl-tests: busbw = algbw * 2(n-1)/n and algbw = bytes / time.
            seconds = row["bytes"] * 2.0 * (n - 1) / n / (row["busbw_gb_per_s"] * 1e3)
        label = f"{row['gpu']} {row['op']} x{n} {row.get('bytes')} B" + (
            f" ({row['algorithm']})" if row.get("algorithm") else ""
        )
        note = str(row.get("note", "")).lower()
        if row["op"] != "all_reduce":
            excluded.append(Excluded("collectives", label, f"{row['op']}: no size/time pair for the model's kinds"))
        elif row["scope"] != "intra_node":
            excluded.append(Excluded("collectives", label, "inter-node: outside this fit (intra-node parameters only)"))
        elif not row.get("bytes") or seconds is None:
            excluded.append(Excluded("collectives", label, "bus bandwidth only, no (bytes, time) pair"))
        elif re.search(r"lower bound|same tuning|tuned", note):
            excluded.append(Excluded("collectives", label, "tuned symmetric-memory lower bound, not default NCCL"))
        elif _catalog_gpu(row["gpu"]) is None or row["gpu"] in GPU_ALIAS:
            excluded.append(Excluded("collectives", label, f"GPU {row['gpu']}: links differ from the catalog"))
        else:
            node = CommNode(
                id=f"fit/{label}",
                name=label,
                phase="decode",
                ranks=list(range(n)),
                kind="all_reduce",
                purpose="tp_reduce",
                message_bytes=float(row["bytes"]),
                scope="intra_node",
            )
            cluster = make_cluster(row["gpu"], n)
            samples.append(
                Sample(
                    "all_reduce",
                    label,
                    float(seconds) * 1e-6,
                    lambda node=node, cluster=cluster: op_time.collective_time_s(node, cluster),
                )
            )
    return samples, excluded
