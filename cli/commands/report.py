"""Seeing and deploying a plan: ``report`` (HTML page, Perfetto trace) and ``export`` (engine launch commands)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.cli.app import app, console, emit_json, fail
from shardplan.cli.files import read_plan, require_valid
from shardplan.cli.progress import working
from shardplan.io import write_atomic
from shardplan.text import one_line
from shardplan.tools.launch.commands import ENGINES, launch_command
from shardplan.tools.report.html import render_report
from shardplan.tools.report.timeline import trace_events

PlanArg = Annotated[Path, typer.Argument(help="A plan JSON file (shardplan plan -o plan.json).")]
OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="HTML file to write (default: PLAN.html).")]
TraceOpt = Annotated[Path | None, typer.Option("--trace", help="Also write the schedule as a Chrome/Perfetto trace.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


@app.command("report")
def report_command(
    plan_file: PlanArg,
    output: OutputOpt = None,
    trace: TraceOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Write a self-contained HTML report of a plan (and optionally its schedule as a trace)."""
    import json


    plan = read_plan(plan_file)
    if plan.dag is not None:
        require_valid(plan.dag, plan_file)  # the report draws its schedule
    if trace is not None and plan.dag is None:
        fail(f"--trace: {plan_file} is an infeasible plan with no DAG, so there is no schedule to trace")
    target = output if output is not None else plan_file.with_suffix(".html")
    with working(f"drawing the report of {plan_file}", quiet=as_json):
        page = render_report(plan)
        events: dict[str, Any] | None = trace_events(plan) if trace is not None else None
    write_atomic(target, page)
    result: dict[str, Any] = {"report": str(target), "bytes": len(page.encode()), "status": plan.status}
    if trace is not None and events is not None:
        write_atomic(trace, json.dumps(events, separators=(",", ":")))
        result.update({"trace": str(trace), "events": len(events["traceEvents"])})
    if as_json:
        emit_json(result)
        return
    out = console()
    out.print(f"report written to {target} ({result['bytes'] / 1024:,.0f} KB, status {plan.status})", markup=False)
    if trace is not None:
        out.print(f"trace written to {trace} ({result['events']:,} events; open it in ui.perfetto.dev)", markup=False)


@app.command("export")
def export_command(
    plan_file: PlanArg,
    engine: Annotated[str | None, typer.Option(
        "--engine", "-e", help="vllm, sglang or trtllm; default: the engine the plan was priced for.")] = None,
    spec_model: Annotated[str | None, typer.Option(
        "--spec-model", help="The drafter's weights (a folder or Hugging Face id): the EAGLE head, which a plan with "
        "--spec eagle:K needs, or a local copy of the draft model of --spec draft:MODEL:K.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Print the launch command that serves a plan's strategy with vLLM, SGLang or TensorRT-LLM."""

    if engine is not None and engine not in ENGINES:
        fail(f"--engine {engine!r} is not known; choose one of {', '.join(ENGINES)}")
    plan = read_plan(plan_file)
    engine = engine or plan.request.workload.engine
    if plan.strategy is None:
        fail(f"{plan_file} is an infeasible plan: no strategy to launch ({plan.explanation})")
    spec = launch_command(plan, engine, spec_model)  # type: ignore[arg-type]
    if as_json:
        emit_json(spec)
        return

    # Comment lines too: a newline in a model path would start a command of its own when pasted.
    lines = [f"# {engine} launch for {one_line(spec.model)}: {plan.strategy.to_spec()}"]
    lines += [f"# note: {one_line(note)}" for note in spec.notes]
    sys.stdout.write("\n".join(lines) + "\n" + spec.command + "\n")
