"""Held-out validation: shardplan's predicted latency and throughput against public end-to-end measurements.

The rows of ``benchmarks/calibration/end_to_end.yaml`` are HELD OUT. No parameter of the cost model is
fitted to them: ``fit.py`` fits the kernel-level parameters to ``kernels.yaml`` only, and nothing here
feeds back into ``tools/data/calibration.yaml``. This script only prices each row and reports the error.

Which rows are priced: those with a well-defined load -- every row that states a batch or a concurrency,
and online-serving rows measured at a fixed request rate (``qps``). Every row goes through the serving
model of :mod:`shardplan.tools.serving` (steps priced by the DAG cost model, steady state of the
engine's batching), the same path a plan's deployment figures take:

* **static batches**: rows at batch 1, and fixed-batch benchmarks (vLLM ``benchmark_latency``, gpt-fast,
  TensorRT-LLM's C++ batch benchmark): the batch is prefilled together (TTFT), then decoded together
  (TPOT) -- :func:`~shardplan.tools.serving.static_point`;
* **continuous batching** at a stated client concurrency (NIM/AIPerf, InferenceX, trtllm-bench at a
  concurrency): the running sequences' decode tokens and the arriving prompts' chunks share the steps,
  under the engine's step-token budget where the row states it (``max_batched_tokens``), otherwise the
  serving model's default -- :func:`~shardplan.tools.serving.continuous_point` at the concurrency per
  replica;
* **continuous batching at a request rate**: the concurrency whose steady state serves the rate
  (Little's law inside the serving model), found by bisection and interpolated between the two
  integer concurrencies around it.

The batch column says which. Rows are skipped, with the reason
printed, when: the GPU is not in the catalog (GB200; H800, which has H100 compute but 400 GB/s NVLink),
the note says speculative decoding / MTP (a step then emits several tokens), the metric is not one the
model predicts (prefill-only input throughput), no concurrency can be known (max-throughput sweeps
at an infinite request rate, where the engine's scheduler picks the batch), or the concurrency does not
fit the step budget. A row whose strategy does not parse or whose DAG cannot be built is reported and
skipped. Rows kept with a caveat say so in the notes column (the gpt-fast A100 rows ran at a 330 W
power cap; mapped models; assumed output length).

Each priced row is built from ``load_model(model, weight_dtype=row weight_dtype)`` (FP8 KV cache where
the note says so; a row whose weight format is the one its checkpoint publishes for the experts, gpt-oss's
MXFP4, loads the checkpoint as published, attention and embeddings in bf16: :func:`checkpoint_dtype`),
``make_cluster(gpu, gpus)``, ``parse_strategy(strategy)`` (``dp`` = replicas) and the row's engine (its
measured tables; vLLM's for any other engine, such as gpt-fast or NIM).

Usage::

    .venv/bin/python benchmarks/calibration/error_table.py [--backend measured|roofline] [--json FILE] [--write]

Both backends price every row: ``--backend measured`` (the default, as ``estimate_cost`` prices) uses
NVIDIA's measured kernel tables for the GPUs and kernels they cover and the roofline for the rest;
``--backend roofline`` prices with the roofline alone. Rows on GPUs outside the measured database are
roofline-priced either way.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Batching, Workload
from shardplan.tools.catalogs.gpus import gpu_catalog, make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.catalogs.weight_formats import with_attention_dtype
from shardplan.tools.serving.placement import worker_cluster
from shardplan.tools.serving.steady import ServingPoint, continuous_point, static_point
from shardplan.tools.serving.steps import StepPricer

HERE = Path(__file__).resolve().parent
END_TO_END = HERE / "end_to_end.yaml"
DEFAULT_OSL = 128
METRICS = {"tpot_ms", "ttft_ms", "output_tokens_per_s", "output_tokens_per_s_per_gpu"}


@dataclass
class Result:
    id: str
    model: str
    gpu: str
    strategy: str
    metric: str
    batch: str
    measured: float
    predicted: float
    error_pct: float
    source: str
    notes: list[str] = field(default_factory=list)


@dataclass
class Skipped:
    id: str
    reason: str


def short_source(source: str) -> str:
    """``owner/repo`` plus an issue, pull request or file name; or the web host."""
    repo = re.search(r"github\.com/([\w.-]+/[\w.-]+)", source)
    if repo:
        name = repo.group(1)
        ref = re.search(r"(?:issue|pull)\s*#(\d+)", source)
        if ref:
            return f"{name} #{ref.group(1)}"
        doc = re.search(r"([\w.-]+)\.md", source[repo.end():])
        if not doc:
            return name
        stem = doc.group(1)
        return f"{name} {stem if len(stem) <= 24 else stem[:22] + '..'}"
    host = re.search(r"https?://([^/\s]+)", source)
    return host.group(1) if host else source[:40]


def request_rate(row: dict[str, Any]) -> float | None:
    """Requests per second of an online-serving row (``inf`` for a saturating run), else None."""
    found = re.search(r"qps(inf|\d+(?:\.\d+)?)", row["id"], re.I)
    if found:
        return math.inf if found.group(1).lower() == "inf" else float(found.group(1))
    found = re.search(r"rate of (\d+(?:\.\d+)?) req/s", str(row.get("note", "")))
    return float(found.group(1)) if found else None


def serving_engine(row: dict[str, Any]) -> str:
    """The engine whose tables price a row: the one it was measured on, vLLM for any other (gpt-fast)."""
    text = str(row.get("engine", "")).lower()
    return "trtllm" if "tensorrt" in text else "sglang" if "sglang" in text else "vllm"


# Fixed-batch benchmarks: the batch runs prefill then decode together (static batching).
_STATIC_BENCHMARK = re.compile(r"benchmark_latency|gpt-fast|C\+\+ benchmark|fixed batch", re.I)


def fixed_batch(row: dict[str, Any]) -> bool:
    """Whether the row comes from a fixed-batch benchmark (the batch prefilled, then decoded together)."""
    return bool(_STATIC_BENCHMARK.search(str(row.get("engine", ""))))


def batching(row: dict[str, Any]) -> Batching:
    """How the row's engine batched its requests: static for batch 1 and fixed-batch benchmarks."""
    if row.get("batch") == 1 or fixed_batch(row):
        return "static"
    return "continuous"


