"""The main job and its parts: ``plan``, ``cost``, ``search``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.cli.app import app, console, emit_json, fail
from shardplan.cli.common import JsonFlag, request_options
from shardplan.cli.progress import working
from shardplan.cli.rankings import print_alternatives, print_frontier, print_search
from shardplan.tools.views.phase_columns import PHASE_COLUMNS, column_label, phase_columns_help

_COST_HELP = (
    "Cost report of a DAG/plan FILE, or of --model and --strategy.\n\nThe schedule table's columns, per phase:\n\n"
    + phase_columns_help()
)


def _request_line(plan: Any) -> str:
    req = plan.request
    w = req.workload
    return (
        f"[bold]shardplan[/bold] {req.model} on up to {req.gpus} x {req.gpu} - isl {w.isl}, osl {w.osl}, "
        + (f"{w.batch} sequences in flight" if w.batch else "concurrency chosen by the search")
        + (f", {w.rate:g} requests/s" if w.rate else "")
        + f", {w.batching} batching"
        + (f" (prefill {w.prefill_batch} at a time)" if w.prefill_batch else "")
        + f", objective {w.objective}"
        + (f", TTFT <= {w.ttft_ms:g} ms" if w.ttft_ms else "")
        + (f", TPOT <= {w.tpot_ms:g} ms" if w.tpot_ms else "")
    )


def print_deployment(plan: Any) -> None:
    """The deployment: replicas x layout (or each pool), concurrency, GPUs used of the budget, memory per pool."""
    from rich.table import Table

    d = plan.deployment
    if d is None:
        return
    out = console()
    kind = f"disaggregated {d.prefill_workers}P{d.decode_workers}D" if d.prefill_workers else "aggregated"
    out.print(
        f"[bold]deployment[/bold]: {kind}, {d.concurrency} sequences in flight, {d.requests_per_s:.2f} requests/s, "
        f"{d.gpus_used} of {d.gpu_budget} GPUs used"
        + (f", {d.idle_gpus} idle ({d.idle_reason})" if d.idle_gpus else "")
    )
    table = Table("pool", "workers x layout", "GPUs", "seqs/worker", "max seqs", "GB/GPU", "weights", "KV")
    for pool in d.pools:
        table.add_row(
            pool.role,
            f"{pool.workers} x {pool.layout}",
            str(pool.workers * pool.gpus_per_worker),
            str(pool.concurrency_per_worker),
            str(pool.max_concurrency_per_worker),
            f"{pool.memory_per_gpu_gb:.1f} of {pool.capacity_gb:g}",
            f"{pool.weights_gb:.1f}",
            f"{pool.kv_cache_gb:.1f}",
        )
    out.print(table)


def hint_options(hint: Any, request: Any) -> str:
    """The command-line options that apply a fit hint to ``request``."""
    if hint.change == "gpus":
        return f"--gpus {hint.value}" if request.cluster is None else f"a cluster file of {hint.value} GPUs"
    if hint.change == "context":
        batch = " --batch 1" if request.workload.batch else ""
        return f"--isl {int(hint.value) - request.workload.osl}{batch}"
    return f"--{hint.change.replace('_', '-')} {hint.value}"


def print_fit_hints(hints: list[Any], request: Any) -> None:
    """What would make an infeasible request fit, one change a line with the options that make it."""
    if not hints:
        return
    out = console()
    out.print("it would fit with any one of:")
    for hint in hints:
        out.print(f"  [bold]{hint_options(hint, request)}[/bold]: {hint.text}")


def print_plan(plan: Any) -> None:
    """The plan as a person reads it: deployment, strategy per phase, figures, validation, runners-up, explanation."""
    from rich.table import Table

    out = console()
    out.print(_request_line(plan))
    req = plan.request
    if req.constraints is not None:
        out.print("constraints: " + ", ".join(req.constraints.to_texts()))
    for line in plan.assumptions:
        out.print(f"[dim]assumed: {line}[/dim]")
    if plan.strategy is None:
        out.print(f"[bold red]infeasible[/bold red]: {plan.explanation}")
        print_fit_hints(plan.hints, plan.request)
        if plan.min_gpus and not any(hint.change == "gpus" for hint in plan.hints):
            out.print(f"minimum GPUs that fit: {plan.min_gpus}")
        return
    print_deployment(plan)
    table = Table("phase", "strategy", "GPUs", title="strategy (dp: replicas or pool workers)")
    s = plan.strategy
    table.add_row("prefill", s.prefill.to_spec(), str(s.prefill.gpus))
    table.add_row("decode", s.decode.to_spec(), str(s.decode.gpus))
    out.print(table)
    c, v = plan.cost, plan.validation
    mem = max(c.memory, key=lambda m: m.total_gb)
    out.print(
        f"TTFT {c.ttft_ms:.1f} ms | TPOT {c.tpot_ms:.2f} ms | {c.tokens_per_s:,.0f} tok/s "
        f"({c.tokens_per_s_per_gpu:.1f}/GPU, {c.tokens_per_s_per_user:.1f}/user) | memory {mem.total_gb:.1f} of "
        f"{mem.capacity_gb:g} GB per GPU (weights {mem.weights_gb:.1f}, KV {mem.kv_cache_gb:.1f})"
    )
    errors = [x for x in v.violations if x.severity == "error"]
    verdict = "[green]valid[/green]" if v.valid else f"[red]{len(errors)} violations[/red]"
    out.print(
        f"validation: {verdict} ({len(v.rules_checked)} rules, {v.nodes} nodes, {v.edges} edges) | "
        f"decode: {c.decode.collectives} collectives/step, {c.decode.inter_node_collectives} across nodes | "
        f"status: {plan.status}"
    )
    for note in c.notes:
        if note.startswith(("model error", "priced ")):
            out.print(f"[dim]{note}[/dim]")
    if plan.status == "targets_missed":
        shown = "the reviewed strategy" if any(m.startswith("reviewing") for m in plan.messages) else "best deployment"
        out.print(f"[red]infeasible for the targets[/red] ({shown} shown): " + "; ".join(c.target_misses))
    for item in errors[:5]:
        out.print(f"  [red]{item.rule}[/red] {item.message} -> {item.fix}")
    print_alternatives(plan)
    print_frontier(plan)
    out.print(plan.explanation)


@app.command("plan")
@request_options
def plan_command(
    request: Any,
    policy: Annotated[
        str, typer.Option("--policy", help="builtin, or openai:MODEL for an OpenAI-compatible endpoint.")
    ] = "builtin",
    strategy: Annotated[
        str | None,
        typer.Option("--strategy", "-s", help="Review this SPEC instead of searching: its plan, and what beats it."),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the plan JSON here.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Plan a deployment: search, build the DAG, validate it, price it, explain the choice."""
    from shardplan.agent.run import progress_line, run_plan
    from shardplan.io import write_atomic

    with working("planning", quiet=as_json) as step:
        if strategy is not None:
            from shardplan.tools.contracts.strategy import parse_strategy
            from shardplan.tools.planning.planner import review

            step.status(f"reviewing {strategy} against the searched deployments")
            plan = review(request, parse_strategy(strategy))
        else:
            plan = run_plan(request, progress=not as_json, show=lambda line: step.line(progress_line(line)))
    if output is not None:
        write_atomic(output, plan.model_dump_json(indent=1))
    if as_json:
        emit_json(_plan_summary(plan) if output is not None else plan)
        return
    print_plan(plan)
    if output is not None:
        console().print(f"plan written to {output}")


