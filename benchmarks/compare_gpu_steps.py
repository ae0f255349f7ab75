"""shardplan's step pricer against engine steps measured on an H100 and an H200: decodes and a prompt chunk in one step.

Run: .venv/bin/python benchmarks/compare_gpu_steps.py [--engine vllm|sglang|trtllm] [--backend auto|roofline]

The measurements (``benchmarks/data/gpu/steps_*.json``, made by ``benchmarks/gpu/measure_steps.py``) run a
Llama-shaped model through a CUDA-graphed PyTorch forward pass: D decoding sequences attending to a KV cache of
``context`` tokens and a chunk of P tokens of a fresh prompt, in one step. Each file records its GPU, the shapes
(Llama-3.1-8B whole, or one GPU's half of Llama-3.1-70B under tp=2 with the all-reduces left out), bf16 or FP8
projections, and the context. shardplan prices the same step with the serving model's
:class:`~shardplan.tools.serving.steps.StepPricer` (the step the search, the steady state and the simulator use) on
the same GPU and weight format: a workload of ``isl = P`` (so the chunk is a whole prompt and its attention the
prompt's own) and an ``osl`` that puts the mean decode context at the measured one. The tp=2 rows are priced on two
GPUs, all-reduces included, so shardplan is expected above them by its collectives (about 160 small all-reduces a
step).

Three things are read off the tables:

* **the step's composition**: ``step(D, P) = linear(D + P) + decode_attention(D) + prefill_attention(P)``. The
  measured column "additive" is prefill(P) + decode(D) - decode(1), what the measured parts predict for the mixed
  step if they add up that way; its error against the measured mixed step tests the formula on the device;
* **speculative verify steps** (rows with K + 1 positions per sequence, ``--verify 1 3``): the measured verify step
  over the same run's plain step against shardplan's ratio (``linear(D (K + 1)) + verify_attention(D)`` over the
  plain step): a ratio cancels the level, and tells whether the K + 1 positions read the cache once (shardplan's
  pricing) or once each;
* **the level**: shardplan against the measurement. The measured pass is a floor of an engine's step in its
  kernels' work (no rotary, no KV write, no sampling) but not in their speed: its RMSNorm and SiLU are unfused
  PyTorch ops, its FP8 inputs are cast by a kernel of their own, and its decode attention is PyTorch's flash kernel,
  which reads the KV cache at about 2.5 TB/s where decode kernels reach more
  (``benchmarks/data/gpu/attention_h200.json``). An engine whose step comes out under this floor runs faster kernels
  than PyTorch's; a price above it by more than the engines' fusions save prices kernels slower than PyTorch's.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardplan.contracts.strategy import parse_strategy
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.steps import StepPricer

DATA = Path(__file__).parent / "data" / "gpu"


@dataclass(frozen=True)
class Run:
    """One measured file: what ran where."""

    name: str
    gpu: str
    model: str
    strategy: str
    gpus: int
    fp8: bool
    context: int
    rows: list[dict[str, Any]]

    @property
    def label(self) -> str:
        shapes = "Llama-3.1-70B tp=2 (one GPU's half)" if self.gpus == 2 else "Llama-3.1-8B"
        return f"{shapes} {'fp8' if self.fp8 else 'bf16'} on {self.gpu}, context {self.context}"


def load_runs() -> list[Run]:
    """Every stored step measurement (older files, without ``shapes``, are Llama-3.1-8B in bf16). A repeat of a run
    (``*_run2.json``, another machine on another day) is left out of the tables: ``repeatability`` compares it."""
    runs = []
    for path in sorted(DATA.glob("steps_*.json")):
        if "_run" in path.stem:
            continue
        data = json.loads(path.read_text())
        seventy = "70b" in str(data.get("model", "")).lower()
        runs.append(Run(path.name, "H100" if "H100" in data["device"] else "H200",
                        "meta-llama/Llama-3.1-70B" if seventy else "meta-llama/Llama-3.1-8B",
                        "tp=2" if seventy else "tp=1", 2 if seventy else 1, bool(data.get("fp8")),
                        int(data["context"]), [r for r in data["rows"] if "ms" in r]))
    return runs


def repeatability() -> list[str]:
    """Each repeated run against its first: the median and largest relative difference of the same steps."""
    lines = []
    for again in sorted(DATA.glob("steps_*_run*.json")):
        first = DATA / (again.stem.rsplit("_run", 1)[0] + ".json")
        if not first.exists():
            continue
        steps = [{(r["decodes"], r["chunk"], r.get("positions", 1)): r["ms"] for r in json.loads(p.read_text())["rows"]
                  if "ms" in r} for p in (first, again)]
        diffs = [abs(steps[1][k] / steps[0][k] - 1) for k in steps[0] if k in steps[1]]
        if diffs:
            lines.append(f"repeat {again.name} against {first.name}: median |difference| "
                         f"{statistics.median(diffs):.1%}, largest {max(diffs):.1%} over {len(diffs)} steps")
    return lines


def _pricer(run: Run, prompt: int, engine: str, backend: str) -> StepPricer:
    """A pricer whose prompts are ``prompt`` tokens and whose decoding sequences attend to ``run.context`` tokens."""
    osl = max(2, 2 * (run.context - prompt))
    model = load_model(run.model, weight_dtype="fp8" if run.fp8 else "bf16", kv_dtype="bf16")
    return StepPricer(model, make_cluster(run.gpu, run.gpus), parse_strategy(run.strategy).decode,  # type: ignore[arg-type]
                      prompt, osl, engine=engine, backend=backend)  # type: ignore[arg-type]


def rows(run: Run, engine: str, backend: str) -> list[dict[str, Any]]:
    """Every measured plain or mixed step with shardplan's price and the additive prediction from the measured parts."""
    times = {(r["decodes"], r["chunk"]): float(r["ms"]) for r in run.rows if r.get("positions", 1) == 1}
    out: list[dict[str, Any]] = []
    for (decodes, chunk), ms in sorted(times.items()):
        priced = _pricer(run, chunk or run.context, engine, backend).step_s(decodes, chunk) * 1e3
        additive = None
        if decodes and chunk and (0, chunk) in times and (decodes, 0) in times and (1, 0) in times:
            additive = times[(0, chunk)] + times[(decodes, 0)] - times[(1, 0)]
        out.append({"decodes": decodes, "chunk": chunk, "measured_ms": ms, "shardplan_ms": priced,
                    "additive_ms": additive})
    return out


