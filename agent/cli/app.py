"""The typer app and the output helpers that every command module shares.

Command modules import from here and register on :data:`app`; this module imports none of them.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

__all__ = ["app", "emit_json", "fail", "console"]

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
    from ...reading import one_line

    sys.stderr.write(f"error: {one_line(message, 1000)}\n")
    raise typer.Exit(code)
