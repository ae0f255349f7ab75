"""shardplan against AIConfigurator, side by side, on the same serving requests.

For each request below: AIConfigurator 0.12's own search (``aiconfigurator cli default``, vLLM backend,
agg and disagg) gives its best deployment on the GPU budget; ``shardplan plan --objective throughput``
gives shardplan's pick; ``aiconfigurator cli estimate`` (in-flight batching; ``disagg`` mode for split
plans) re-scores that pick, so both deployments are judged by the same estimator. The table shows the
ratio of tokens/s/GPU to AIConfigurator's best, whether the pick meets the targets under AIConfigurator's
estimate, and both tools' wall time. Throughput per GPU counts every GPU of the budget (idle ones as
zero), which is how AIConfigurator ranks its own results.

Two more tables say why the figures differ: shardplan's own TTFT/TPOT for its pick beside AIConfigurator's
estimate of it, and AIConfigurator's best deployment priced by shardplan (``-s SPEC --batch N``), which
separates "chose a worse deployment" from "prices the same deployment differently".

Rows marked with a dagger are picks that AIConfigurator's default search does not consider (pipeline
parallelism, a worker spanning nodes, a degree outside its candidates, read from its own saved search
space): there shardplan reaches deployments the other tool cannot, and its estimator often cannot price
them (it has no collective data for 3 or 6 GPUs). For those requests shardplan is asked once more, kept
inside AIConfigurator's search space (``--constraint pow2 --constraint pp=1 --constraint sp=off``), and
that pick is scored as well (a row marked "in AIC's space"), so every request has a pick both tools
price. The summary scores, per request, shardplan's own pick where AIConfigurator can price it, else
that in-space pick.

AIConfigurator is installed into ``benchmarks/.aic-venv`` on first use (``--aic-venv`` picks another);
when it cannot be installed the script says why and exits 0. shardplan is the ``shardplan`` command of
the running interpreter's environment (``--shardplan`` picks another).

Usage::

    .venv/bin/python benchmarks/compare_aiconfigurator.py [--cases LABEL,GLOB,...] [--jobs N] [--markdown]
        [--json FILE] [--aic-venv DIR] [--shardplan PATH] [--timeout S]
"""

from __future__ import annotations

import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aiconfigurator_cli import (
    AIC_VERSION,
    AicError,
    Deployment,
    Estimate,
    SearchResult,
    outside_search_space,
    slot_fill,
)
from aiconfigurator_run import ensure_aiconfigurator, estimate_command, run_command, run_default
from comparison_tables import comparison_parser, fmt, markdown_table, parse_comparison, print_tables, select_labelled
from shardplan_pick import Pick, run_shardplan, shardplan_spec

__all__ = ["Request", "REQUESTS", "Row", "compare", "summary", "markdown_table", "main"]


@dataclass(frozen=True)
class Request:
    """One serving request, as both tools are asked it."""

    label: str
    model: str  # shardplan's bundled name
    aic_model: str  # the same checkpoint in AIConfigurator's model database
    moe: bool
    gpu: str
    gpus: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    gpus_per_node: int = 8


LLAMA_8B, LLAMA_70B = "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B"
AIC_LLAMA_8B, AIC_LLAMA_70B = "meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B"
QWEN_30B, QWEN_235B = "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B"

# Dense and MoE, 1 to 16 GPUs, H100 and H200, short and long prompts and outputs, tight and loose targets.
REQUESTS: tuple[Request, ...] = (
    Request("llama8b-1xH100-chat", LLAMA_8B, AIC_LLAMA_8B, False, "H100", 1, 1024, 256, 500, 20),
    Request("llama8b-2xH100", LLAMA_8B, AIC_LLAMA_8B, False, "H100", 2, 2048, 256, 2000, 30),
    Request("qwen3-8b-4xH200-long", "Qwen/Qwen3-8B", "Qwen/Qwen3-8B", False, "H200", 4, 8192, 512, 3000, 25),
    Request("qwen3-32b-4xH100", "Qwen/Qwen3-32B", "Qwen/Qwen3-32B", False, "H100", 4, 2048, 512, 1000, 40),
    Request("llama70b-8xH200", LLAMA_70B, AIC_LLAMA_70B, False, "H200", 8, 3000, 300, 1500, 40),
    Request("llama70b-16xH100", LLAMA_70B, AIC_LLAMA_70B, False, "H100", 16, 4096, 1024, 2000, 50),
    Request("qwen3-30b-a3b-2xH100", QWEN_30B, QWEN_30B, True, "H100", 2, 1024, 1024, 800, 15),
    Request("qwen3-30b-a3b-4xH200", QWEN_30B, QWEN_30B, True, "H200", 4, 4096, 512, 1500, 20),
    Request("qwen3-235b-8xH200", QWEN_235B, QWEN_235B, True, "H200", 8, 4096, 1024, 3000, 50),
    Request("qwen3-235b-16xH200", QWEN_235B, QWEN_235B, True, "H200", 16, 2048, 256, 2000, 30),
)