def kv_dtype(row: dict[str, Any]) -> str | None:
    """The row's KV-cache format where its note states FP8, else None (the model's own)."""
    return "fp8" if re.search(r"fp8 kv", str(row.get("note", "")), re.I) else None


def attention_dtype(row: dict[str, Any]) -> str | None:
    """The format the row's attention kernels multiply in where its source states FP8 attention, else None (bf16)."""
    return row.get("attention_dtype")


@dataclass(frozen=True)
class Setup:
    """One row's replica: its step pricer, the workload it serves and how many replicas share the load."""

    pricer: StepPricer
    workload: Workload
    replicas: int


def checkpoint_dtype(model: str, weight_dtype: str) -> str | None:
    """The weight format to load a row's model in: None (the checkpoint's own) when ``weight_dtype`` is
    what the published checkpoint already stores its experts in, else ``weight_dtype`` for every weight.

    gpt-oss publishes MXFP4 experts and bf16 attention, router, embeddings and head (its config's
    ``quantization_config`` skips them, and vLLM serves them unquantised); a row recorded as ``fp4`` ran
    that checkpoint, not one with 4-bit attention.

    >>> checkpoint_dtype("openai/gpt-oss-120b", "fp4") is None, checkpoint_dtype("deepseek-ai/DeepSeek-V3", "fp4")
    (True, 'fp4')
    """
    return None if load_model(model).expert_dtype == weight_dtype else weight_dtype


@cache
def setup(model: str, weight_dtype: str | None, kv_dtype: str | None, gpu: str, gpus: int, strategy: str, isl: int,
          osl: int, engine: str, mode: str, budget: int | None, backend: str, attention: str | None = None) -> Setup:
    spec = load_model(model, weight_dtype=weight_dtype, kv_dtype=kv_dtype)  # type: ignore[arg-type]
    if attention:
        spec = with_attention_dtype(spec, attention, gpu)  # type: ignore[arg-type]
    layout = parse_strategy(strategy).decode
    replica = layout.model_copy(update={"dp": 1})
    cluster = worker_cluster(make_cluster(gpu, gpus), replica.gpus)
    fields: dict[str, Any] = {"isl": isl, "osl": osl, "engine": engine, "batching": mode}
    if budget:
        fields["max_batched_tokens"] = budget
    workload = Workload.model_validate(fields)
    pricer = StepPricer.for_workload(spec, cluster, replica, workload, backend)  # type: ignore[arg-type]
    return Setup(pricer, workload, layout.dp)


