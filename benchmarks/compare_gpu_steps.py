"""shardplan's step pricer against engine steps measured on an H200: decodes and a prompt chunk in one step.

Run: .venv/bin/python benchmarks/compare_gpu_steps.py [--engine vllm|sglang|trtllm] [--backend auto|roofline]

The measurements (``benchmarks/data/gpu/steps_h200*.json``, made by ``benchmarks/gpu/measure_steps.py`` on one H200)
run Llama-3.1-8B's shapes in bf16 through a CUDA-graphed PyTorch forward pass: D decoding sequences attending to a
KV cache of ``context`` tokens and a chunk of P tokens of a fresh prompt, in one step. shardplan prices the same step
with the serving model's :class:`~shardplan.tools.serving.steps.StepPricer` (the step the search, the steady state
and the simulator use): a workload of ``isl = P`` (so the chunk is a whole prompt and its attention the prompt's
own) and an ``osl`` that puts the mean decode context at the measured one.

Two things are read off the table:

* **the step's composition**: ``step(D, P) = linear(D + P) + decode_attention(D) + prefill_attention(P)``. The
  measured column "additive" is prefill(P) + decode(D) - decode(1), what the measured parts predict for the mixed
  step if they add up that way; its error against the measured mixed step tests the formula on the device;
* **speculative verify steps** (``steps_h200_verify.json``, ``--verify 1 3``): each sequence carries K + 1 positions
  through the whole pass. The measured verify step over the same run's plain step against shardplan's ratio
  (``linear(D (K + 1)) + verify_attention(D)`` over the plain step): a ratio cancels the level, and tells whether
  the K + 1 positions read the cache once (shardplan's pricing) or once each;
* **the level**: shardplan against the measurement. The measured pass is a floor of an engine's step in its
  kernels' work (no rotary, no KV write, no sampling) but not in their speed: its RMSNorm and SiLU are unfused
  PyTorch ops and its decode attention is PyTorch's flash kernel, which reads the KV cache at about 2.5 TB/s
  where decode kernels reach more (``benchmarks/data/gpu/attention_h200.json``). Rows where attention dominates
  are where the two should part most.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from shardplan.contracts.strategy import parse_strategy
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.steps import StepPricer

DATA = Path(__file__).parent / "data" / "gpu"
FILES = ("steps_h200_ctx1024.json", "steps_h200.json")
VERIFY_FILE = "steps_h200_verify.json"


def _pricer(prompt: int, context: int, engine: str, backend: str) -> StepPricer:
    """A pricer whose prompts are ``prompt`` tokens and whose decoding sequences attend to ``context`` tokens."""
    osl = max(2, 2 * (context - prompt))
    return StepPricer(load_model("meta-llama/Llama-3.1-8B"), make_cluster("H200", 1), parse_strategy("tp=1").decode,
                      prompt, osl, engine=engine, backend=backend)  # type: ignore[arg-type]


def rows(engine: str, backend: str) -> list[dict[str, Any]]:
    """Every measured step with shardplan's price and the additive prediction from the measured parts."""
    out: list[dict[str, Any]] = []
    for name in FILES:
        measured = json.loads((DATA / name).read_text())
        context = int(measured["context"])
        times = {(r["decodes"], r["chunk"]): float(r["ms"]) for r in measured["rows"] if "ms" in r}
        for (decodes, chunk), ms in sorted(times.items()):
            pricer = _pricer(chunk or context, context, engine, backend)
            priced = pricer.step_s(decodes, chunk) * 1e3
            additive = None
            if decodes and chunk and (0, chunk) in times and (decodes, 0) in times and (1, 0) in times:
                additive = times[(0, chunk)] + times[(decodes, 0)] - times[(1, 0)]
            out.append({"context": context, "decodes": decodes, "chunk": chunk, "measured_ms": ms,
                        "shardplan_ms": priced, "additive_ms": additive})
    return out


def verify_rows(engine: str, backend: str) -> list[dict[str, Any]]:
    """Each measured verify step against the same run's plain step, with shardplan's ratio of the two."""
    from shardplan.contracts.speculation import parse_speculation

    measured = json.loads((DATA / VERIFY_FILE).read_text())
    context = int(measured["context"])
    plain = {r["decodes"]: float(r["ms"]) for r in measured["rows"] if "ms" in r and not r["chunk"]
             and r.get("positions", 1) == 1}
    base = _pricer(context, context, engine, backend)
    out: list[dict[str, Any]] = []
    for r in measured["rows"]:
        positions, decodes = r.get("positions", 1), r["decodes"]
        if positions == 1 or "ms" not in r or decodes not in plain:
            continue
        # the acceptance does not enter a verify step's time; any value in 0..K prices it
        spec = parse_speculation(f"eagle:{positions - 1}", 0.0)
        verifying = StepPricer(base.model, base.cluster, base.layout, base.isl, base.osl, engine=base.engine,
                               backend=base.backend, speculation=spec)
        verify = verifying.linear_s(decodes * positions) + verifying.verify_attention_s(decodes)
        out.append({"decodes": decodes, "positions": positions, "measured_ms": float(r["ms"]),
                    "measured_ratio": float(r["ms"]) / plain[decodes],
                    "shardplan_ratio": verify / base.step_s(decodes, 0)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="vllm", choices=["vllm", "sglang", "trtllm"])
    parser.add_argument("--backend", default="auto", choices=["auto", "roofline"])
    args = parser.parse_args()
    table = rows(args.engine, args.backend)
    print(f"Llama-3.1-8B bf16 on one H200, engine {args.engine}, backend {args.backend}")
    print("| context | decodes | chunk | measured ms | shardplan ms | error | additive ms | additive error |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    errors, additive_errors = [], []
    for r in table:
        error = r["shardplan_ms"] / r["measured_ms"] - 1
        errors.append(abs(error))
        add = ""
        if r["additive_ms"] is not None:
            additive_error = r["additive_ms"] / r["measured_ms"] - 1
            additive_errors.append(abs(additive_error))
            add = f"{r['additive_ms']:.2f} | {additive_error:+.1%}"
        else:
            add = " | "
        print(f"| {r['context']} | {r['decodes']} | {r['chunk']} | {r['measured_ms']:.2f} | {r['shardplan_ms']:.2f} | "
              f"{error:+.1%} | {add} |")
    print(f"\nshardplan against measured: median |error| {statistics.median(errors):.1%} over {len(errors)} steps")
    if additive_errors:
        print(f"additive composition of the measured parts: median |error| {statistics.median(additive_errors):.1%} "
              f"over {len(additive_errors)} mixed steps")
    verify = verify_rows(args.engine, args.backend)
    print("\nVerify steps (K + 1 positions per sequence, context 4096) over the plain step of the same run")
    print("| decodes | K + 1 | measured ms | measured ratio | shardplan ratio | error |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    ratio_errors = []
    for r in verify:
        error = r["shardplan_ratio"] / r["measured_ratio"] - 1
        ratio_errors.append(abs(error))
        print(f"| {r['decodes']} | {r['positions']} | {r['measured_ms']:.2f} | {r['measured_ratio']:.3f} | "
              f"{r['shardplan_ratio']:.3f} | {error:+.1%} |")
    if ratio_errors:
        print(f"\nverify over plain: median |error| {statistics.median(ratio_errors):.1%} "
              f"over {len(ratio_errors)} steps")


if __name__ == "__main__":
    main()