def verify_rows(run: Run, engine: str, backend: str) -> list[dict[str, Any]]:
    """Each measured verify step against the same run's plain step, with shardplan's ratio of the two."""
    from shardplan.contracts.speculation import parse_speculation

    plain = {r["decodes"]: float(r["ms"]) for r in run.rows if not r["chunk"] and r.get("positions", 1) == 1}
    base = _pricer(run, run.context, engine, backend)
    out: list[dict[str, Any]] = []
    for r in run.rows:
        positions, decodes = r.get("positions", 1), r["decodes"]
        if positions == 1 or decodes not in plain:
            continue
        # the acceptance does not enter a verify step's time; any value in 0..K prices it
        spec = parse_speculation(f"eagle:{positions - 1}", 0.0)
        verifying = StepPricer(base.model, base.cluster, base.layout, base.isl, base.osl, engine=base.engine,
                               backend=base.backend, speculation=spec)
        verify = verifying.verify_linear_s(decodes) + verifying.verify_attention_s(decodes)
        out.append({"decodes": decodes, "positions": positions, "measured_ms": float(r["ms"]),
                    "measured_ratio": float(r["ms"]) / plain[decodes],
                    "shardplan_ratio": verify / base.step_s(decodes, 0)})
    return out


def _print_steps(run: Run, table: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float]]:
    print(f"\n{run.label} ({run.name})")
    print("| decodes | chunk | measured ms | shardplan ms | error | additive ms | additive error |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    errors, decode_errors, additive_errors = [], [], []
    for r in table:
        error = r["shardplan_ms"] / r["measured_ms"] - 1
        errors.append(error)
        if not r["chunk"]:
            decode_errors.append(error)
        add = " | "
        if r["additive_ms"] is not None:
            additive_error = r["additive_ms"] / r["measured_ms"] - 1
            additive_errors.append(additive_error)
            add = f"{r['additive_ms']:.2f} | {additive_error:+.1%}"
        print(f"| {r['decodes']} | {r['chunk']} | {r['measured_ms']:.2f} | {r['shardplan_ms']:.2f} | {error:+.1%} | "
              f"{add} |")
    return errors, decode_errors, additive_errors


def _median_line(what: str, errors: list[float]) -> str:
    return (f"{what}: median |error| {statistics.median(abs(e) for e in errors):.1%}, median signed "
            f"{statistics.median(errors):+.1%} over {len(errors)} steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="vllm", choices=["vllm", "sglang", "trtllm"])
    parser.add_argument("--backend", default="auto", choices=["auto", "roofline"])
    args = parser.parse_args()
    print(f"Measured PyTorch steps against shardplan's step pricer, engine {args.engine}'s tables, backend "
          f"{args.backend}")
    summary: dict[str, list[float]] = {}
    decode_summary: dict[str, list[float]] = {}
    composition: list[float] = []
    verify_summary: list[str] = []
    for run in load_runs():
        errors, decode, additive = _print_steps(run, rows(run, args.engine, args.backend))
        key = run.label.rsplit(", context", 1)[0]
        summary.setdefault(key, []).extend(errors)
        decode_summary.setdefault(key, []).extend(decode)
        composition.extend(additive)
        verify = verify_rows(run, args.engine, args.backend)
        if not verify:
            continue
        print(f"\nVerify steps of {run.label} (K + 1 positions per sequence) over the plain step of the same run")
        print("| decodes | K + 1 | measured ms | measured ratio | shardplan ratio | error |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        ratio_errors = []
        for r in verify:
            error = r["shardplan_ratio"] / r["measured_ratio"] - 1
            ratio_errors.append(error)
            print(f"| {r['decodes']} | {r['positions']} | {r['measured_ms']:.2f} | {r['measured_ratio']:.3f} | "
                  f"{r['shardplan_ratio']:.3f} | {error:+.1%} |")
        verify_summary.append(_median_line(f"verify over plain, {run.label}", ratio_errors))
    print()
    for key, errors in summary.items():
        print(_median_line(f"shardplan against measured, {key}", errors))
        print(_median_line("  of which decode steps (no prompt chunk)", decode_summary[key]))
    if composition:
        print(_median_line("additive composition of the measured parts (mixed steps)", composition))
    for line in verify_summary:
        print(line)
    for line in repeatability():
        print(line)


if __name__ == "__main__":
    main()
