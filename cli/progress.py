"""One way for every command to show that it is working: a spinner, or a bar when the count is known, on stderr.

stdout carries the command's answer (tables, JSON, a file's text) and stays clean: the spinner lives on
stderr, draws only when stderr is a terminal, and leaves nothing behind when it ends (unless asked to).
Lines a command wants to keep (the planner's steps) print above it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Working", "working"]


class Working:
    """What a command does with its spinner while it works."""

    def __init__(self, progress: Any, task: Any, quiet: bool) -> None:
        self._progress = progress
        self._task = task
        self._quiet = quiet

    def status(self, text: str, completed: int | None = None) -> None:
        """Show ``text`` beside the spinner (and move the bar to ``completed``, when there is one)."""
        self._progress.update(self._task, description=text, completed=completed)

    def line(self, text: str) -> None:
        """Print ``text`` on stderr above the spinner, as a line that stays (no rich markup is read in it)."""
        if not self._quiet:
            self._progress.console.print(text, markup=False, highlight=False, soft_wrap=True)


@contextmanager
def working(
    what: str, *, total: int | None = None, quiet: bool = False, transient: bool = True, console: Any = None,
    remaining: bool = False,
) -> Iterator[Working]:
    """Show ``what`` with a spinner and the time elapsed on stderr for as long as the block runs; with
    ``total``, a bar counting to it (and, with ``remaining``, the time left at the pace so far). ``quiet``
    (``--json``) shows nothing; ``console`` replaces stderr's (a rich Console).

    >>> with working("searching", quiet=True) as step:
    ...     step.status("priced 10 deployments")
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns: list[Any] = [SpinnerColumn(), TextColumn(what, markup=False)]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns += [TimeElapsedColumn()] + ([TextColumn("left"), TimeRemainingColumn()] if remaining and total else [])
    columns += [TextColumn("{task.description}", markup=False)]
    screen = console or Console(stderr=True)
    # Off a terminal (a log, a pipe) a spinner is noise: only the lines a command keeps are written there.
    with Progress(*columns, console=screen, transient=transient, disable=quiet or not screen.is_terminal) as progress:
        yield Working(progress, progress.add_task("", total=total), quiet)
