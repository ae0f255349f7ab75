"""Both cost backends against AIConfigurator's static estimates on a grid of configurations.

The grid: 7 models (dense GQA: Llama-3.1-8B, Qwen3-32B, Llama-3.1-70B; MoE: Qwen3-30B-A3B,
Mixtral-8x7B, gpt-oss-120b, Qwen3-235B-A22B) x 2 GPUs (H100, H200) x 3 shapes (isl/osl/batch
1024/128/1, 2048/256/8, 4096/256/32) x the layouts that fit (TP 1-8, PP 2, and for MoE models expert
TP or EP inside the TP group), priced under vLLM. The reference is AIConfigurator's own estimator
(``aic_reference.py``): TTFT of a static batch's prefill and TPOT of its decode steps. Each
configuration is priced by shardplan twice, with the measured backend (``estimate_cost``'s default)
and with the roofline alone (``backend="roofline"``). Printed: median and p90 |error| of TTFT and
TPOT per backend, the Spearman rank correlation inside each model/GPU/shape group (averaged over
the groups), and the rows. Configurations the reference cannot price are listed and left out.

Usage::

    .venv/bin/python benchmarks/calibration/grid.py [--json FILE] [--write] [--quick]

``--write`` records the summary in ``tools/data/calibration.yaml`` (``grid_error``), which every cost
report quotes. Needs ``aiconfigurator-core`` (Linux x86-64).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from aic_reference import Layout, aic_estimate  # noqa: E402

from shardplan.contracts.strategy import parse_strategy  # noqa: E402
from shardplan.contracts.workload import Workload  # noqa: E402
from shardplan.tools.builder.build import build_dag  # noqa: E402
from shardplan.tools.catalogs.gpus import make_cluster  # noqa: E402
from shardplan.tools.catalogs.models import load_model  # noqa: E402
from shardplan.tools.cost.estimate import estimate_cost  # noqa: E402

DENSE = ["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-32B", "meta-llama/Llama-3.1-70B"]
MOE = ["Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x7B-v0.1", "openai/gpt-oss-120b", "Qwen/Qwen3-235B-A22B"]
GPUS = ["H100", "H200"]
SHAPES = [(1024, 128, 1), (2048, 256, 8), (4096, 256, 32)]
BACKENDS = ("measured", "roofline")


@dataclass
class Row:
    model: str
    gpu: str
    spec: str
    isl: int
    osl: int
    batch: int
    ref_ttft: float
    ref_tpot: float
    ttft: dict[str, float]
    tpot: dict[str, float]

    @property
    def group(self) -> tuple[str, str, int, int, int]:
        return self.model, self.gpu, self.isl, self.osl, self.batch


def layouts(model: str) -> list[Layout]:
    """Layouts of up to 8 GPUs: TP, TP x PP2, and for MoE models EP across the TP group."""
    found = [Layout(tp) for tp in (1, 2, 4, 8)] + [Layout(2, 2), Layout(4, 2)]
    if model in MOE:
        found += [Layout(tp, 1, tp) for tp in (2, 4, 8)] + [Layout(4, 2, 4)]
    return found


def price(model: str, gpu: str, layout: Layout, shape: tuple[int, int, int]) -> Row | str:
    """One configuration priced by the reference and both backends, or why it was left out."""
    isl, osl, batch = shape
    spec = load_model(model)
    cluster = make_cluster(gpu, layout.gpus)
    workload = Workload(isl=isl, osl=osl, batch=batch)
    try:
        dag = build_dag(spec, cluster, parse_strategy(layout.spec), workload)
    except Exception as exc:  # noqa: BLE001 - a layout the model cannot take (heads, experts) is skipped
        return f"not buildable: {exc}"
    reports = {backend: estimate_cost(dag, cluster, "auto" if backend == "measured" else "roofline")
               for backend in BACKENDS}
    if not reports["measured"].figures.fits:
        return "does not fit in memory"
    reference = aic_estimate(model, gpu, "vllm", layout, isl, osl, batch)
    if reference is None:
        return "AIConfigurator cannot price it"
    return Row(model, gpu, layout.spec, isl, osl, batch, reference[0], reference[1],
               {b: r.figures.ttft_ms for b, r in reports.items()}, {b: r.figures.tpot_ms for b, r in reports.items()})


def error_pct(predicted: float, reference: float) -> float:
    return (predicted - reference) / reference * 100.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def group_spearman(rows: list[Row], metric: str, backend: str) -> float:
    """Mean Spearman rank correlation, over the model/GPU/shape groups of 3 or more layouts."""
    from scipy.stats import spearmanr

    groups: dict[tuple[str, str, int, int, int], list[Row]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    values = []
    for members in groups.values():
        if len(members) < 3:
            continue
        reference = [getattr(r, f"ref_{metric}") for r in members]
        predicted = [getattr(r, metric)[backend] for r in members]
        rho = spearmanr(reference, predicted).statistic
        if not math.isnan(rho):
            values.append(float(rho))
    return statistics.fmean(values) if values else math.nan


def summarize(rows: list[Row]) -> dict[str, dict[str, float]]:
    out = {}
    for backend in BACKENDS:
        ttft = [abs(error_pct(r.ttft[backend], r.ref_ttft)) for r in rows]
        tpot = [abs(error_pct(r.tpot[backend], r.ref_tpot)) for r in rows]
        out[backend] = {
            "configs": len(rows),
            "ttft_median_pct": statistics.median(ttft),
            "tpot_median_pct": statistics.median(tpot),
            "ttft_p90_pct": percentile(ttft, 0.9),
            "tpot_p90_pct": percentile(tpot, 0.9),
            "ttft_spearman": group_spearman(rows, "ttft", backend),
            "tpot_spearman": group_spearman(rows, "tpot", backend),
        }
    return out


def write_grid_error(summary: dict[str, dict[str, float]]) -> None:
    """Replace the numbers of calibration.yaml's ``grid_error`` section, keeping every other line."""
    path = HERE.parents[1] / "tools" / "data" / "calibration.yaml"
    lines, section, backend = [], "", ""
    for line in path.read_text().splitlines(keepends=True):
        if not line.startswith((" ", "#")):
            section = line.split(":")[0]
        elif section == "grid_error" and line.startswith("  ") and not line.startswith("   "):
            backend = line.strip().rstrip(":")
        key = line.strip().split(":")[0]
        if section == "grid_error" and backend in summary and key in summary[backend] and line.startswith("    "):
            value = summary[backend][key]
            line = f"    {key}: {int(value)}\n" if key == "configs" else f"    {key}: {value:.3f}\n"
        lines.append(line)
    path.write_text("".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the rows and the summary to FILE")
    parser.add_argument("--write", action="store_true", help="record the summary in tools/data/calibration.yaml")
    parser.add_argument("--quick", action="store_true", help="only the first shape (a smoke run)")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    skipped: list[str] = []
    for model in DENSE + MOE:
        for gpu in GPUS:
            for shape in SHAPES[:1] if args.quick else SHAPES:
                for layout in layouts(model):
                    got = price(model, gpu, layout, shape)
                    if isinstance(got, Row):
                        rows.append(got)
                    elif not got.startswith(("not buildable", "does not fit")):
                        skipped.append(f"{model} {gpu} {layout.spec} {shape}: {got}")
    print("| model | GPU | strategy | isl/osl/batch | ref TTFT | measured | roofline | ref TPOT | measured "
          "| roofline |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ttft = [f"{error_pct(r.ttft[b], r.ref_ttft):+.0f}%" for b in BACKENDS]
        tpot = [f"{error_pct(r.tpot[b], r.ref_tpot):+.0f}%" for b in BACKENDS]
        print(f"| {r.model.split('/')[1]} | {r.gpu} x{eval_gpus(r.spec)} | {r.spec} | {r.isl}/{r.osl}/{r.batch} | "
              f"{r.ref_ttft:.1f} | {' | '.join(ttft)} | {r.ref_tpot:.2f} | {' | '.join(tpot)} |")
    summary = summarize(rows)
    groups = len({r.group for r in rows})
    models = len({r.model for r in rows})
    print(f"\n{len(rows)} configurations, {models} models, {groups} model/GPU/shape groups; reference: "
          "AIConfigurator's static estimate (vLLM tables)\n")
    print("| backend | TTFT median | TTFT p90 | TPOT median | TPOT p90 | Spearman TTFT | Spearman TPOT |")
    print("|---|---|---|---|---|---|---|")
    for backend, s in summary.items():
        print(f"| {backend} | {s['ttft_median_pct']:.1f}% | {s['ttft_p90_pct']:.1f}% | {s['tpot_median_pct']:.1f}% | "
              f"{s['tpot_p90_pct']:.1f}% | {s['ttft_spearman']:.3f} | {s['tpot_spearman']:.3f} |")
    if skipped:
        print(f"\nLeft out ({len(skipped)}):")
        for line in skipped:
            print(f"- {line}")
    if args.write:
        write_grid_error(summary)
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "summary": summary}, indent=2) + "\n")
    return 0


def eval_gpus(spec: str) -> int:
    """GPUs of a ``tp=..,pp=..`` spec."""
    degrees = dict(part.split("=") for part in spec.split(","))
    return int(degrees.get("tp", 1)) * int(degrees.get("pp", 1))


if __name__ == "__main__":
    raise SystemExit(main())
