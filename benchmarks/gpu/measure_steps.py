"""Time whole engine steps of Llama-3.1-8B (bf16, one GPU) carrying decodes and a prompt chunk together.

Runs with PyTorch alone: ``python benchmarks/gpu/measure_steps.py --out steps.json``. The step is the model's
forward pass as a continuous-batching engine runs it: ``D`` running sequences, one token each, attending to a KV
cache of ``context`` tokens, plus a chunk of ``P`` prompt tokens (one fresh prompt, causal over itself), every
projection run once on all ``D + P`` tokens, and the LM head on the ``D`` decode tokens plus the chunk's last. With
``--verify K`` it also times speculative verify steps: each sequence carries K + 1 positions through every
projection, the LM head and attention (one read of its cache, the positions folded into the query block).
Random bf16 weights with the model's shapes (32 layers, hidden 4096, 32 query and 8 KV heads of 128, MLP 14336,
vocabulary 128256), each layer its own weights and KV cache, so every read comes from HBM as in an engine.

What it leaves out, so it is a floor of an engine's step rather than an engine's step: rotary embedding, writing the
new tokens' K and V into the cache, sampling, the scheduler, and the engines' fused elementwise kernels (here
RMSNorm and SiLU are unfused PyTorch ops, which costs more than engines pay). Decode attention folds each
sequence's query heads into its KV head's group (as decode kernels do); the chunk's attention is flash, causal.
Each step is captured once in a CUDA graph and replayed; the figure is the median of the timed replays.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from measure_kernels import replay_median_ms

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, LAYERS, VOCAB = 4096, 32, 8, 128, 14336, 32, 128256
REPLAYS = 10


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * weight


class Model:
    """The weights and per-layer KV caches; ``step`` runs one forward pass."""

    def __init__(self, max_seqs: int, context: int) -> None:
        dev, dt = "cuda", torch.bfloat16

        def param(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, device=dev, dtype=dt).normal_(0, 0.02)

        self.layers = [
            {"norm1": torch.ones(HIDDEN, device=dev, dtype=dt), "norm2": torch.ones(HIDDEN, device=dev, dtype=dt),
             "qkv": param((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN), "o": param(HIDDEN, HEADS * HEAD_DIM),
             "gate_up": param(2 * MLP, HIDDEN), "down": param(HIDDEN, MLP),
             "k_cache": param(max_seqs, KV_HEADS, context, HEAD_DIM),
             "v_cache": param(max_seqs, KV_HEADS, context, HEAD_DIM)}
            for _ in range(LAYERS)
        ]
        self.final_norm = torch.ones(HIDDEN, device=dev, dtype=dt)
        self.lm_head = param(VOCAB, HIDDEN)

    def step(self, x: torch.Tensor, decodes: int, chunk: int, positions: int = 1) -> torch.Tensor:
        """One pass; each decoding sequence carries ``positions`` query tokens (K + 1 in a verify step)."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        group = HEADS // KV_HEADS
        rows_d = decodes * positions
        for layer in self.layers:
            h = rms_norm(x, layer["norm1"])
            qkv = h @ layer["qkv"].t()
            q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
            parts = []
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                if decodes:
                    # a sequence's positions x its group's heads form one query block per KV head
                    qd = q[:rows_d].reshape(decodes, positions, KV_HEADS, group, HEAD_DIM).permute(0, 2, 1, 3, 4)
                    out = torch.nn.functional.scaled_dot_product_attention(
                        qd.reshape(decodes, KV_HEADS, positions * group, HEAD_DIM),
                        layer["k_cache"][:decodes], layer["v_cache"][:decodes])
                    out = out.reshape(decodes, KV_HEADS, positions, group, HEAD_DIM).permute(0, 2, 1, 3, 4)
                    parts.append(out.reshape(rows_d, HEADS * HEAD_DIM))
                if chunk:
                    qp = q[rows_d:].reshape(1, chunk, HEADS, HEAD_DIM).transpose(1, 2)
                    kp = k[rows_d:].reshape(1, chunk, KV_HEADS, HEAD_DIM).transpose(1, 2)
                    vp = v[rows_d:].reshape(1, chunk, KV_HEADS, HEAD_DIM).transpose(1, 2)
                    kp, vp = kp.repeat_interleave(group, dim=1), vp.repeat_interleave(group, dim=1)
                    out = torch.nn.functional.scaled_dot_product_attention(qp, kp, vp, is_causal=True)
                    parts.append(out.transpose(1, 2).reshape(chunk, HEADS * HEAD_DIM))
            attn = torch.cat(parts) if len(parts) > 1 else parts[0]
            x = x + attn @ layer["o"].t()
            h = rms_norm(x, layer["norm2"])
            gate, up = (h @ layer["gate_up"].t()).chunk(2, dim=-1)
            x = x + (torch.nn.functional.silu(gate) * up) @ layer["down"].t()
        rows = torch.cat([x[:rows_d], x[-1:]]) if chunk else x
        return rms_norm(rows, self.final_norm) @ self.lm_head.t()


def timed_ms(model: Model, decodes: int, chunk: int, positions: int = 1) -> float:
    x = torch.randn(decodes * positions + chunk, HIDDEN, device="cuda", dtype=torch.bfloat16) * 0.02
    for _ in range(2):
        model.step(x, decodes, chunk, positions)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.step(x, decodes, chunk, positions)
    ms = replay_median_ms(graph, REPLAYS)
    del graph
    torch.cuda.empty_cache()
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--context", type=int, default=4096, help="KV tokens each decoding sequence attends to")
    parser.add_argument("--verify", type=int, nargs="*", default=[],
                        help="also time verify steps of K+1 positions per sequence, for each K given (no chunk)")
    parser.add_argument("--budget-s", type=float, default=240.0)
    args = parser.parse_args()
    began = time.monotonic()
    decodes_grid = [1, 8, 32, 64, 128]
    model = Model(max(decodes_grid), args.context)
    props = torch.cuda.get_device_properties(0)
    result: dict[str, Any] = {"device": props.name, "torch": torch.__version__, "model": "Llama-3.1-8B shapes, bf16",
                              "context": args.context, "method": __doc__.strip().splitlines()[0], "rows": []}
    configs = [(d, p, 1) for p in (0, 512, 2048) for d in decodes_grid] + [(0, p, 1) for p in (512, 2048, 8192)]
    configs += [(d, 0, k + 1) for k in args.verify for d in decodes_grid]
    for decodes, chunk, positions in configs:
        if time.monotonic() - began > args.budget_s:
            break
        row: dict[str, Any] = {"decodes": decodes, "chunk": chunk}
        if positions > 1:
            row["positions"] = positions
        try:
            row["ms"] = round(timed_ms(model, decodes, chunk, positions), 3)
        except Exception as exc:  # recorded, not fatal: the other shapes still count
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    result["elapsed_s"] = round(time.monotonic() - began, 1)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
