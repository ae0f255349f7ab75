"""A plan as a person reads it in the terminal: the request, the deployment, the strategy, the figures, the verdict,
the runners-up and the explanation; the fit hints of a request that does not fit."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from shardplan.cli.app import console
from shardplan.cli.percentiles import latency_table
from shardplan.cli.rankings import print_alternatives, print_frontier
from shardplan.contracts.economics import economics_lines
from shardplan.contracts.figures import headline
from shardplan.contracts.plan import FitHint, Plan, PlanRequest
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.targets import miss_texts
from shardplan.contracts.traffic import arrival_text, length_text
from shardplan.contracts.workload import Workload
from shardplan.text import counted
from shardplan.tools.planning.feature_words import effect_lines, feature_words

__all__ = ["print_plan", "print_deployment", "print_simulated", "print_fit_hints", "hint_options"]


def _traffic_words(w: Workload) -> str:
    """Where the lengths come from and how requests arrive, when the workload says: ``trace 'azure-conv', poisson
    arrivals, ``."""
    t = w.traffic
    if t is None:
        return ""
    parts = [f"trace '{t.trace}'"] if t.trace else []
    parts += [f"{name} {length_text(dist)}" for name, dist in (("isl", t.isl), ("osl", t.osl)) if dist is not None]
    return ", ".join([*parts, f"{arrival_text(t.arrival)} arrivals"]) + ", "


def _request_line(plan: Plan) -> str:
    req = plan.request
    w = req.workload
    stat = "" if w.slo_percentile == "mean" else f"{w.slo_percentile.upper()} "
    return (
        f"[bold]shardplan[/bold] {req.model} on up to {req.gpu_words} - isl {w.isl}, osl {w.osl}, "
        + _traffic_words(w)
        + (f"{counted(w.batch, 'sequence')} in flight" if w.batch else "concurrency chosen by the search")
        + (f", {w.rate:g} requests/s" if w.rate else "")
        + f", {w.batching} batching"
        + (f" (prefill {w.prefill_batch} at a time)" if w.prefill_batch else "")
        + f", objective {w.objective}"
        + (f", {stat}TTFT <= {w.ttft_ms:g} ms" if w.ttft_ms else "")
        + (f", {stat}TPOT <= {w.tpot_ms:g} ms" if w.tpot_ms else "")
        + feature_words(w)
    )


def print_deployment(plan: Plan) -> None:
    """The deployment: replicas x layout (or each pool), concurrency, GPUs used of the budget, memory per pool."""
    d = plan.deployment
    if d is None:
        return
    out = console()
    rate = plan.figures.requests_per_s if plan.figures is not None else 0.0
    kind = f"disaggregated {d.prefill_workers}P{d.decode_workers}D" if d.prefill_workers else "aggregated"
    out.print(
        f"[bold]deployment[/bold]: {kind}, {counted(d.concurrency, 'sequence')} in flight, {rate:.2f} requests/s, "
        f"{d.gpus_used} of {counted(d.gpu_budget, 'GPU')} used"
        + (f", {d.idle_gpus} idle ({d.idle_reason})" if d.idle_gpus else "")
    )
    table = Table("pool", "workers x layout", "GPUs", "seqs/worker", "max seqs", "GB/GPU", "weights", "KV")
    for pool in d.pools:
        table.add_row(
            pool.role + (f" ({pool.gpu})" if pool.gpu else ""),
            f"{pool.workers} x {pool.layout}",
            str(pool.workers * pool.gpus_per_worker),
            str(pool.concurrency_per_worker),
            str(pool.max_concurrency_per_worker),
            f"{pool.memory_per_gpu_gb:.1f} of {pool.capacity_gb:g}",
            f"{pool.weights_gb:.1f}",
            f"{pool.kv_cache_gb:.1f}",
        )
    out.print(table)
    # Load past what the KV cache holds is queued, not refused: say where the running set stops.
    for message in plan.messages:
        if "queues the rest" in message:
            out.print(f"[yellow]note[/yellow]: {message}")


def hint_options(hint: FitHint, request: PlanRequest) -> str:
    """The command-line options that apply a fit hint to ``request``."""
    if hint.change == "gpus":
        return f"--gpus {hint.value}" if request.cluster is None else f"a cluster file of {counted(hint.value, 'GPU')}"
    if hint.change == "context":
        batch = " --batch 1" if request.workload.batch else ""
        return f"--isl {int(hint.value) - request.workload.osl}{batch}"
    return f"--{hint.change.replace('_', '-')} {hint.value}"


def print_fit_hints(hints: list[FitHint], request: PlanRequest) -> None:
    """What would make an infeasible request fit, one change a line with the options that make it."""
    if not hints:
        return
    out = console()
    out.print("it would fit with any one of:")
    for hint in hints:
        out.print(f"  [bold]{hint_options(hint, request)}[/bold]: {hint.text}")


def print_simulated(run: SimulationSummary) -> None:
    """What a simulated plan's figures rest on: the run, its percentiles beside the steady state, its goodput."""
    out = console()
    out.print(f"simulated ({run.workload}, seed {run.seed}): the figures above are the run's means; memory and "
              "the frontier are the steady state's")
    out.print(latency_table(run, "steady state"))
    kept = {True: ", its queue settled", False: ", its queue did not settle", None: ""}[run.settled]
    out.print(f"goodput {run.goodput:.1%} of requests within both targets{kept}; "
              f"{counted(run.preemptions, 'preemption', spec=',')}, "
              f"running batch {run.mean_running_batch:.1f} on average, KV cache {run.kv_cache_peak:.0%} at peak",
              markup=False)


