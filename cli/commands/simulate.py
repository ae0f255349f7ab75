"""``shardplan simulate``: replay a stream of requests through a plan's deployment, step by step, as the engine
schedules them, and set the measured latencies beside the plan's steady state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from shardplan.cli.app import app, console, emit_json
from shardplan.cli.files import read_plan
from shardplan.cli.percentiles import latency_table
from shardplan.cli.progress import working
from shardplan.contracts.plan import Plan, PricedDeployment
from shardplan.contracts.simulation import ROUTERS, Router, SimulationSummary
from shardplan.contracts.traffic import ClosedLoop, Poisson, TraceArrivals, Traffic, parse_arrival, parse_length
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.io import writable_folder, write_atomic
from shardplan.limits import check_rate
from shardplan.text import counted
from shardplan.tools.planning.planner import resolve_request
from shardplan.tools.simulation.run import SimulationOptions, replayed_traffic, simulate
from shardplan.tools.simulation.trace import trace_events

__all__ = ["simulate_command", "simulated_workload"]


def simulated_workload(
    plan: Plan,
    deployment: PricedDeployment,
    *,
    rate: float | None = None,
    arrival: str | None = None,
    isl_dist: str | None = None,
    osl_dist: str | None = None,
    trace: str | None = None,
) -> tuple[Workload, float | None, str | None]:
    """The plan's workload with the traffic the options describe, the arrival rate to replay it at, and a note
    when the arrivals were chosen for the user.

    Unset options keep the plan's own traffic. The rate is ``rate``, else the plan's requested rate; open
    arrivals with neither become a closed loop of the plan's sequences in flight
    (:func:`~shardplan.tools.simulation.run.replayed_traffic`); a closed loop and a trace's timestamps need none.

    Raises:
        InputError: a malformed distribution or arrival process, a rate out of range
            (:func:`~shardplan.limits.check_rate`).
    """
    if rate is not None:
        check_rate("rate", rate)
    workload = plan.request.workload
    traffic = workload.traffic or Traffic()
    update: dict[str, object] = {}
    if isl_dist is not None:
        update["isl"] = parse_length(isl_dist, "isl_dist")
    if osl_dist is not None:
        update["osl"] = parse_length(osl_dist, "osl_dist")
    if trace is not None:
        update["trace"] = trace
    if arrival is not None:
        update["arrival"] = parse_arrival(arrival)
    elif trace is not None and rate is None and workload.rate is None:
        update["arrival"] = TraceArrivals(kind="trace")
    elif rate is not None and isinstance(traffic.arrival, ClosedLoop):
        update["arrival"] = Poisson(kind="poisson")  # a rate asks for open arrivals
    try:
        traffic = Traffic.model_validate({**dict(traffic), **update})
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise InputError(reason, field="arrival", fix="add --workload TRACE") from None
    return replayed_traffic(workload.model_copy(update={"traffic": traffic}), deployment, rate)


@app.command("simulate")
def simulate_command(
    plan_file: Annotated[Path, typer.Argument(help="A plan JSON file (shardplan plan -o plan.json).")],
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Arrivals per second [default: the plan's rate; a plan without one is replayed "
                     "as a closed loop of its sequences in flight]."),
    ] = None,
    arrival: Annotated[
        str | None,
        typer.Option("--arrival", help="poisson, gamma:cv=C (bursts), closed:N (N clients, each sending its next "
                     "request when its last completes) or trace [default: the plan's, else poisson]."),
    ] = None,
    isl_dist: Annotated[
        str | None,
        typer.Option("--isl-dist", help="Prompt lengths: fixed:N, lognormal:mean=M,cv=C[,low=L,high=H] or "
                     "uniform:LOW,HIGH [default: the plan's isl, fixed]."),
    ] = None,
    osl_dist: Annotated[
        str | None, typer.Option("--osl-dist", help="Output lengths, as --isl-dist [default: the plan's osl, fixed].")
    ] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", help="A request trace to replay (a JSONL or CSV file, or a bundled "
                                 "trace's name).")
    ] = None,
    requests: Annotated[int, typer.Option("--requests", min=1, max=1_000_000, help="Requests to replay.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the request stream.")] = 0,
    router: Annotated[
        str | None, typer.Option("--router", help="round-robin, least-outstanding or cache-affinity, across replicas "
                                 "[default: cache-affinity when requests share prefixes, else round-robin].")
    ] = None,
    max_num_seqs: Annotated[
        int | None,
        typer.Option("--max-num-seqs", min=1, max=1_000_000, help="Running sequences per replica (or decode "
                     "worker) [default: the plan's sequences in flight per replica, as shardplan export sets]."),
    ] = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Also write the engine steps as a Chrome/Perfetto trace.")
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the summary JSON here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON instead of tables.")] = False,
) -> None:
    """Simulate a plan's deployment request by request: latency percentiles, goodput, queueing, preemptions."""
    route = router.replace("-", "_") if router is not None else None
    if route is not None and route not in ROUTERS:
        raise InputError(f"--router {router!r} is not known", field="router",
                         fix="choose round-robin, least-outstanding or cache-affinity")
    for destination in (output, trace):  # before the run, so it neither ends in an error nor leaves one file of two
        if destination is not None:
            writable_folder(destination)
    plan = read_plan(plan_file)
    deployment = plan.priced()
    if deployment is None:
        raise InputError(f"{plan_file} is an infeasible plan: no deployment to simulate", field="file",
                         fix="simulate a plan with a strategy (status ok or targets_missed)")
    sized, arrival_rate, chosen = simulated_workload(plan, deployment, rate=rate, arrival=arrival, isl_dist=isl_dist,
                                                     osl_dist=osl_dist, trace=workload)
    model, cluster = resolve_request(plan.request)
    options = SimulationOptions(router=_router(route), max_num_seqs=max_num_seqs, record_steps=trace is not None)
    with working(f"simulating {deployment.spec}", total=requests, quiet=as_json) as step:
        step.status("pricing the steps")
        run = simulate(model, cluster, deployment, sized, requests=requests, rate=arrival_rate, seed=seed,
                       options=options,
                       progress=lambda done: step.status(f"{counted(done, 'request', spec=',')} done", completed=done))
    summary = run.summary
    if chosen is not None:
        summary = summary.model_copy(update={"notes": [chosen, *summary.notes]})
    if output is not None:
        write_atomic(output, summary.model_dump_json(indent=1))
    if trace is not None:
        write_atomic(trace, json.dumps(trace_events(run.workers), separators=(",", ":")))
    if as_json:
        emit_json(summary)
        return
    print_simulation(summary, plan)
    if output is not None:
        console().print(f"summary written to {output}", markup=False)
    if trace is not None:
        console().print(f"trace written to {trace} (open it in ui.perfetto.dev)", markup=False)


