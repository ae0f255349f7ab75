"""shardplan's kernel prices against our own H100 and H200 measurements: the GEMMs, expert GEMMs and decode/verify
attention of ``benchmarks/data/gpu/*.json`` (``benchmarks/gpu/measure_kernels.py``), each priced as a plan prices
its node.

Every measured row becomes the DAG node a plan would hold for that kernel (a decode linear node of the row's M, N,
K and weight format; the routed-expert node of a rank holding the row's experts under expert parallelism; a decode
attention node of the row's batch, query positions and context) and is priced by :class:`~shardplan.tools.cost.
pricing.Pricer` for the measured GPU under the chosen engine: the measured tables (aiconfigurator-core) where they cover
the node, the calibrated roofline otherwise, exactly as ``estimate_cost`` does. The H200's three GEMM/expert runs
(two machines, two days) are combined by their median per row; the H100 ran once.

What differs by construction, and is printed beside the figures:

* the expert rows activate every local expert with the same token count (``torch.bmm``); a plan prices the
  experts routing activates (tables: a power-law token load; roofline: the expected active experts under uniform
  routing), so rows of fewer than 4 tokens per expert, where routing leaves experts idle, are listed apart;
* the measured fp8 GEMMs use per-tensor scales (``torch._scaled_mm``); DeepSeek-V3's checkpoint is block-scaled,
  priced as its engine's tables hold it.

Usage::

    .venv/bin/python benchmarks/compare_kernels_gpu.py [--gpu H200|H100] [--engine vllm|sglang|trtllm] [--rows]
        [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardplan.contracts.dag import ComputeNode
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.tools.builder import ops
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.pricing import make_pricer

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "gpu"
# Per GPU: the runs holding GEMM and expert rows, and the file holding the attention rows.
RUNS = {
    "H200": (("kernels_h200.json", "kernels_h200_run2.json", "kernels_h200_run3.json"), "attention_h200.json"),
    "H100": (("kernels_h100.json",), "kernels_h100.json"),
}
# The measurement's shape labels (measure_kernels.GEMM_SHAPES) -> the model and tensor-parallel degree they come from.
MODELS = {
    "llama-3.1-8b tp1": "meta-llama/Llama-3.1-8B",
    "llama-3.1-70b tp2": "meta-llama/Llama-3.1-70B",
    "deepseek-v3 adp": "deepseek-ai/DeepSeek-V3",
    "deepseek-v3 experts": "deepseek-ai/DeepSeek-V3",
}
FEW_TOKENS = 4  # tokens per expert below which routing leaves some of a rank's experts idle (see the docstring)


@dataclass(frozen=True)
class Priced:
    kind: str
    shape: str
    dtype: str
    key: str  # the row's sizes in words
    measured_us: float
    shardplan_us: float
    backend: str

    @property
    def error(self) -> float:
        return self.shardplan_us / self.measured_us - 1.0


def _rows(name: str) -> list[dict[str, Any]]:
    return [row for row in json.loads((DATA / name).read_text())["rows"] if "us" in row]


def merged_rows(gpu: str) -> list[dict[str, Any]]:
    """GEMM and expert rows of the GPU's runs, one per shape and size, at the median of the runs' times."""
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for name in RUNS[gpu][0]:
        for row in _rows(name):
            if row["kind"] not in ("gemm", "experts"):
                continue  # the attention rows are read from RUNS[gpu][1]
            key = tuple(sorted((k, v) for k, v in row.items() if k not in ("us", "tflops", "gb_per_s")))
            by_key[key].append(row)
    return [{**rows[0], "us": statistics.median(r["us"] for r in rows)} for rows in by_key.values()]


def _model(name: str, dtype: str) -> ModelSpec:
    return load_model(name, weight_dtype=dtype)


def _price(node: ComputeNode, model: ModelSpec, phase: PhaseStrategy, engine: str, gpu: str) -> tuple[float, str]:
    pricer = make_pricer(make_cluster(gpu, 8), model, {"decode": phase}, engine)  # type: ignore[arg-type]
    pricer.prepare([node])
    seconds = pricer.node_time_s(node)
    return seconds * 1e6, "table" if node.id in pricer.measured else "roofline"


def _node(kind: str, op: str, dtype: str, work: ops.Work) -> ComputeNode:
    return ComputeNode(id=f"decode/{op}", name=op, kind=kind, op=op, phase="decode", ranks=[0], dtype=dtype,
                       shape=work.shape, flops=work.flops, bytes_read=work.bytes_read,
                       bytes_written=work.bytes_written)


def price_gemm(row: dict[str, Any], engine: str, gpu: str) -> Priced:
    """A decode linear node of the row's M x N x K in the row's weight format (the plan's GEMM path)."""
    model = _model(MODELS[row["shape"]], row["dtype"])
    work = ops.gemm(row["m"], row["n"], row["k"], 1 if row["dtype"] == "fp8" else 2, 2)
    us, backend = _price(_node("linear", "gemm", row["dtype"], work), model, parse_strategy("tp=1").decode, engine,
                         gpu)
    return Priced("gemm", row["shape"], row["dtype"], f"{row['n']}x{row['k']} M={row['m']}", row["us"], us, backend)


def price_experts(row: dict[str, Any], engine: str, gpu: str) -> Priced:
    """The routed-expert node of one rank holding the row's experts: expert parallelism over num_experts / experts
    ranks, the layer's tokens such that each local expert gets the row's tokens on average."""
    model = _model(MODELS[row["shape"]], row["dtype"])
    moe = model.moe
    assert moe is not None
    ep = moe.num_experts // row["experts"]
    tokens = row["tokens_per_expert"] * moe.num_experts // moe.experts_per_token
    work = ops.expert_ffn(model, tokens, row["experts"], ep, 1)
    phase = parse_strategy(f"tp={ep},ep={ep}").decode
    us, backend = _price(_node("expert", "routed_experts", row["dtype"], work), model, phase, engine, gpu)
    key = f"{row['experts']} experts x {row['tokens_per_expert']} tokens"
    return Priced("experts", row["shape"], row["dtype"], key, row["us"], us, backend)


def price_attention(row: dict[str, Any], engine: str, gpu: str) -> Priced:
    """A decode (q=1) or verify (q=K+1) attention node of Llama-3.1-70B under TP=2 (the measured heads per rank)."""
    model = _model(MODELS["llama-3.1-70b tp2"], "bf16")
    tp = model.num_attention_heads // row["heads"]
    work = ops.attention(model, 0, row["batch"], row["q_len"], row["kv_len"], tp, prefill=False)
    us, backend = _price(_node("attention", "attention", "bf16", work), model, parse_strategy(f"tp={tp}").decode,
                         engine, gpu)
    key = f"b={row['batch']} q={row['q_len']} kv={row['kv_len']}"
    return Priced("attention", row["shape"], row["dtype"], key, row["us"], us, backend)


def price_all(engine: str, gpu: str = "H200") -> list[Priced]:
    priced = []
    for row in merged_rows(gpu):
        priced.append(price_gemm(row, engine, gpu) if row["kind"] == "gemm" else price_experts(row, engine, gpu))
    priced += [price_attention(row, engine, gpu) for row in _rows(RUNS[gpu][1]) if row["kind"] == "attention"]
    return priced


def _median_abs(values: Iterable[float]) -> float:
    present = [abs(v) for v in values]
    return statistics.median(present) if present else float("nan")


def groups(priced: list[Priced]) -> dict[str, list[Priced]]:
    """Rows by kind, shape, format and size class (decode-sized GEMMs of up to 128 rows apart from larger ones)."""
    out: dict[str, list[Priced]] = defaultdict(list)
    for p in priced:
        if p.kind == "gemm":
            m = int(p.key.rsplit("M=", 1)[1])
            size = "M<=128" if m <= 128 else "M>128"
            out[f"gemm {p.shape} {p.dtype} {size}"].append(p)
        elif p.kind == "experts":
            few = int(p.key.split(" x ")[1].split()[0]) < FEW_TOKENS
            out[f"experts {p.dtype} {'<' if few else '>='}{FEW_TOKENS} tokens/expert"].append(p)
        else:
            out[f"attention {p.shape}"].append(p)
    return out


def summary_lines(priced: list[Priced]) -> list[str]:
    lines = []
    for name, rows in sorted(groups(priced).items()):
        backends = "/".join(sorted({p.backend for p in rows}))
        signed = statistics.median(p.error for p in rows)
        lines.append(f"{name}: {len(rows)} rows ({backends}), median |error| {_median_abs(p.error for p in rows):.1%}"
                     f" (median signed {signed:+.1%})")
    decode = [p for p in priced if p.kind != "gemm" or int(p.key.rsplit("M=", 1)[1]) <= 128]
    lines.append(f"all {len(priced)} rows: median |error| {_median_abs(p.error for p in priced):.1%}; decode-sized "
                 f"({len(decode)} rows: GEMMs of up to 128 rows, experts, attention): "
                 f"{_median_abs(p.error for p in decode):.1%}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", default="H200", choices=sorted(RUNS), help="whose measurements")
    parser.add_argument("--engine", default="vllm", choices=("vllm", "sglang", "trtllm"), help="whose tables")
    parser.add_argument("--rows", action="store_true", help="print every row, not only the summary")
    parser.add_argument("--markdown", action="store_true", help="the summary as a markdown table")
    args = parser.parse_args(argv)
    priced = price_all(args.engine, args.gpu)
    if args.rows:
        for p in priced:
            print(f"{p.kind:9s} {p.shape:20s} {p.dtype:4s} {p.key:28s} measured {p.measured_us:8.1f} us  "
                  f"shardplan {p.shardplan_us:8.1f} us ({p.backend:8s}) {p.error:+7.1%}")
    if args.markdown:
        print(f"| rows ({args.gpu}, {args.engine}'s tables) | n | priced by | median abs error | median signed error |")
        print("| --- | --- | --- | --- | --- |")
        for name, rows in sorted(groups(priced).items()):
            backends = "/".join(sorted({p.backend for p in rows}))
            print(f"| {name} | {len(rows)} | {backends} | {_median_abs(p.error for p in rows):.1%} | "
                  f"{statistics.median(p.error for p in rows):+.1%} |")
        print()
    print("\n".join(summary_lines(priced)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
