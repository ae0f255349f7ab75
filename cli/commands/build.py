"""``shardplan build``: a strategy to its parallel strategy DAG, without search."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from shardplan.cli.app import app, console, emit_json
from shardplan.cli.common import request_options
from shardplan.cli.progress import working
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InputError
from shardplan.io import write_atomic
from shardplan.text import counted
from shardplan.tools.builder.build import build_dag
from shardplan.tools.planning.planner import resolve_request
from shardplan.tools.views.exports import collapse, rank_ranges, summarize, to_dot, to_json, to_mermaid

Format = Literal["json", "mermaid", "dot"]
_SUFFIXES: dict[str, Format] = {
    ".json": "json",
    ".mmd": "mermaid",
    ".mermaid": "mermaid",
    ".md": "mermaid",
    ".dot": "dot",
    ".gv": "dot",
}


@app.command("build")
@request_options
def build_command(
    request: Any,
    strategy: Annotated[
        str,
        typer.Option("--strategy", "-s", help="Degrees, e.g. tp=4,pp=2 or 'prefill:sp=2,tp=4;decode:adp=2,tp=4'."),
    ],
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-f", help="json, mermaid or dot (default: from the -o suffix, else json)."),
    ] = None,
    collapsed: Annotated[
        bool | None,
        typer.Option(
            "--collapsed/--full",
            help="One layer per stage, or every node (default: full JSON; drawings collapse past 300 nodes).",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (atomically) instead of stdout.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary of the DAG.")] = False,
) -> None:
    """Build the parallel strategy DAG of a strategy (prefill and one decode step) and print or write it."""

    chosen = _format(fmt, output)
    spec, where = resolve_request(request)
    # Quiet when the DAG's text itself goes to stdout (a pipe), or with --json.
    with working(f"building the DAG of {strategy}", quiet=as_json or output is None and chosen != "json"):
        dag = build_dag(spec, where, parse_strategy(strategy), request.workload.with_batch())
        summary = summarize(dag)
    if output is not None or (chosen != "json" and not as_json):
        if chosen == "json":
            text = to_json(collapse(dag) if collapsed else dag)
        else:
            text = (to_mermaid if chosen == "mermaid" else to_dot)(dag, collapsed)
        if output is None:
            typer.echo(text, nl=False)
            return
        summary["written"] = str(write_atomic(output, text))
        summary["format"] = chosen
    if as_json:
        emit_json(summary)
        return
    _print_summary(summary)


def _format(fmt: str | None, output: Path | None) -> Format:
    if fmt is None:
        return _SUFFIXES.get(output.suffix.lower(), "json") if output is not None else "json"
    wanted = fmt.strip().lower()
    if wanted not in ("json", "mermaid", "dot"):
        raise InputError(f"unknown format '{fmt}'", field="format", fix="use json, mermaid or dot")
    return wanted  # type: ignore[return-value]


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table


    out = console()
    out.print(
        f"[bold]{summary['model']}[/bold] on {summary['gpus']}x {summary['gpu']} "
        f"({summary['gpus_per_node']} per node), strategy [bold]{summary['strategy']}[/bold]"
    )
    load = summary["workload"]
    out.print(f"  workload     isl={load['isl']} osl={load['osl']} batch={load['batch']}")
    out.print(
        f"  graph        {counted(summary['nodes'], 'node')}, {counted(summary['edges'], 'edge')} "
        f"({', '.join(f'{k} {v}' for k, v in summary['edges_per_kind'].items())})"
    )
    for phase, ranks in summary["ranks"].items():
        layers = summary["stage_layers"].get(phase)
        stages = f", {counted(len(layers), 'stage')} of {'/'.join(map(str, layers))} layers" if layers else ""
        out.print(
            f"  {phase:<12} {counted(summary['nodes_per_phase'][phase], 'node')} on ranks {rank_ranges(ranks)}"
            f" ({counted(len(ranks), 'GPU')}){stages}"
        )
    step = summary["decode_step"]
    per_kind = ", ".join(f"{k} {v}" for k, v in step["collectives_per_kind"].items()) or "none"
    out.print(
        f"  decode step  {step['collectives']} collectives ({per_kind}), "
        f"{step['collectives_inter_node']} cross nodes; {step['point_to_point']} send/recv, "
        f"{step['point_to_point_inter_node']} cross nodes"
    )
    table = Table("kind", "nodes", title="nodes per kind", title_justify="left")
    for kind, count in summary["nodes_per_kind"].items():
        table.add_row(kind, str(count))
    out.print(table)
    if "written" in summary:
        out.print(f"wrote {summary['format']} to {summary['written']}")
