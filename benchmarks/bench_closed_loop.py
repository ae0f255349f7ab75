"""The engine simulator against measured public closed-loop rows: N clients, each sending its next request when
its last one completes, at a stated concurrency.

Run: .venv/bin/python benchmarks/bench_closed_loop.py [--match TEXT] [--json FILE] [--send-delay S] [--cold-cache]
Target (issue 23): TTFT and TPOT median absolute error 15% or less across concurrency, including the rows past
the KV cache.

Rows: every sweep of ``calibration/closed_loop.yaml`` (NVIDIA NIM's published concurrency sweeps of
Llama-3.3-70B FP8 on 2 x H100 and Llama-3.1-8B FP8 on 1 x H100, five input/output lengths each, concurrency 1 to
250; the SGLang cookbook's sweeps of Llama-3.1-70B on 8 x A100, Qwen3-235B-A22B and DeepSeek-R1-0528 on 8 x B200;
dstack's DeepSeek-R1 sweeps on 8 x H200 and 8 x MI300X under early-2025 vLLM and SGLang), and every row of
``calibration/end_to_end.yaml`` measured by a serving benchmark at a stated concurrency (InferenceX, reference runs
at concurrency 1) that the YAML does not already hold. Both files are held out:
nothing is fitted to them. Each row is planned as ``shardplan plan -m M --gpu G --gpus N -s SPEC --batch N
--weight-dtype W --kv-dtype K --engine E`` plans it (:func:`~shardplan.tools.planning.deployment.best_option`),
then simulated as ``shardplan simulate plan.json --arrival closed:N`` runs it, with ``max(10 N, 400)`` requests.

What is compared: the mean TTFT and TPOT of the steady state. The first N requests (the clients' first ones, all
sent at once: a cold start) and the last N (sent while the loop winds down, fewer clients left) are left out:
NIM's genai-perf measures windows once they are stable, so neither weighs in its means.

Sweeps measured by SGLang's ``bench_serving`` (``client: bench_serving`` in the YAML: the SGLang cookbook's and
dstack's) are replayed as that client runs them instead: its own requests (the lengths it draws, reproduced
from its seed and ``--random-range-ratio`` and checked against the token totals it printed), as many as it sent,
its ``--max-concurrency`` clients starting together, and every request counted, the cold start and the wind-down
included, as its means and its throughput (all output tokens over the whole run) count them. The cookbook's runs
share a server that keeps SGLang's radix cache, so each finds the prompts earlier runs sent
(``prefix_cache_kept`` in the YAML; :func:`closed_loop_rows.served_in_order`).

Beside each simulated figure stands the analytic steady state of the same plan (the plan's own TTFT and TPOT). A
row is *past the KV cache* when its concurrency exceeds the sequences the simulated KV cache holds at the row's
(mean) lengths: the engine then runs what fits and queues the rest.

Each sweep's error is also taken apart (:func:`closed_loop_figures.base_and_growth`): at its lowest concurrency
(the step prices) and of the growth from there (queueing, how the clients meet).

What the comparison found, what was changed for it and what is left: ``docs/closed_loop.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from closed_loop_figures import (
    METRICS,
    PERCENTILES,
    Row,
    base_and_growth,
    growth_medians,
    median_abs,
    request_percentiles,
    summarise,
)
from closed_loop_rows import Point, table_points, yaml_points

from shardplan.contracts.arithmetic.feasibility import needed_sequences_text, sequences_needed
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.traffic import ClosedLoop, Traffic
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.planning.deployment import best_option
from shardplan.tools.simulation.results import latencies
from shardplan.tools.simulation.run import Simulation, SimulationOptions, simulate
from shardplan.tools.simulation.state import Requests

TARGET_PCT = 15.0
DEFAULTS = SimulationOptions()


def simulate_point(point: Point, options: SimulationOptions = DEFAULTS,
                   budget: int | None = None) -> tuple[PricedDeployment, Simulation]:
    """Plan the point's deployment at its concurrency and simulate its closed loop: the plan and the run. A point
    with the client's own requests is planned at their mean lengths and replays exactly those. ``budget``: the
    engine's tokens a step, where not its default (an experiment: the sources state no engine's).

    Raises:
        ValueError: no deployment of the layout fits the GPUs.
    """
    d = point.deployment
    model = load_model(d.model, weight_dtype=d.weight_dtype, kv_dtype=d.kv_dtype)  # type: ignore[arg-type]
    cluster = make_cluster(d.gpu, d.gpus)
    budget = budget or d.max_batched_tokens
    if d.scheduler == "vllm-v0-unchunked":
        options = replace(options, vllm_v0_unchunked=True)
    isl, osl = _mean_lengths(point)
    workload = Workload(isl=isl, osl=osl, batch=point.clients, engine=d.engine,  # type: ignore[arg-type]
                        **({"max_batched_tokens": budget} if budget else {}))
    strategy = parse_strategy(d.strategy)
    needed = sequences_needed(strategy)
    if point.clients < needed:
        raise ValueError(f"{d.strategy} with {point.clients} clients: shardplan prices {needed_sequences_text(needed)}")
    option = best_option(model, cluster, strategy, workload)
    if option is None or not option.figures.fits:
        raise ValueError(f"{d.strategy} of {d.model} does not fit {d.gpus} x {d.gpu}")
    clients = point.clients
    loop = ClosedLoop(kind="closed", clients=clients)
    if point.requests is None:
        looped = workload.model_copy(update={"traffic": Traffic(arrival=loop)})
        return option, simulate(model, cluster, option, looped, requests=max(10 * clients, 400), options=options)
    prompts, outputs = point.requests
    columns = {"input_lens": prompts.tolist(), "output_lens": outputs.tolist()}
    if point.warm_prefixes:
        # Each prompt its own prefix group, whole: what a warm server's prefix cache may hold of it.
        columns |= {"prefix_group": list(range(len(prompts))), "prefix_tokens": prompts.tolist()}
        options = replace(options, warm_prefixes=point.warm_prefixes)
    with tempfile.TemporaryDirectory() as folder:
        # The requests as a trace (vLLM's saved-results form), replayed row by row in the client's order.
        trace = Path(folder) / "requests.json"
        trace.write_text(json.dumps(columns))
        looped = workload.model_copy(update={"traffic": Traffic(trace=str(trace), arrival=loop)})
        return option, simulate(model, cluster, option, looped, requests=len(prompts), options=options)


def _mean_lengths(point: Point) -> tuple[int, int]:
    """The prompt and output lengths the point is planned at: its requests' means, else the deployment's."""
    if point.requests is None:
        return point.deployment.isl, point.deployment.osl
    return tuple(max(1, round(float(lengths.mean()))) for lengths in point.requests)  # type: ignore[return-value]


def steady(record: Requests, clients: int) -> np.ndarray:
    """The requests of a closed loop's steady state. Requests are sent in id order: the first ``clients`` start
    cold, the last ``clients`` run as the loop winds down; the steady state lies between."""
    return np.arange(clients, len(record) - clients)


def burst(record: Requests, kept: np.ndarray) -> float:
    """Mean, over the requests ``kept``, of how many of them were first scheduled in the same step as each."""
    _, counts = np.unique(record.scheduled[kept], return_counts=True)
    return float((counts * counts).sum() / counts.sum())


def run_point(point: Point, options: SimulationOptions = DEFAULTS, budget: int | None = None) -> Row:
    """Plan the point's deployment at its concurrency and simulate its closed loop; the steady state's figures.

    Raises:
        ValueError: no deployment of the layout fits the GPUs.
    """
    clients = point.clients
    option, run = simulate_point(point, options, budget)
    record = run.requests
    measured = latencies(record)
    pick = np.nanmedian if point.statistic == "median" else np.nanmean
    if point.requests is None:
        kept = steady(record, clients)
        sent = record.arrival[kept]  # each send after the first round marks a completion
        rate = (kept.size - 1) / float(sent.max() - sent.min()) if sent.max() > sent.min() else math.nan
        tokens = rate * float(record.osl[kept].mean())
    else:
        # bench_serving counts every request, and its throughput is all output tokens over the whole run.
        kept = np.arange(len(record))
        tokens = float(record.osl.sum()) / float(record.finish.max() - record.arrival.min())
    simulated = {"ttft_ms": float(pick(measured.ttft_ms[kept])), "tpot_ms": float(pick(measured.tpot_ms[kept])),
                 "tokens_per_s": tokens}
    if point.requests is not None:
        simulated.update(request_percentiles(measured.ttft_ms[kept], measured.tpot_ms[kept]))
    summary = run.summary
    isl, osl = _mean_lengths(point)
    kv_sequences = summary.kv_blocks * summary.block_tokens // (isl + osl)
    notes = [f"{summary.preemptions} preemptions"] if summary.preemptions else []
    if point.warm_prefixes:
        notes.append(f"{len(point.warm_prefixes)} earlier prompts cached at the start")
    if option.running_cap is not None:
        notes.append(f"plan runs {option.running_cap} and queues the rest")
    figures = option.figures
    return Row(
        id=point.id,
        clients=clients,
        osl=osl,
        past_kv=clients > kv_sequences,
        kv_sequences=kv_sequences,
        measured=point.measured,
        simulated=simulated,
        analytic={"ttft_ms": figures.ttft_ms, "tpot_ms": figures.tpot_ms, "tokens_per_s": figures.tokens_per_s},
        statistic=point.statistic,
        source=point.source,
        notes=notes,
        whole_run=point.requests is not None,
        requests=len(record),
        cold_ttft_ms=float(np.mean(measured.ttft_ms[:clients])),
        warm_ttft_ms=float(np.mean(measured.ttft_ms[clients:])) if len(record) > clients else math.nan,
        burst=burst(record, np.arange(clients, len(record))) if len(record) > clients else math.nan,
    )


def _median_text(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}% ({len(values)})" if values else "-"


def print_base_and_growth(rows: list[Row]) -> dict[str, float]:
    """Per source, the median |error| at each sweep's lowest concurrency and of the growth from there; returns the
    medians over all sources (:func:`~closed_loop_figures.growth_medians`)."""
    parts = {metric: base_and_growth(rows, metric) for metric in ("ttft_ms", "tpot_ms")}
    print("| source | TTFT base (sweeps) | TTFT growth (rows) | TPOT base (sweeps) | TPOT growth (rows) |")
    print("|---|---|---|---|---|")
    for source in dict.fromkeys(r.source for r in rows):
        cells = [_median_text(part.get(source, ([], []))[i]) for part in parts.values() for i in (0, 1)]
        if any(c != "-" for c in cells):
            print("| " + " | ".join([source, *cells]) + " |")
    cells = [_median_text([v for pair in part.values() for v in pair[i]]) for part in parts.values() for i in (0, 1)]
    print("| all | " + " | ".join(cells) + " |")
    return growth_medians(parts)


def _cell(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0f}%"


def print_table(rows: list[Row]) -> None:
    print("| row | N | past KV | TTFT measured | by Little | simulated | err | analytic | err | TPOT measured | "
          "simulated | err | analytic | err | tok/s measured | simulated | source |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [r.id + (" (median)" if r.statistic == "median" else ""), str(r.clients),
                 f"yes ({r.kv_sequences})" if r.past_kv else "no"]
        for metric in ("ttft_ms", "tpot_ms"):
            cells += [_cell(r.measured.get(metric))]
            if metric == "ttft_ms":
                cells += [_cell(r.little_ttft_ms())]
            cells += [_cell(r.simulated.get(metric)), _pct(r.error(metric)), _cell(r.analytic.get(metric)),
                      _pct(r.error(metric, "analytic"))]
        cells += [_cell(r.measured.get("tokens_per_s")), _cell(r.simulated.get("tokens_per_s")), r.source]
        print("| " + " | ".join(cells) + " |")


def print_sweeps(rows: list[Row], by: str = "sweep") -> None:
    """Median absolute errors per sweep (or per ``by``, another attribute of the rows), simulated (analytic)."""
    print(f"| {by} | rows | past KV | TTFT simulated (analytic) | TPOT simulated (analytic) | tokens/s simulated "
          "(analytic) |")
    print("|---|---|---|---|---|---|")
    for group in dict.fromkeys(getattr(r, by) for r in rows):
        chosen = [r for r in rows if getattr(r, by) == group]
        cells = [group, str(len(chosen)), str(sum(r.past_kv for r in chosen))]
        for metric in METRICS:
            sim, count = median_abs(chosen, metric)
            ana, _ = median_abs(chosen, metric, "analytic")
            cells.append(f"{sim:.0f}% ({ana:.0f}%)" if count else "-")
        print("| " + " | ".join(cells) + " |")


def print_whole_runs(rows: list[Row]) -> None:
    """The whole-run rows' simulated TTFT split at the cold start, and how far their clients keep apart."""
    print("| row | N | requests | TTFT measured | simulated | first N | the rest | burst of the rest |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.whole_run:
            cells = [r.id, str(r.clients), str(r.requests), _cell(r.measured.get("ttft_ms")),
                     _cell(r.simulated["ttft_ms"]), _cell(r.cold_ttft_ms), _cell(r.warm_ttft_ms), f"{r.burst:.1f}"]
            print("| " + " | ".join(cells) + " |")


_STATISTICS = (("ttft_ms", "TTFT mean"), ("ttft_p50_ms", "TTFT median"), ("ttft_p99_ms", "TTFT P99"),
               ("tpot_ms", "TPOT mean"), ("tpot_p50_ms", "TPOT median"), ("tpot_p99_ms", "TPOT P99"))


def print_percentiles(rows: list[Row]) -> dict[str, dict[str, float]]:
    """The whole runs whose source printed per-request medians and P99s: each beside the simulated one over the same
    requests, then the median |error| of each statistic per source and over them all; returns those medians."""
    chosen = [r for r in rows if all(name in r.measured for name in PERCENTILES)]
    if not chosen:
        return {}
    print("| row | N | TTFT median measured | simulated | err | TTFT P99 measured | simulated | err | TPOT median "
          "measured | simulated | err | TPOT P99 measured | simulated | err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in chosen:
        cells = [r.id, str(r.clients)]
        for name in PERCENTILES:
            cells += [_cell(r.measured[name]), _cell(r.simulated.get(name)), _pct(r.error(name))]
        print("| " + " | ".join(cells) + " |")
    print("\n| source | rows | " + " | ".join(label for _, label in _STATISTICS) + " |")
    print("|---|---|" + "---|" * len(_STATISTICS))
    found: dict[str, dict[str, float]] = {}
    for source in [*dict.fromkeys(r.source for r in chosen), "all"]:
        group = chosen if source == "all" else [r for r in chosen if r.source == source]
        found[source] = {f"{name}_median_abs_pct": median_abs(group, name)[0] for name, _ in _STATISTICS}
        cells = [f"{found[source][f'{name}_median_abs_pct']:.1f}%" for name, _ in _STATISTICS]
        print(f"| {source} | {len(group)} | " + " | ".join(cells) + " |")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--match", help="only the rows whose id contains TEXT")
    parser.add_argument("--json", type=Path, help="also write the rows and the summary to FILE")
    parser.add_argument("--send-delay", type=float, default=0.0, metavar="S",
                        help="mean seconds from a client's completion to its next request reaching the engine "
                             "(SimulationOptions.send_delay_s; default 0)")
    parser.add_argument("--max-batched-tokens", type=int, metavar="N",
                        help="an experiment: every engine's step carries at most N tokens (default: the budget "
                             "closed_loop.yaml states for the run, else 8,192); no source states NIM's")
    parser.add_argument("--trtllm-chunked-context", action="store_true",
                        help="an experiment: TensorRT-LLM rows chunk their prompts under the step budget "
                             "(enable_chunked_context; SimulationOptions.trtllm_chunked_context)")
    parser.add_argument("--cold-cache", action="store_true",
                        help="an experiment: every bench_serving run starts on an empty prefix cache, as if its "
                             "server had been restarted or flushed before it (default: the runs of a page share a "
                             "server and meet the prompts earlier runs left, closed_loop.yaml's prefix_cache_kept)")
    args = parser.parse_args(argv)
    if args.max_batched_tokens is not None and args.max_batched_tokens < 1:
        parser.error("--max-batched-tokens: give 1 or more tokens a step")
    options = SimulationOptions(send_delay_s=args.send_delay, trtllm_chunked_context=args.trtllm_chunked_context)
    points = yaml_points()
    if args.cold_cache:
        points = [replace(p, warm_prefixes=()) for p in points]
    covered = {(p.deployment.model, p.deployment.gpu, p.deployment.gpus, p.deployment.strategy, p.deployment.isl,
                p.deployment.osl, p.clients) for p in points}
    more, skipped = table_points(covered)
    points += more
    if args.match:
        points = [p for p in points if args.match in p.id]
    rows: list[Row] = []
    for point in points:
        try:
            rows.append(run_point(point, options, args.max_batched_tokens))
        except ValueError as exc:
            skipped.append((point.id, str(exc)))
    print(f"Closed-loop rows: measured vs simulated (steady state; bench_serving rows: every request; "
          f"{TARGET_PCT:g}% target) vs analytic, {len(rows)} rows.\n")
    print_table(rows)
    found = summarise(rows)
    print("\nMedian |error| per sweep:\n")
    print_sweeps(rows)
    print("\nMedian |error| per source:\n")
    print_sweeps(rows, "source")
    print("\nMedian |error| taken apart: at each sweep's lowest concurrency (base: the step prices) and of the "
          "growth from there (growth: queueing, how the clients meet)\n")
    found["base_and_growth_simulated"] = print_base_and_growth(rows)
    if any(r.whole_run for r in rows):
        print("\nWhole runs (bench_serving): simulated mean TTFT of the clients' first requests and of the rest; "
              "burst: requests of the rest entering the engine in the same step as each (N: lockstep, 1: spread)\n")
        print_whole_runs(rows)
        print("\nWhole runs (bench_serving) whose source printed per-request statistics: median and P99 over every "
              "request, as the client computes them, beside its mean\n")
        found["percentiles_simulated"] = print_percentiles(rows)  # type: ignore[assignment]
    print()
    for part, label in (("all", "all rows"), ("past_kv", "past the KV cache"), ("within_kv", "within the KV cache")):
        sim, ana = found[f"{part}_simulated"], found[f"{part}_analytic"]
        print(f"{label}: median |error| simulated TTFT {sim['ttft_ms_median_abs_pct']:.1f}% "
              f"({sim['ttft_ms_rows']} rows), TPOT {sim['tpot_ms_median_abs_pct']:.1f}% ({sim['tpot_ms_rows']}), "
              f"tokens/s {sim['tokens_per_s_median_abs_pct']:.1f}% ({sim['tokens_per_s_rows']}); analytic TTFT "
              f"{ana['ttft_ms_median_abs_pct']:.1f}%, TPOT {ana['tpot_ms_median_abs_pct']:.1f}%, tokens/s "
              f"{ana['tokens_per_s_median_abs_pct']:.1f}%")
    met = all(found[f"{part}_simulated"][f"{m}_median_abs_pct"] <= TARGET_PCT
              for part in ("all", "past_kv") for m in ("ttft_ms", "tpot_ms"))
    print(f"target (TTFT and TPOT within {TARGET_PCT:g}% median, all rows and past the KV cache): "
          f"{'met' if met else 'MISSED'}")
    if skipped:
        print(f"\nLeft out ({len(skipped)}):\n\n| row | reason |\n|---|---|")
        for name, reason in skipped:
            print(f"| {name} | {reason} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "summary": found,
                                         "skipped": skipped}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
