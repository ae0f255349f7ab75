"""Time whole engine steps of a Llama-shaped model on one GPU, carrying decodes and a prompt chunk together.

Runs with PyTorch alone: ``python benchmarks/gpu/measure_steps.py --out steps.json [--model llama-3.1-70b-tp2]
[--fp8]``. The step is the model's forward pass as a continuous-batching engine runs it: ``D`` running sequences,
one token each, attending to a KV cache of ``context`` tokens, plus a chunk of ``P`` prompt tokens (one fresh prompt,
causal over itself), every projection run once on all ``D + P`` tokens, and the LM head on the ``D`` decode tokens
plus the chunk's last. With ``--verify K`` it also times speculative verify steps: each sequence carries K + 1
positions through every projection, the LM head and attention (one read of its cache, the positions folded into the
query block). Random weights with the model's shapes, each layer its own weights and KV cache, so every read comes
from HBM as in an engine. ``llama-3.1-8b`` is the whole model (32 layers, hidden 4096, 32 query and 8 KV heads of
128, MLP 14336, vocabulary 128256); ``llama-3.1-70b-tp2`` is one GPU's half of Llama-3.1-70B under tp=2 (80 layers,
hidden 8192, 32 query and 4 KV heads, MLP 14336, half the vocabulary), the all-reduces left out. ``--fp8`` stores
the four projections' weights in FP8 with per-tensor scales and runs them through ``torch._scaled_mm`` (each input
cast to FP8 first, as an FP8 checkpoint's engine does, though engines fuse that cast into the norm); the KV cache,
attention and LM head stay bf16.

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
from dataclasses import asdict, dataclass
from typing import Any

import torch
from measure_kernels import replay_median_ms

REPLAYS = 10


@dataclass(frozen=True)
class Shapes:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    layers: int
    vocab: int


MODELS = {
    "llama-3.1-8b": Shapes(4096, 32, 8, 128, 14336, 32, 128256),
    "llama-3.1-70b-tp2": Shapes(8192, 32, 4, 128, 14336, 80, 64128),
}


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * weight


class Linear:
    """One projection's weight [n, k]: bf16 through ``torch.mm``, or FP8 with a per-tensor scale."""

    def __init__(self, n: int, k: int, fp8: bool) -> None:
        weight = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).normal_(0, 0.02)
        self.fp8 = fp8
        if fp8:
            self.scale = (weight.abs().max().float() / 448.0).clamp(min=1e-12)
            self.weight = (weight.float() / self.scale).to(torch.float8_e4m3fn)
            self.one = torch.ones((), device="cuda", dtype=torch.float32)
        else:
            self.weight = weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fp8:
            return x @ self.weight.t()
        # activations near unit scale: cast straight to FP8 (an engine's quantising norm does this in its epilogue)
        return torch._scaled_mm(x.to(torch.float8_e4m3fn), self.weight.t(), scale_a=self.one, scale_b=self.scale,
                                out_dtype=torch.bfloat16)


