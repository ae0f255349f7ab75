"""The ``shardplan`` command line (typer + rich).

Each command lives in its own module of this package and registers on the app of :mod:`.app`;
heavy libraries are imported inside the commands so that ``shardplan --help`` starts fast. Every
failure the user can mend is an :class:`~shardplan.errors.InputError`: printed as one line, exit 2.
"""

from __future__ import annotations

import importlib
import sys

from ...errors import ShardplanError
from .app import app

__all__ = ["app", "main"]

# Command modules registered at start-up, in help order. Each is small and imports heavy code lazily.
COMMAND_MODULES: tuple[str, ...] = ("catalog", "plan", "build", "chat", "validate", "eval", "report", "mcp", "kb")


def main() -> None:
    """Console-script entry point: runs the app and turns expected errors into one line and exit 2."""
    for module in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{module}")
    try:
        app()
    except ShardplanError as exc:  # InputError and InfeasibleError included
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(2)