def _plan_summary(plan: Any) -> dict[str, Any]:
    data = plan.model_dump(mode="json", exclude={"dag"})
    return data


@app.command("cost", help=_COST_HELP)
@request_options(optional=True)
def cost_command(
    request: Any,
    file: Annotated[Path | None, typer.Argument(help="A DAG or plan JSON file to price.")] = None,
    strategy: Annotated[str | None, typer.Option("--strategy", "-s", help="SPEC, e.g. tp=4,pp=2.")] = None,
    as_json: JsonFlag = False,
) -> None:
    from shardplan.cli.files import read_dag, require_valid
    from shardplan.tools.contracts.strategy import parse_strategy
    from shardplan.tools.cost.estimate import estimate_cost
    from shardplan.tools.planning.evaluation import price_on_budget
    from shardplan.tools.planning.planner import resolve_request

    with working("pricing", quiet=as_json) as step:
        if file is not None:
            step.status(f"reading {file}")
            dag = require_valid(read_dag(file), file)
            step.status("scheduling")
            report = estimate_cost(dag)
        else:
            if request is None or strategy is None:
                fail("give a DAG/plan FILE, or --model and --strategy")
            spec, cl = resolve_request(request)
            step.status(f"building and scheduling {strategy}")
            report = price_on_budget(spec, cl, parse_strategy(strategy), request.workload.with_batch())
    if as_json:
        emit_json(report)
        return
    print_cost(report)