@dataclass
class Row:
    """One request's outcome; ``error`` set when a tool gave no answer."""

    request: Request
    aic: SearchResult | None = None
    pick: Pick | None = None
    estimate: Estimate | None = None
    scored: Deployment | None = None  # the reading of the pick that AIConfigurator's estimate priced
    pick_tokens_per_s_per_gpu: float | None = None  # AIConfigurator's estimate, per GPU of the budget
    ratio: float | None = None
    meets_targets: bool | None = None
    outside_aic: list[str] = field(default_factory=list)
    shardplan_wall_s: float | None = None
    at_aic_best: Pick | None = None  # shardplan's own figures for AIConfigurator's best deployment
    in_space: Row | None = None  # shardplan asked again inside AIConfigurator's search space (dagger picks)
    constrained: bool = False  # this row is such an in-space pick
    error: str | None = None

    def verified(self) -> Row:
        """The row the summary scores: this pick when AIConfigurator priced it, else the in-space pick."""
        return self.in_space if self.ratio is None and self.in_space is not None else self


def compare(row: Row) -> Row:
    """Fill the ratio, the targets verdict and the outside-the-search-space reasons from the parts."""
    request, aic, pick, estimate = row.request, row.aic, row.pick, row.estimate
    if pick is not None and pick.deployment is not None and aic is not None:
        # SP is reported on its own (beyond_aic); the per-shard reading keeps its attention-DP stand-in
        # from being reported as well.
        layout = pick.fallback or pick.deployment
        row.outside_aic = [
            *pick.beyond_aic,
            *outside_search_space(layout, aic.space, request.moe, request.gpus_per_node),
        ]
    scored = row.scored or (pick.deployment if pick else None)
    if aic is None or scored is None or estimate is None:
        return row
    fill = slot_fill(scored)
    row.pick_tokens_per_s_per_gpu = estimate.tokens_per_s_per_gpu * fill * scored.gpus_used / request.gpus
    row.ratio = row.pick_tokens_per_s_per_gpu / aic.tokens_per_s_per_budget_gpu
    row.meets_targets = estimate.ttft_ms <= request.ttft_ms and estimate.tpot_ms <= request.tpot_ms
    return row


def summary(rows: list[Row]) -> str:
    """Median and minimum ratio, and how many picks meet the targets under AIConfigurator's estimate, over
    each request's verified pick (its own, else the one inside AIConfigurator's search space)."""
    verified = [row.verified() for row in rows]
    ratios = [row.ratio for row in verified if row.ratio is not None]
    scored = [row for row in verified if row.meets_targets is not None]
    if not ratios:
        return "no request was scored by both tools"
    meeting = sum(1 for row in scored if row.meets_targets)
    replaced = sum(1 for row, used in zip(rows, verified, strict=True) if used is not row)
    return (
        f"ratio to AIConfigurator's best tokens/s/GPU over {len(ratios)} requests"
        + (f" ({replaced} scored by the pick inside AIConfigurator's search space)" if replaced else "")
        + f": median {statistics.median(ratios):.2f}, min {min(ratios):.2f};"
        f" {meeting} of {len(scored)} picks meet the targets under AIConfigurator's estimate"
    )


# --------------------------------------------------------------------------------------------------------
# Table cells