def print_plan(plan: Plan) -> None:
    """The plan as a person reads it: deployment, strategy per phase, figures, validation, runners-up, explanation."""
    out = console()
    out.print(_request_line(plan))
    req = plan.request
    if req.constraints is not None:
        out.print("constraints: " + ", ".join(req.constraints.to_texts()))
    for line in plan.assumptions:
        out.print(f"[dim]assumed: {line}[/dim]")
    if plan.strategy is None or plan.figures is None:  # nothing found, or a given strategy that is not priced
        out.print(f"[bold red]infeasible[/bold red]: {escape(plan.explanation)}")
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
    c, v, f = plan.dag_cost, plan.validation, plan.figures
    assert c is not None and v is not None and f is not None
    mem = max(c.memory, key=lambda m: m.total_gb / m.capacity_gb)  # the fullest pool, each against its own GPU
    out.print(f"{headline(f)} (weights {mem.weights_gb:.1f}, KV {mem.kv_cache_gb:.1f})")
    for line in effect_lines(plan):
        out.print(line, markup=False)
    if plan.simulation is not None:
        print_simulated(plan.simulation)
    for line in economics_lines(plan.economics) if plan.economics is not None else []:
        out.print(line)
    errors = [x for x in v.violations if x.severity == "error"]
    verdict = "[green]valid[/green]" if v.valid else f"[red]{counted(len(errors), 'violation')}[/red]"
    out.print(
        f"validation: {verdict} ({counted(len(v.rules_checked), 'rule')}, {counted(v.nodes, 'node')}, "
        f"{counted(v.edges, 'edge')}) | "
        f"decode: {c.decode.collectives} collectives/step, {c.decode.inter_node_collectives} across nodes | "
        f"status: {plan.status}"
    )
    for note in c.notes:
        if note.startswith(("model error", "priced ")):
            out.print(f"[dim]{note}[/dim]")
    if plan.status == "targets_missed":
        shown = "the reviewed strategy" if any(m.startswith("reviewing") for m in plan.messages) else "best deployment"
        out.print(f"[red]infeasible for the targets[/red] ({shown} shown): " + "; ".join(miss_texts(plan.misses)))
    for item in errors[:5]:
        out.print(f"  [red]{item.rule}[/red] {item.message} -> {item.fix}")
    print_alternatives(plan)
    print_frontier(plan)
    out.print(plan.explanation)
