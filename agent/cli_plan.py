"""The main job and its parts: ``plan``, ``cost``, ``search``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .cli import app, console, emit_json, fail

ModelOpt = Annotated[
    str,
    typer.Option("--model", "-m", help="Bundled model (meta-llama/Llama-3.1-70B, llama-3.1-70b) or config.json path."),
]
GpuOpt = Annotated[str, typer.Option("--gpu", "-g", help="GPU catalog name: H100, H200, B200, A100, L40S, MI300X.")]
GpusOpt = Annotated[int | None, typer.Option("--gpus", "-n", help="GPUs available (default: the cluster file's).")]
PerNodeOpt = Annotated[int | None, typer.Option("--gpus-per-node", help="GPUs per node (default: the GPU's usual 8).")]
ClusterOpt = Annotated[Path | None, typer.Option("--cluster", help="Cluster YAML (GPU, nodes, link figures).")]
IslOpt = Annotated[int, typer.Option("--isl", help="Input (prompt) tokens.")]
OslOpt = Annotated[int, typer.Option("--osl", help="Output tokens.")]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", help="Concurrent sequences of the whole deployment.")]
TtftOpt = Annotated[float | None, typer.Option("--ttft-ms", help="Target time to first token, ms.")]
TpotOpt = Annotated[float | None, typer.Option("--tpot-ms", help="Target time per output token, ms.")]
ObjectiveOpt = Annotated[
    str, typer.Option("--objective", help="latency, throughput or goodput (throughput under targets).")
]
DtypeOpt = Annotated[str | None, typer.Option("--weight-dtype", help="Override weight format: bf16, fp8, fp4.")]
KvDtypeOpt = Annotated[str | None, typer.Option("--kv-dtype", help="Override KV-cache format: bf16, fp8.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def build_request(
    model: str,
    gpu: str,
    gpus: int | None,
    gpus_per_node: int | None,
    cluster: Path | None,
    isl: int,
    osl: int,
    batch: int,
    ttft_ms: float | None,
    tpot_ms: float | None,
    objective: str,
    weight_dtype: str | None,
    kv_dtype: str | None,
    policy: str = "builtin",
) -> Any:
    """A PlanRequest from command-line options; malformed values become one clear error (exit 2)."""
    from pydantic import ValidationError

    from ..tools.contracts import PlanRequest, Workload
    from ..tools.hardware import load_cluster

    if gpus is None:
        if cluster is None:
            fail("--gpus is missing: give the GPU count, e.g. --gpus 8, or a --cluster file")
        gpus = load_cluster(cluster).world_size
    try:
        workload = Workload(isl=isl, osl=osl, batch=batch, ttft_ms=ttft_ms, tpot_ms=tpot_ms, objective=objective)  # type: ignore[arg-type]
        return PlanRequest(
            model=model,
            gpu=gpu,
            gpus=gpus,
            gpus_per_node=gpus_per_node,
            cluster=str(cluster) if cluster else None,
            workload=workload,
            weight_dtype=weight_dtype,
            kv_dtype=kv_dtype,
            policy=policy,
        )  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        fail(f"--{where.split('.')[-1].replace('_', '-')}: {first['msg']}")


def print_plan(plan: Any) -> None:
    """The plan as a person reads it: strategy per phase, figures, validation, runners-up, explanation."""
    from rich.table import Table

    out = console()
    req = plan.request
    w = req.workload
    out.print(
        f"[bold]shardplan[/bold] {req.model} on {req.gpus} x {req.gpu} - isl {w.isl}, osl {w.osl}, "
        f"batch {w.batch}, objective {w.objective}"
        + (f", TTFT <= {w.ttft_ms:g} ms" if w.ttft_ms else "")
        + (f", TPOT <= {w.tpot_ms:g} ms" if w.tpot_ms else "")
    )
    if plan.strategy is None:
        out.print(f"[bold red]infeasible[/bold red]: {plan.explanation}")
        if plan.min_gpus:
            out.print(f"minimum GPUs that fit: {plan.min_gpus}")
        return
    table = Table("phase", "strategy", "GPUs", title="strategy")
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
    for item in errors[:5]:
        out.print(f"  [red]{item.rule}[/red] {item.message} -> {item.fix}")
    if plan.alternatives:
        alt = Table("runner-up", "TTFT ms", "TPOT ms", "tok/s/GPU", "why not", title="alternatives")
        for a in plan.alternatives:
            alt.add_row(a.strategy, f"{a.ttft_ms:.1f}", f"{a.tpot_ms:.2f}", f"{a.tokens_per_s_per_gpu:.1f}", a.why_not)
        out.print(alt)
    out.print(plan.explanation)


@app.command("plan")
def plan_command(
    model: ModelOpt,
    gpu: GpuOpt = "H100",
    gpus: GpusOpt = None,
    gpus_per_node: PerNodeOpt = None,
    cluster: ClusterOpt = None,
    isl: IslOpt = 2048,
    osl: OslOpt = 256,
    batch: BatchOpt = 1,
    ttft_ms: TtftOpt = None,
    tpot_ms: TpotOpt = None,
    objective: ObjectiveOpt = "latency",
    weight_dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    policy: Annotated[
        str, typer.Option("--policy", help="builtin, or openai:MODEL for an OpenAI-compatible endpoint.")
    ] = "builtin",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the plan JSON here.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Plan a deployment: search, build the DAG, validate it, price it, explain the choice."""
    from ..io import write_atomic
    from .run import run_plan

    request = build_request(
        model,
        gpu,
        gpus,
        gpus_per_node,
        cluster,
        isl,
        osl,
        batch,
        ttft_ms,
        tpot_ms,
        objective,
        weight_dtype,
        kv_dtype,
        policy,
    )
    plan = run_plan(request, progress=not as_json)
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