def _router(name: str | None) -> Router | None:
    return next((known for known in ROUTERS if known == name), None)


def print_simulation(summary: SimulationSummary, plan: Plan) -> None:
    """The summary as printed: latency percentiles beside the plan's steady state, then throughput, goodput and
    what the engine did."""
    out = console()
    f = summary.figures
    out.print(f"simulated {summary.deployment} for {plan.request.model}: {summary.workload} (seed {summary.seed})",
              markup=False)
    out.print(latency_table(summary, "plan (steady state)"))
    planned = f" (plan: {summary.analytic.requests_per_s:.2f})" if summary.analytic else ""
    out.print(f"throughput {f.requests_per_s:.2f} requests/s{planned}, {f.tokens_per_s:,.0f} output tok/s over "
              f"{summary.duration_s:,.1f} s simulated", markup=False)
    bounds = [f"TTFT <= {t:g} ms" for t in [summary.targets.ttft_ms] if t] + [
        f"TPOT <= {t:g} ms" for t in [summary.targets.tpot_ms] if t]
    within = " and ".join(bounds) if bounds else "no latency targets"
    out.print(f"goodput {summary.goodput:.1%} of requests within {within} ({summary.goodput_requests_per_s:.2f} "
              "requests/s)", markup=False)
    out.print(f"engine: {counted(summary.steps, 'step', spec=',')}, running batch {summary.mean_running_batch:.1f} on "
              f"average (at most "
              f"{summary.max_num_seqs}), KV cache {summary.kv_cache_use:.0%} in use on average, "
              f"{summary.kv_cache_peak:.0%} at peak, {counted(summary.preemptions, 'preemption', spec=',')}",
              markup=False)
    hit = getattr(summary, "prefix_hit", None)  # the simulated LRU block cache's, where the simulator measures it
    if hit is not None:
        assumed = plan.request.workload.prefix_hit
        out.print(f"prefix cache: {hit:.1%} of prompt tokens found in the simulated cache (the plan assumed "
                  f"{assumed:.0%})", markup=False)
    for miss in summary.misses:
        out.print(f"misses {miss.message}", markup=False)
    for note in summary.notes:
        out.print(f"note: {note}", markup=False)