def cells(row: Row) -> dict[str, str]:
    """The table's cells for one row (shared by the terminal and the markdown table)."""
    request, aic, pick, estimate = row.request, row.aic, row.pick, row.estimate
    targets = f"{fmt(request.ttft_ms)} ms / {fmt(request.tpot_ms)} ms"
    aic_best = "-"
    if aic is not None:
        aic_best = f"{aic.best.label(request.moe)} c={aic.best.concurrency}: {fmt(aic.tokens_per_s_per_budget_gpu)}"
    meets = "-"
    if estimate is not None and row.meets_targets is not None:
        meets = f"{'yes' if row.meets_targets else 'NO'} ({fmt(estimate.ttft_ms)} ms / {fmt(estimate.tpot_ms, 1)} ms)"
    picked = "-" if pick is None else pick.spec + (" †" if row.outside_aic else "")
    label = f"{request.label} ({request.isl}/{request.osl})"
    return {
        "request": f"{label}, in AIC's space" if row.constrained else label,
        "targets TTFT/TPOT": targets,
        "AIC best: layout, concurrency: tok/s/GPU": aic_best,
        "shardplan pick": picked,
        "shardplan's tok/s/GPU": "-" if pick is None else fmt(pick.tokens_per_s_per_gpu),
        "AIC est. of pick tok/s/GPU": fmt(row.pick_tokens_per_s_per_gpu),
        "ratio": fmt(row.ratio, 2),
        "meets targets (AIC TTFT/TPOT)": meets,
        "wall AIC / shardplan s": f"{fmt(aic.wall_s if aic else None, 1)} / {fmt(row.shardplan_wall_s, 1)}",
    }


def disagreement_cells(row: Row) -> dict[str, str]:
    """shardplan's own figures for its pick beside AIConfigurator's estimate of the same deployment."""
    pick, estimate = row.pick, row.estimate
    own_ttft, own_tpot = (pick.ttft_ms, pick.tpot_ms) if pick else (None, None)
    aic_ttft, aic_tpot = (estimate.ttft_ms, estimate.tpot_ms) if estimate else (None, None)
    notes = [*row.outside_aic, *(pick.notes if pick else ()), *(estimate.warnings if estimate else ())]
    if row.error:
        notes.append(row.error)
    return {
        "request": row.request.label + (", in AIC's space" if row.constrained else ""),
        "batching": "-" if pick is None else pick.batching,
        "TTFT ms shardplan / AIC": f"{fmt(own_ttft)} / {fmt(aic_ttft)}",
        "TPOT ms shardplan / AIC": f"{fmt(own_tpot, 1)} / {fmt(aic_tpot, 1)}",
        "notes": "; ".join(notes) or "-",
    }


def at_aic_best_cells(row: Row) -> dict[str, str]:
    """AIConfigurator's best deployment priced by both tools: where their cost models disagree."""
    aic, own = row.aic, row.at_aic_best

    def pair(theirs: float | None, ours: float | None, digits: int = 0) -> str:
        return f"{fmt(theirs, digits)} / {fmt(ours, digits)}"

    return {
        "request": row.request.label,
        "AIC best": "-" if aic is None else f"{shardplan_spec(aic.best)} c={aic.best.concurrency}",
        "TTFT ms AIC / shardplan": pair(aic.ttft_ms if aic else None, own.ttft_ms if own else None),
        "TPOT ms AIC / shardplan": pair(aic.tpot_ms if aic else None, own.tpot_ms if own else None, 1),
        "tok/s/GPU AIC / shardplan": pair(
            aic.tokens_per_s_per_budget_gpu if aic else None, own.tokens_per_s_per_gpu if own else None
        ),
        "shardplan status": "-" if own is None else f"{own.status} ({own.batching})",
    }


# --------------------------------------------------------------------------------------------------------
# Running both tools


def plan_options(request: Request) -> list[str]:
    """``shardplan plan`` options that ask the request: throughput under the targets on the GPU budget."""
    return [
        *("-m", request.model, "--gpu", request.gpu, "--gpus", str(request.gpus)),
        *("--gpus-per-node", str(request.gpus_per_node), "--isl", str(request.isl), "--osl", str(request.osl)),
        *("--ttft-ms", str(request.ttft_ms), "--tpot-ms", str(request.tpot_ms), "--objective", "throughput"),
    ]


IN_AIC_SPACE = ("-C", "pow2", "-C", "pp=1", "-C", "sp=off")
"""Constraints that keep shardplan's search inside AIConfigurator's default search space."""


