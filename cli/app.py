"""The typer app, its table of commands, and the output helpers that every command module shares.

Command modules import from here and register on :data:`app`. The app loads a command's module only when that
command runs (or shows its own help): ``shardplan --help`` lists :data:`COMMANDS` without importing any of them,
so it starts fast whatever the commands import.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any, NamedTuple, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

from shardplan.text import one_line

__all__ = ["app", "COMMANDS", "Command", "emit_json", "fail", "console"]


class Command(NamedTuple):
    """Where a top-level command lives and the line ``shardplan --help`` shows for it."""

    module: str
    help: str


COMMANDS: dict[str, Command] = {
    "models": Command("catalog", "List the bundled models (Hugging Face ids) with their size."),
    "gpus": Command("catalog", "List the GPU catalog with datasheet figures."),
    "traces": Command("catalog", "List the bundled request traces (--workload NAME) with their lengths and rate."),
    "show-model": Command("catalog", "Show a model's architecture and derived sizes (parameters, KV bytes per token)."),
    "schema": Command("catalog", "Print the JSON Schema of a contract."),
    "plan": Command("plan", "Plan a deployment: search, build the DAG, validate it, price it, explain the choice."),
    "sweep": Command("sweep", "Plan every cell of a grid (models x GPU types x traffic x engines); finished cells are "
                     "cached in --out."),
    "cost": Command("cost", "Cost report of a DAG/plan FILE, or of --model and --strategy."),
    "search": Command("search", "Ranked deployments and the Pareto frontier of tokens/s/GPU against tokens/s/user."),
    "simulate": Command("simulate", "Simulate a plan's deployment request by request: latency percentiles, goodput, "
                        "queueing, preemptions."),
    "build": Command("build", "Build the parallel strategy DAG of a strategy (prefill and one decode step) and print "
                     "or write it."),
    "chat": Command("chat", "Plan from plain language, e.g."),
    "validate": Command("validate", "Check a DAG (or the DAG of a plan) against the JSON Schema and every knowledge "
                        "rule."),
    "eval": Command("eval", "Run the golden configurations through each policy; write results.jsonl, "
                    "report.md/json/png."),
    "report": Command("report", "Write a self-contained HTML report of a plan (and optionally its schedule as a "
                      "trace)."),
    "export": Command("report", "Print the launch command that serves a plan's strategy with vLLM, SGLang or "
                      "TensorRT-LLM."),
    "mcp": Command("mcp", "Serve plan, build_dag, validate_dag, estimate_cost and the other tools as an MCP server."),
    "kb": Command("kb", "Search the knowledge base and read its rules."),
}
"""Every top-level command, in help order: its module in :mod:`shardplan.cli.commands` and its help line (a test
holds each
line to the start of the command's own help)."""


class _LazyCommands(TyperGroup):
    """The top-level group: lists :data:`COMMANDS` as they are, and imports a command's module on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        # Importing the module registers its commands on ``app``; typer then builds them as click commands.
        importlib.import_module(f"shardplan.cli.commands.{entry.module}")
        return typer.main.get_group(app).commands.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, TyperCommand(name, help=entry.help).get_short_help_str(limit))
                for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    cls=_LazyCommands,
    name="shardplan",
    help="Plan how to split an LLM across GPUs for inference: a validated, costed parallel strategy DAG.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


def console() -> Any:
    """A rich console on stdout (created lazily, so importing the CLI stays cheap)."""
    import shutil

    from rich.console import Console

    # Piped output has no terminal width; 140 columns keep the tables readable in logs and files.
    width = None if sys.stdout.isatty() else shutil.get_terminal_size((140, 24)).columns
    return Console(highlight=False, soft_wrap=True, width=width)


def emit_json(payload: Any) -> None:
    """Print ``payload`` (a pydantic model or plain data) as JSON on stdout."""
    if hasattr(payload, "model_dump_json"):
        sys.stdout.write(payload.model_dump_json(indent=2) + "\n")  # pydantic's serializer: fast on big DAGs
        return
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one error line on stderr and exit with ``code``."""

    sys.stderr.write(f"error: {one_line(message, 1000)}\n")
    raise typer.Exit(code)


@app.callback()
def _every_command() -> None:
    # A callback makes typer build ``app`` as a group even before any command module is imported.
    pass