@app.command("cost")
def cost_command(
    file: Annotated[Path | None, typer.Argument(help="A DAG or plan JSON file to price.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model, when pricing a --strategy.")] = None,
    strategy: Annotated[str | None, typer.Option("--strategy", "-s", help="SPEC, e.g. tp=4,pp=2.")] = None,
    gpu: GpuOpt = "H100",
    gpus: GpusOpt = None,
    gpus_per_node: PerNodeOpt = None,
    cluster: ClusterOpt = None,
    isl: IslOpt = 2048,
    osl: OslOpt = 256,
    batch: BatchOpt = 1,
    ttft_ms: TtftOpt = None,
    tpot_ms: TpotOpt = None,
    weight_dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Cost report of a DAG/plan file, or of a model and --strategy."""
    from ..tools.builder import build_dag
    from ..tools.contracts import parse_strategy
    from ..tools.cost import estimate_cost
    from ..tools.planner import resolve_request
    from .files import read_dag

    if file is not None:
        dag = read_dag(file)
        report = estimate_cost(dag)
    else:
        if model is None or strategy is None:
            fail("give a DAG/plan FILE, or --model and --strategy")
        request = build_request(
            model,
            gpu,
            gpus,
            gpus_per_node,
            cluster,
            isl,
            osl,
            batch,
            ttft_ms,
            tpot_ms,
            "latency",
            weight_dtype,
            kv_dtype,
        )
        spec, cl = resolve_request(request)
        report = estimate_cost(build_dag(spec, cl, parse_strategy(strategy), request.workload), cl)
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
    phases = Table(
        "phase",
        "latency ms",
        "compute ms",
        "comm ms",
        "exposed comm ms",
        "overlap",
        "bubble",
        "collectives",
        "across nodes",
        title="schedule",
    )
    for name in ("prefill", "decode"):
        p = getattr(report, name)
        phases.add_row(
            name,
            f"{p.latency_ms:.2f}",
            f"{p.compute_ms:.2f}",
            f"{p.communication_ms:.2f}",
            f"{p.exposed_communication_ms:.2f}",
            f"{p.overlap_fraction:.0%}",
            f"{p.bubble_fraction:.0%}",
            str(p.collectives),
            str(p.inter_node_collectives),
        )
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


@app.command("search")
def search_command(
    model: ModelOpt,
    gpu: GpuOpt = "H100",
    gpus: GpusOpt = None,
    gpus_per_node: PerNodeOpt = None,
    cluster: ClusterOpt = None,
    isl: IslOpt = 2048,
    osl: OslOpt = 256,
    batch: BatchOpt = 1,
    ttft_ms: TtftOpt = None,
    tpot_ms: TpotOpt = None,
    objective: ObjectiveOpt = "latency",
    weight_dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    top: Annotated[int, typer.Option("--top", help="How many strategies to list.")] = 10,
    as_json: JsonFlag = False,
) -> None:
    """Ranked strategies and the Pareto frontier of tokens/s/GPU against tokens/s/user."""
    from rich.table import Table

    from ..errors import InfeasibleError
    from ..tools.planner import resolve_request
    from ..tools.search import search

    request = build_request(
        model, gpu, gpus, gpus_per_node, cluster, isl, osl, batch, ttft_ms, tpot_ms, objective, weight_dtype, kv_dtype
    )
    spec, cl = resolve_request(request)
    try:
        result = search(spec, cl, request.workload, top=top)
    except InfeasibleError as exc:
        if as_json:
            emit_json({"infeasible": str(exc), "min_gpus": exc.min_gpus})
        else:
            console().print(f"[red]infeasible[/red]: {exc}")
        return
    if as_json:
        emit_json(result)
        return
    out = console()
    table = Table(
        "#",
        "strategy",
        "TTFT ms",
        "TPOT ms",
        "tok/s/GPU",
        "tok/s/user",
        "GB/GPU",
        "priced by",
        title=f"{result.evaluated} strategies in {result.seconds:.2f} s, objective {result.objective}",
    )
    for i, c in enumerate(result.candidates, 1):
        table.add_row(
            str(i),
            c.spec,
            f"{c.ttft_ms:.1f}",
            f"{c.tpot_ms:.2f}",
            f"{c.tokens_per_s_per_gpu:.1f}",
            f"{c.tokens_per_s_per_user:.1f}",
            f"{c.memory_per_gpu_gb:.1f}",
            c.scored_by + ("" if c.meets_targets else " (misses)"),
        )
    out.print(table)
    front = Table("strategy", "tok/s/user", "tok/s/GPU", title="Pareto frontier")
    for c in result.frontier:
        front.add_row(c.spec, f"{c.tokens_per_s_per_user:.1f}", f"{c.tokens_per_s_per_gpu:.1f}")
    out.print(front)
    if result.rejected:
        out.print("rejected: " + ", ".join(f"{k} {v}" for k, v in sorted(result.rejected.items())))