def at_rate(pricer: StepPricer, workload: Workload, rate: float) -> tuple[float, float, float]:
    """(concurrency, TTFT s, TPOT s) of the continuous-batching steady state that serves ``rate`` requests/s
    per replica: bisect the integer concurrency, then interpolate between the two around the rate."""

    def point(concurrency: int) -> ServingPoint:
        found = continuous_point(pricer, concurrency, workload)
        if found is None:
            raise ValueError(f"{rate:g} req/s needs more sequences than the step budget of "
                             f"{workload.max_batched_tokens} tokens")
        return found

    low, high = 1, 2
    while point(high).requests_per_s < rate:
        low, high = high, high * 2
    if point(low).requests_per_s >= rate:
        high = low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if point(middle).requests_per_s < rate else (low, middle)
    a, b = point(low), point(high)
    gained = b.requests_per_s - a.requests_per_s
    share = min(max((rate - a.requests_per_s) / gained, 0.0), 1.0) if gained > 0 else 0.0
    return (low + share * (high - low), a.ttft_s + share * (b.ttft_s - a.ttft_s),
            a.tpot_s + share * (b.tpot_s - a.tpot_s))


def skip_reason(row: dict[str, Any]) -> str | None:
    note = str(row.get("note", ""))
    if row["gpu"] not in gpu_catalog():
        extra = " (H100 compute, 400 GB/s NVLink)" if row["gpu"] == "H800" else ""
        return f"GPU {row['gpu']} not in the catalog{extra}"
    if re.search(r"\bMTP\b|speculative", note, re.I):
        return "speculative decoding (MTP): a decode step emits several tokens"
    if row["metric"] not in METRICS:
        return f"metric {row['metric']} not predicted by the model"
    if not row.get("isl"):
        return "no input length"
    if row.get("batch"):
        return None
    rate = request_rate(row)
    if rate is None:
        return "no batch and no request rate: the engine's scheduler set the concurrency (max-throughput sweep)"
    if math.isinf(rate):
        return "saturating run (QPS=INF): concurrency set by the scheduler, not stated"
    return None


def evaluate(row: dict[str, Any], backend: str = "auto") -> Result:
    """Price one row (``backend``: "auto", measured tables where they exist, or "roofline")."""
    note = str(row.get("note", ""))
    notes: list[str] = []
    osl = row.get("osl") or DEFAULT_OSL
    if not row.get("osl"):
        notes.append(f"osl {DEFAULT_OSL} assumed")
    kv = kv_dtype(row)
    if kv:
        notes.append("FP8 KV cache")
    attention = attention_dtype(row)
    if attention:
        notes.append(f"{attention} attention")
    if "power" in note.lower() and "330" in note:
        notes.append("A100 at 330 W power cap")
    if "MAPPED MODEL" in note:
        notes.append("model mapped (see note)")
    if "LOW CONFIDENCE" in note:
        notes.append("low-confidence layout")
    if "AWQ" in note:
        notes.append("AWQ int4 priced as 4-bit weights, weight-only (bf16 math)")
    mode = batching(row)
    budget = row.get("max_batched_tokens")
    weights = checkpoint_dtype(row["model"], row["weight_dtype"])
    found = setup(row["model"], weights, kv, row["gpu"], int(row["gpus"]), row["strategy"],
                  int(row["isl"]), int(osl), serving_engine(row), mode, budget, backend, attention)
    workload = found.workload
    if row.get("batch"):
        concurrency = math.ceil(int(row["batch"]) / found.replicas)
        if mode == "static":
            point: ServingPoint | None = static_point(found.pricer, concurrency, workload)
        else:
            point = continuous_point(found.pricer, concurrency, workload)
        if point is None:
            raise ValueError(f"concurrency {concurrency} does not fit a step budget of "
                             f"{workload.max_batched_tokens} tokens")
        ttft, tpot, rate = point.ttft_s, point.tpot_s, point.requests_per_s
        per = f" per replica x{found.replicas}" if found.replicas > 1 else ""
        batch_text = f"{row['batch']} ({mode}{per})"
        if mode == "continuous":
            notes.append(f"continuous batching: {point.decoding:.1f} decoding, prompt chunks of "
                         f"{point.prefill_chunk:.0f} tokens")
    else:
        rate = request_rate(row) or 0.0
        in_flight, ttft, tpot = at_rate(found.pricer, workload, rate / found.replicas)
        rate /= found.replicas
        batch_text = f"{in_flight:.1f} (continuous at {rate * found.replicas:g} req/s)"
    tokens = found.replicas * rate * workload.osl
    if budget:
        notes.append(f"step budget {budget} tokens")
    predicted = {"tpot_ms": tpot * 1e3, "ttft_ms": ttft * 1e3, "output_tokens_per_s": tokens,
                 "output_tokens_per_s_per_gpu": tokens / int(row["gpus"])}[row["metric"]]
    measured = float(row["value"])
    short_model = row["model"].split("/", 1)[1]
    return Result(row["id"], short_model, f"{row['gpu']} x{row['gpus']}", row["strategy"], row["metric"],
                  batch_text, measured, predicted, (predicted - measured) / measured * 100.0,
                  short_source(str(row["source"])), notes)


