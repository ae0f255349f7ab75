"""Time the kernels behind a decode step on the GPU at hand, for checking the cost model's shapes against the device.

Runs with PyTorch alone (no engine), on one GPU: ``python benchmarks/gpu/measure_kernels.py --out kernels.json``.
What it measures, and why each one:

- **Dense GEMMs at decode sizes** (bf16, and fp8 with per-tensor scales through ``torch._scaled_mm``), M tokens
  from 1 to 8192, at Llama-3.1-8B/70B and DeepSeek-V3 shapes: how a decode step's linear layers grow with the
  tokens in it. Per-tensor fp8 is a stand-in for the block-scaled fp8 kernels engines run; both read the same
  weight bytes, which is what a decode-sized GEMM waits on.
- **Batched expert GEMMs** (``torch.bmm`` over E experts, t tokens each, bf16): a grouped MoE GEMM where every
  local expert is active, the case of DeepSeek-V3 under expert parallelism at decode batches of 16+ tokens per rank.
- **Decode and verify attention** (``scaled_dot_product_attention``, flash backend): one query token per sequence
  against q = K+1 query tokens (a speculative verify step) over the same KV cache, the query positions folded into
  the GQA group as decode kernels do, to see whether the K+1 positions read the cache once (time flat in q) or once
  each (time x q). (PyTorch's own GQA path, ``enable_gqa``, leaves the flash kernel for q > 1 and is no guide.)

Every kernel is captured R times in a CUDA graph over rotating buffers larger than L2 (so weights come from HBM,
as in a real step), replayed, and timed with CUDA events; the figure is the median per-call time over replays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

L2_FLUSH_BYTES = 256 * 2**20  # rotate through at least this much memory: H200's L2 is 60 MB
CALLS_PER_GRAPH = 20
REPLAYS = 7


def timed_us(make_call: Callable[[int], Callable[[], Any]], buffer_bytes: int) -> float:
    """Median microseconds per call; ``make_call(i)`` returns the i-th call over its own buffers."""
    copies = max(2, min(CALLS_PER_GRAPH, -(-L2_FLUSH_BYTES // max(buffer_bytes, 1))))
    calls = [make_call(i) for i in range(copies)]
    for call in calls:  # warm up (and let cuBLAS pick its kernels) outside the graph
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for k in range(CALLS_PER_GRAPH):
            calls[k % copies]()
    us = replay_median_ms(graph, REPLAYS) * 1000.0 / CALLS_PER_GRAPH
    del graph, calls
    torch.cuda.empty_cache()
    return us


def replay_median_ms(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """Median milliseconds of one replay of a captured graph, after one untimed replay, timed by CUDA events."""
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def gemm_row(m: int, n: int, k: int, dtype: str) -> dict[str, Any]:
    """One GEMM [m, k] x [k, n]; weight bytes dominate at decode sizes."""
    dev = "cuda"
    elem = 1 if dtype == "fp8" else 2

    def make(i: int) -> Callable[[], Any]:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        if dtype == "fp8":
            a8 = a.to(torch.float8_e4m3fn)
            w8 = w.to(torch.float8_e4m3fn)
            one = torch.ones((), device=dev, dtype=torch.float32)
            return lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return lambda: torch.mm(a, w.t())

    us = timed_us(make, (n * k + m * k) * elem)
    flops = 2.0 * m * n * k
    bytes_moved = (n * k + m * k) * elem + m * n * 2
    return {"kind": "gemm", "dtype": dtype, "m": m, "n": n, "k": k, "us": round(us, 3),
            "tflops": round(flops / us / 1e6, 2), "gb_per_s": round(bytes_moved / us / 1e3, 1)}


def experts_row(experts: int, tokens: int, hidden: int, inter: int) -> dict[str, Any]:
    """Every local expert active with ``tokens`` each: the up (gate+up fused) and down projections."""
    dev = "cuda"

    def make(i: int) -> Callable[[], Any]:
        x = torch.randn(experts, tokens, hidden, device=dev, dtype=torch.bfloat16)
        up = torch.randn(experts, hidden, 2 * inter, device=dev, dtype=torch.bfloat16)
        down = torch.randn(experts, inter, hidden, device=dev, dtype=torch.bfloat16)
        mid = torch.empty(experts, tokens, inter, device=dev, dtype=torch.bfloat16)

        def call() -> Any:
            h = torch.bmm(x, up)
            mid.copy_(h[..., :inter])
            return torch.bmm(mid, down)
        return call

    weight_bytes = experts * hidden * 3 * inter * 2
    us = timed_us(make, weight_bytes)
    return {"kind": "experts", "dtype": "bf16", "experts": experts, "tokens_per_expert": tokens, "hidden": hidden,
            "inter": inter, "us": round(us, 3), "gb_per_s": round(weight_bytes / us / 1e3, 1)}


def attention_row(batch: int, q_len: int, kv_len: int, heads: int, kv_heads: int, head_dim: int) -> dict[str, Any]:
    """Decode (q_len 1) or verify (q_len K+1) attention over a KV cache of ``kv_len`` per sequence.

    The query positions are folded into the GQA group, as decode kernels lay them out (FlashInfer's and FlashMLA's
    decode paths, TensorRT-LLM's generation kernels): per KV head one query block of group x q_len rows, not causal
    among the K+1 positions (their mask is a few elements of a tile and does not change the KV read).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev = "cuda"
    rows = heads // kv_heads * q_len

    def make(i: int) -> Callable[[], Any]:
        q = torch.randn(batch, kv_heads, rows, head_dim, device=dev, dtype=torch.bfloat16)
        kk = torch.randn(batch, kv_heads, kv_len, head_dim, device=dev, dtype=torch.bfloat16)
        vv = torch.randn(batch, kv_heads, kv_len, head_dim, device=dev, dtype=torch.bfloat16)

        def call() -> Any:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, kk, vv)
        return call

    kv_bytes = 2 * batch * kv_heads * kv_len * head_dim * 2
    us = timed_us(make, kv_bytes)
    return {"kind": "attention", "dtype": "bf16", "batch": batch, "q_len": q_len, "kv_len": kv_len, "heads": heads,
            "kv_heads": kv_heads, "head_dim": head_dim, "layout": "query positions folded into the GQA group",
            "us": round(us, 3), "kv_gb_per_s": round(kv_bytes / us / 1e3, 1)}