class Model:
    """The weights and per-layer KV caches; ``step`` runs one forward pass."""

    def __init__(self, shapes: Shapes, max_seqs: int, context: int, fp8: bool) -> None:
        dev, dt, s = "cuda", torch.bfloat16, shapes
        self.s = s

        def param(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, device=dev, dtype=dt).normal_(0, 0.02)

        self.layers = [
            {"norm1": torch.ones(s.hidden, device=dev, dtype=dt), "norm2": torch.ones(s.hidden, device=dev, dtype=dt),
             "qkv": Linear((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden, fp8),
             "o": Linear(s.hidden, s.heads * s.head_dim, fp8),
             "gate_up": Linear(2 * s.mlp, s.hidden, fp8), "down": Linear(s.hidden, s.mlp, fp8),
             "k_cache": param(max_seqs, s.kv_heads, context, s.head_dim),
             "v_cache": param(max_seqs, s.kv_heads, context, s.head_dim)}
            for _ in range(s.layers)
        ]
        self.final_norm = torch.ones(s.hidden, device=dev, dtype=dt)
        self.lm_head = param(s.vocab, s.hidden)

    def step(self, x: torch.Tensor, decodes: int, chunk: int, positions: int = 1) -> torch.Tensor:
        """One pass; each decoding sequence carries ``positions`` query tokens (K + 1 in a verify step)."""
        from torch.nn.attention import SDPBackend, sdpa_kernel
        s = self.s
        group = s.heads // s.kv_heads
        rows_d = decodes * positions
        for layer in self.layers:
            h = rms_norm(x, layer["norm1"])
            qkv = layer["qkv"](h)
            q, k, v = qkv.split([s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1)
            parts = []
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                if decodes:
                    # a sequence's positions x its group's heads form one query block per KV head
                    qd = q[:rows_d].reshape(decodes, positions, s.kv_heads, group, s.head_dim).permute(0, 2, 1, 3, 4)
                    out = torch.nn.functional.scaled_dot_product_attention(
                        qd.reshape(decodes, s.kv_heads, positions * group, s.head_dim),
                        layer["k_cache"][:decodes], layer["v_cache"][:decodes])
                    out = out.reshape(decodes, s.kv_heads, positions, group, s.head_dim).permute(0, 2, 1, 3, 4)
                    parts.append(out.reshape(rows_d, s.heads * s.head_dim))
                if chunk:
                    qp = q[rows_d:].reshape(1, chunk, s.heads, s.head_dim).transpose(1, 2)
                    kp = k[rows_d:].reshape(1, chunk, s.kv_heads, s.head_dim).transpose(1, 2)
                    vp = v[rows_d:].reshape(1, chunk, s.kv_heads, s.head_dim).transpose(1, 2)
                    kp, vp = kp.repeat_interleave(group, dim=1), vp.repeat_interleave(group, dim=1)
                    out = torch.nn.functional.scaled_dot_product_attention(qp, kp, vp, is_causal=True)
                    parts.append(out.transpose(1, 2).reshape(chunk, s.heads * s.head_dim))
            attn = torch.cat(parts) if len(parts) > 1 else parts[0]
            x = x + layer["o"](attn.contiguous())
            h = rms_norm(x, layer["norm2"])
            gate, up = layer["gate_up"](h).chunk(2, dim=-1)
            x = x + layer["down"]((torch.nn.functional.silu(gate) * up).contiguous())
        rows = torch.cat([x[:rows_d], x[-1:]]) if chunk else x
        return rms_norm(rows, self.final_norm) @ self.lm_head.t()


def timed_ms(model: Model, decodes: int, chunk: int, positions: int = 1) -> float:
    x = torch.randn(decodes * positions + chunk, model.s.hidden, device="cuda", dtype=torch.bfloat16) * 0.02
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
    parser.add_argument("--model", choices=sorted(MODELS), default="llama-3.1-8b")
    parser.add_argument("--fp8", action="store_true", help="FP8 weights (per-tensor scales) for the projections")
    parser.add_argument("--context", type=int, default=4096, help="KV tokens each decoding sequence attends to")
    parser.add_argument("--decodes", type=int, nargs="*", default=[1, 8, 32, 64, 128],
                        help="decoding sequences in a step (each config is timed at every one)")
    parser.add_argument("--chunks", type=int, nargs="*", default=[512, 2048], help="prompt chunks mixed in")
    parser.add_argument("--verify", type=int, nargs="*", default=[],
                        help="also time verify steps of K+1 positions per sequence, for each K given (no chunk)")
    parser.add_argument("--budget-s", type=float, default=240.0)
    args = parser.parse_args()
    began = time.monotonic()
    shapes = MODELS[args.model]
    model = Model(shapes, max(args.decodes), args.context, args.fp8)
    props = torch.cuda.get_device_properties(0)
    weights = "fp8 projections (per-tensor), bf16 LM head" if args.fp8 else "bf16"
    result: dict[str, Any] = {"device": props.name, "torch": torch.__version__,
                              "model": f"{args.model} shapes, {weights}", "shapes": asdict(shapes), "fp8": args.fp8,
                              "context": args.context,
                              "method": __doc__.strip().splitlines()[0], "rows": []}
    configs = [(d, p, 1) for p in (0, *args.chunks) for d in args.decodes]
    configs += [(0, p, 1) for p in sorted({*args.chunks, 8192})]
    configs += [(d, 0, k + 1) for k in args.verify for d in args.decodes]
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
