"""The ``shardplan`` command line (typer + rich).

Each command lives in its own module of this package and registers on the app of :mod:`.app`;
heavy libraries are imported inside the commands so that ``shardplan --help`` starts fast. Every
failure the user can mend is an :class:`~shardplan.errors.InputError`: printed as one line, exit 2.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from shardplan.cli.app import app
from shardplan.errors import DeprecatedFieldWarning, ShardplanError, field_error
from shardplan.text import one_line

__all__ = ["app", "main"]

def main() -> None:
    """Console-script entry point: runs the app; every failure the user can mend is one line on stderr.

    Click's own errors (a bad flag value, an unknown option) lose their multi-line usage block and point
    to ``--help`` instead; expected errors exit 2, like click's usage errors.
    """
    import typer

    _collect_deprecations()
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        _error_line("aborted", 1)
    except SystemExit as exc:  # typer.Exit(n) of a command: its answer is out, so its warnings may follow
        _print_deprecations()
        raise exc
    except Exception as exc:  # noqa: BLE001  (sorted below: expected errors become one line, bugs re-raise)
        _one_line_or_raise(exc)
    _print_deprecations()
    sys.exit(code if isinstance(code, int) else 0)


_DEPRECATIONS: list[str] = []
"""Deprecations of input fields met so far, held back until the command ends: printed as ``warning:`` lines
after an answer, and folded into the one error line when the command fails, so a malformed file never
gets a warning line and an error line."""


def _collect_deprecations() -> None:
    """Keep each distinct deprecation of an input field (an old name in a cluster file) for
    :func:`_print_deprecations`; Python hides DeprecationWarning from users by default."""
    import warnings

    shown = warnings.showwarning

    def keep(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> None:
        if issubclass(category, DeprecatedFieldWarning):
            text = one_line(str(message), 1000)
            if text not in _DEPRECATIONS:
                _DEPRECATIONS.append(text)
        else:
            shown(message, category, *args, **kwargs)  # type: ignore[arg-type]

    warnings.filterwarnings("once", category=DeprecatedFieldWarning)
    warnings.showwarning = keep


def _print_deprecations() -> None:
    """One ``warning:`` line on stderr per deprecation kept."""
    for text in _DEPRECATIONS:
        sys.stderr.write(f"warning: {text}\n")
    _DEPRECATIONS.clear()


def _one_line_or_raise(exc: Exception) -> NoReturn:
    """Exit with one error line for an error the user can mend; re-raise anything else (a bug)."""
    from pydantic import ValidationError

    if isinstance(exc, ShardplanError):  # InputError and InfeasibleError included
        _error_line(str(exc), 2)
    if isinstance(exc, RecursionError):
        _error_line("the input is nested too deeply; give a flatter file", 2)
    if isinstance(exc, ValidationError):
        _error_line(str(field_error(exc)), 2)
    # Click's exceptions (typer vendors its own click, so they are recognised by shape, not class).
    if hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int):
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]  # plain `shardplan`: the help text
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        ctx = getattr(exc, "ctx", None)
        where = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
        _error_line(f"{exc.format_message().rstrip('.')}{where}", exc.exit_code)  # type: ignore[attr-defined]
    raise exc


def _error_line(message: str, code: int) -> NoReturn:
    """Print ``error: message`` as one line on stderr (with any deprecation met on the way, as a note at its
    end) and exit with ``code``."""
    notes = "".join(f" (note: {text})" for text in _DEPRECATIONS)
    _DEPRECATIONS.clear()
    sys.stderr.write(f"error: {one_line(message + notes, 2400)}\n")
    sys.exit(code)