def summary(results: list[Result]) -> dict[str, float]:
    errors = [abs(r.error_pct) for r in results]
    return {"rows": len(results), "median_abs_error_pct": statistics.median(errors) if errors else math.nan,
            "mean_abs_error_pct": statistics.fmean(errors) if errors else math.nan,
            "within_25_pct": sum(1 for e in errors if e <= 25.0)}


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def write_held_out_error(backend: str, rows: int, medians: dict[str, float]) -> None:
    """Replace the numbers of ``backend`` in calibration.yaml's ``held_out_error`` section, keeping every
    other line."""
    path = Path(__file__).resolve().parents[2] / "tools" / "data" / "calibration.yaml"
    values = {"rows": str(rows), "tpot_median_pct": f"{medians.get('tpot_ms', math.nan):.1f}",
              "ttft_median_pct": f"{medians.get('ttft_ms', math.nan):.1f}",
              "throughput_median_pct": f"{medians.get('output_tokens_per_s_per_gpu', math.nan):.1f}"}
    lines, inside, current = [], False, ""
    for line in path.read_text().splitlines(keepends=True):
        if not line.startswith((" ", "#")):
            inside = line.startswith("held_out_error:")
        elif line.startswith("  ") and not line.startswith("   ") and not line.strip().startswith("#"):
            current = line.strip().rstrip(":")
        key = line.strip().split(":")[0]
        if inside and current == backend and key in values:
            line = f"    {key}: {values[key]}\n"
        lines.append(line)
    path.write_text("".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the rows, skipped rows and summary to FILE")
    parser.add_argument("--write", action="store_true",
                        help="record the medians in tools/data/calibration.yaml (held_out_error), which reports quote")
    parser.add_argument("--backend", choices=("measured", "roofline"), default="measured",
                        help="measured: the measured tables where they cover a row (the default pricing); "
                             "roofline: the roofline alone")
    args = parser.parse_args(argv)
    backend = "auto" if args.backend == "measured" else "roofline"

    rows = yaml.safe_load(END_TO_END.read_text())
    results: list[Result] = []
    skipped: list[Skipped] = []
    for row in rows:
        reason = skip_reason(row)
        if reason:
            skipped.append(Skipped(row["id"], reason))
            continue
        try:
            results.append(evaluate(row, backend))
        except Exception as exc:  # a strategy that does not parse or build is reported, not fatal
            skipped.append(Skipped(row["id"], f"parse/build failed: {type(exc).__name__}: {exc}"))

    print(f"Held-out end-to-end validation, {args.backend} backend (no cost-model parameter is fitted to these "
          "rows).\n")
    print("| id | model | GPU x n | strategy | metric | batch | measured | predicted | error % | source | notes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r.id} | {r.model} | {r.gpu} | {r.strategy} | {r.metric} | {r.batch} | {_fmt(r.measured)} | "
              f"{_fmt(r.predicted)} | {r.error_pct:+.0f}% | {r.source} | {'; '.join(r.notes)} |")
    s = summary(results)
    print(f"\nSummary: {s['rows']} rows; median |error| {s['median_abs_error_pct']:.1f}%; "
          f"mean |error| {s['mean_abs_error_pct']:.1f}%; within ±25%: {s['within_25_pct']}/{s['rows']}.")
    for metric in sorted({r.metric for r in results}):
        part = summary([r for r in results if r.metric == metric])
        print(f"  {metric}: {part['rows']} rows, median |error| {part['median_abs_error_pct']:.1f}%, "
              f"within ±25%: {part['within_25_pct']}/{part['rows']}")
    print(f"\nSkipped ({len(skipped)}):\n")
    print("| id | reason |\n|---|---|")
    for k in skipped:
        print(f"| {k.id} | {k.reason} |")

    if args.write:
        by_metric = {m: summary([r for r in results if r.metric == m])["median_abs_error_pct"]
                     for m in {r.metric for r in results}}
        write_held_out_error(args.backend, len(results), by_metric)
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in results],
                                         "skipped": [asdict(k) for k in skipped], "summary": s}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