# Shapes (n, k) of one layer's GEMMs per GPU, from the models' configs.
GEMM_SHAPES: dict[str, list[tuple[int, int]]] = {
    # Llama-3.1-8B, tp=1: qkv (4096 -> 6144), o, gate+up (-> 28672), down
    "llama-3.1-8b tp1": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)],
    # Llama-3.1-70B, tp=2: qkv (8192 -> 10240/2), o (8192/2 -> 8192), gate+up (57344/2), down (28672/2 -> 8192)
    "llama-3.1-70b tp2": [(5120, 8192), (8192, 4096), (28672, 8192), (8192, 14336)],
    # DeepSeek-V3 attention per rank under attention DP (no TP): q_a+kv_a (7168 -> 1536+576), q_b (1536 -> 24576),
    # o (16384 -> 7168); the dense layers' gate+up (7168 -> 36864) and down (18432 -> 7168)
    "deepseek-v3 adp": [(2112, 7168), (24576, 1536), (7168, 16384), (36864, 7168), (7168, 18432)],
}
M_DECODE = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 8192]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", choices=["attention", "experts", "gemm"], help="measure one kind only")
    parser.add_argument("--budget-s", type=float, default=330.0, help="stop adding rows after this many seconds")
    args = parser.parse_args()
    began = time.monotonic()
    props = torch.cuda.get_device_properties(0)
    result: dict[str, Any] = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
                              "cuda": torch.version.cuda, "method": __doc__.strip().splitlines()[-1], "rows": []}

    def save() -> None:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)

    def add(label: str, row_fn: Callable[[], dict[str, Any]]) -> None:
        if time.monotonic() - began > args.budget_s:
            return
        try:
            row = row_fn()
        except Exception as exc:  # a shape the backend refuses is recorded, not fatal
            row = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        row["shape"] = label
        result["rows"].append(row)
        print(json.dumps(row), flush=True)

    # Attention first (the verify question), then experts, then the GEMM sweep, which is the longest.
    kinds = [args.only] if args.only else ["attention", "experts", "gemm"]
    for batch, kv_len in [(8, 4096), (32, 4096), (128, 2048), (64, 8192)] if "attention" in kinds else []:
        for q_len in (1, 2, 3, 4, 6, 8):
            add("llama-3.1-70b tp2 attention", lambda b=batch, q=q_len, kv=kv_len: attention_row(b, q, kv, 32, 4, 128))
    save()
    for experts in (16, 32) if "experts" in kinds else ():
        for tokens in (1, 2, 4, 8, 16, 32, 64, 128):
            add("deepseek-v3 experts", lambda e=experts, t=tokens: experts_row(e, t, 7168, 2048))
    save()
    for dtype in ("fp8", "bf16") if "gemm" in kinds else ():
        for label, shapes in GEMM_SHAPES.items():
            for n, k in shapes:
                for m in M_DECODE:
                    add(label, lambda m=m, n=n, k=k, d=dtype: gemm_row(m, n, k, d))
            save()
    result["elapsed_s"] = round(time.monotonic() - began, 1)
    save()


if __name__ == "__main__":
    main()
