"""The ``shardplan`` command line (typer + rich).

Commands live in small modules (``cli_*.py``) that register on :data:`app`; heavy libraries are
imported inside the commands so that ``shardplan --help`` starts fast. Every failure the user can
mend is an :class:`~shardplan.errors.InputError`: printed as one line, exit code 2.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

from ..errors import InputError, ShardplanError

__all__ = ["app", "main", "emit_json", "fail", "console"]

app = typer.Typer(
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
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


def main() -> None:
    """Console-script entry point: runs the app and turns expected errors into one line and exit 2."""
    from . import cli_catalog  # noqa: F401  (registers commands)

    for module in _OPTIONAL_COMMANDS:
        __import__(f"{__package__}.{module}")
    try:
        app()
    except InputError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
    except ShardplanError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)


# Command modules registered at start-up, in help order. Each is small and imports heavy code lazily.
_OPTIONAL_COMMANDS: list[str] = [
    "cli_plan",
    "cli_build",
    "cli_chat",
    "cli_validate",
    "cli_eval",
    "cli_report",
    "cli_mcp",
    "cli_kb",
]
