"""``shardplan validate FILE``: the validators' verdict on a DAG or plan JSON file.

Exit codes: 0 valid (warnings allowed), 1 violations of mandatory rules (schema errors included),
2 unreadable input (missing file, not UTF-8, not JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shardplan.cli.app import app, console, emit_json
from shardplan.cli.files import read_json
from shardplan.cli.progress import working
from shardplan.contracts.reports import ValidationReport
from shardplan.text import counted
from shardplan.validators.schema_check import validate_json

__all__ = ["validate_command"]

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


@app.command("validate")
def validate_command(
    file: Annotated[
        Path, typer.Argument(help="DAG JSON (shardplan build -o) or plan JSON (shardplan plan -o).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the ValidationReport as JSON.")] = False,
) -> None:
    """Check a DAG (or the DAG of a plan) against the JSON Schema and every knowledge rule."""

    document = read_json(file)
    with working(f"checking {file} against every rule", quiet=as_json):
        report = validate_json(document)
    if as_json:
        emit_json(report)
    else:
        _print_report(file, report)
    raise typer.Exit(0 if report.valid else 1)


def _print_report(file: Path, report: ValidationReport) -> None:
    """A verdict line, then one table row per violation: rule, severity, message with citation, fix."""
    from rich.table import Table

    out = console()
    errors = sum(v.severity == "error" for v in report.violations)
    verdict = (
        "[bold green]valid[/bold green]"
        if report.valid
        else f"[bold red]invalid[/bold red] ({counted(errors, 'error')})"
    )
    out.print(
        f"{file}: {verdict}; {counted(report.nodes, 'node')}, {counted(report.edges, 'edge')}, "
        f"{counted(len(report.rules_checked), 'rule')} checked, {counted(len(report.violations), 'violation')}"
    )
    if not report.violations:
        return
    table = Table("rule", "severity", "message", "fix", show_lines=True)
    for v in report.violations:
        where = f"\n[dim]{v.citation}[/dim]" if v.citation else ""
        table.add_row(v.rule, f"[{_STYLE[v.severity]}]{v.severity}[/]", v.message + where, v.fix)
    out.print(table)