def _pick_and_estimate(row: Row, aic: Path, shardplan: str, options: list[str], timeout_s: float) -> None:
    """shardplan's pick for ``options`` and AIConfigurator's estimate of it, into ``row``."""
    request = row.request
    try:
        row.pick, row.shardplan_wall_s = run_shardplan(shardplan, options, timeout_s)
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        row.error = f"shardplan: {error}"
    readings = [] if row.pick is None else [row.pick.deployment, row.pick.fallback]
    failures = []
    for deployment in [reading for reading in readings if reading is not None]:
        try:
            command = estimate_command(aic, request.aic_model, request.gpu, request.isl, request.osl, deployment,
                                       request.moe)  # vLLM backend, in-flight batching
            row.estimate = run_command(command, timeout_s)
        except AicError as error:
            failures.append(f"AIC estimate of {deployment.label(request.moe)}: {error}")
            continue
        row.scored = deployment
        break
    if failures:
        row.error = "; ".join(failures) + (f"; scored {row.scored.label(request.moe)} instead" if row.scored else "")


def run_request(request: Request, aic: Path, shardplan: str, timeout_s: float) -> Row:
    """Both tools on one request, then AIConfigurator's estimate of shardplan's pick (and, for a pick outside
    AIConfigurator's search space, of shardplan's pick inside it)."""
    row = Row(request)
    print(f"[{request.label}] running", file=sys.stderr, flush=True)
    try:
        row.aic = run_default(
            aic,
            request.aic_model,
            request.gpu,
            request.gpus,
            request.isl,
            request.osl,
            request.ttft_ms,
            request.tpot_ms,
            timeout_s,
        )
    except AicError as error:
        row.error = f"AIC default: {error}"
    _pick_and_estimate(row, aic, shardplan, plan_options(request), timeout_s)
    compare(row)
    if row.outside_aic and row.aic is not None:
        row.in_space = Row(request, aic=row.aic, constrained=True)
        _pick_and_estimate(row.in_space, aic, shardplan, [*plan_options(request), *IN_AIC_SPACE], timeout_s)
        compare(row.in_space)
    if row.aic is not None:
        best = row.aic.best
        try:
            given = ["-s", shardplan_spec(best), "--batch", str(best.concurrency)]
            row.at_aic_best, _ = run_shardplan(shardplan, [*plan_options(request), *given], timeout_s)
        except (RuntimeError, OSError, ValueError, KeyError) as error:
            print(f"[{request.label}] shardplan could not price AIC's best: {error}", file=sys.stderr)
    print(f"[{request.label}] done", file=sys.stderr, flush=True)
    return compare(row)


def select(patterns: str | None) -> list[Request]:
    """The requests whose label matches one of the comma-separated patterns (all when None)."""
    return select_labelled(REQUESTS, patterns)


def main(argv: list[str] | None = None) -> int:
    parser = comparison_parser(__doc__.split("\n\n")[0], "comma-separated labels or globs (default: every request)",
                               Path(__file__).parent / ".aic-venv")
    args, requests = parse_comparison(parser, argv, select)
    if not (args.aic_venv / "bin" / "aiconfigurator").exists():
        print(f"installing AIConfigurator {AIC_VERSION} into {args.aic_venv} (a few minutes)", file=sys.stderr)
    try:
        aic = ensure_aiconfigurator(args.aic_venv)
    except AicError as error:
        print(f"skipped: AIConfigurator is not available ({error})")
        return 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda request: run_request(request, aic, args.shardplan, args.timeout), requests))
    main_records = [cells(each) for row in rows for each in (row, row.in_space) if each is not None]
    tables = {
        "shardplan vs AIConfigurator 0.12 (vLLM), tokens/s per GPU of the budget": main_records,
        "shardplan's own figures for its pick vs AIConfigurator's estimate": [
            disagreement_cells(each) for row in rows for each in (row, row.in_space) if each is not None
        ],
        "AIConfigurator's best deployment priced by both tools": [at_aic_best_cells(row) for row in rows],
    }
    print_tables(tables, args.markdown)
    print(summary(rows))
    print("† the pick is outside AIConfigurator's default search space (reasons in the notes)")
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