def print_cost(report: Any) -> None:
    """A cost report as tables: headline figures, per-phase schedule, memory, critical path summary."""
    from collections import Counter

    from rich.table import Table

    out = console()
    out.print(
        f"TTFT {report.ttft_ms:.1f} ms | TPOT {report.tpot_ms:.2f} ms | {report.tokens_per_s:,.0f} tok/s "
        f"({report.tokens_per_s_per_gpu:.1f}/GPU, {report.tokens_per_s_per_user:.1f}/user) | fits: {report.fits}"
    )
    phases = Table("phase", *(column_label(c) for c in PHASE_COLUMNS), title="schedule (columns: see --help)")
    for name in ("prefill", "decode"):
        p = getattr(report, name)
        phases.add_row(name, *(c.show(getattr(p, c.field)) for c in PHASE_COLUMNS))
    out.print(phases)
    mem = Table(
        "pool",
        "weights",
        "KV",
        "activations",
        "workspace",
        "total",
        "capacity",
        "max batch",
        title="memory per GPU (GB)",
    )
    for m in report.memory:
        mem.add_row(
            m.pool,
            f"{m.weights_gb:.1f}",
            f"{m.kv_cache_gb:.1f}",
            f"{m.activations_gb:.1f}",
            f"{m.workspace_gb:.1f}",
            f"{m.total_gb:.1f}",
            f"{m.capacity_gb:g}",
            str(m.max_batch),
        )
    out.print(mem)
    for name in ("prefill", "decode"):
        by_kind: Counter[str] = Counter()
        for step in getattr(report, name).critical_path:
            by_kind[step.kind] += step.ms
        top = ", ".join(f"{k} {v:.2f} ms" for k, v in by_kind.most_common(5))
        out.print(f"{name} critical path: {top}")
    for miss in report.target_misses:
        out.print(f"[red]misses[/red] {miss}")
    for note in report.notes:
        out.print(f"[dim]note: {note}[/dim]")


@app.command("search")
@request_options
def search_command(
    request: Any,
    top: Annotated[int, typer.Option("--top", help="How many strategies to list.")] = 10,
    as_json: JsonFlag = False,
) -> None:
    """Ranked deployments and the Pareto frontier of tokens/s/GPU against tokens/s/user."""
    from shardplan.errors import InfeasibleError
    from shardplan.tools.planning.planner import resolve_request
    from shardplan.tools.search.deployments import search

    spec, cl = resolve_request(request)
    try:
        with working(f"searching deployments of {spec.name} on {cl.world_size} x {cl.gpu.name}", quiet=as_json):
            result = search(spec, cl, request.workload, top=top, constraints=request.constraints)
    except InfeasibleError as exc:
        if as_json:
            emit_json({"infeasible": str(exc), "min_gpus": exc.min_gpus,
                       "hints": [hint.model_dump(mode="json") for hint in exc.hints]})
        else:
            console().print(f"[red]infeasible[/red]: {exc}")
            print_fit_hints(exc.hints, request)
        return
    if as_json:
        emit_json(result)
        return
    from shardplan.tools.cost.pricing import pricing_backend

    print_search(result, pricing_backend(cl, request.workload.engine))
