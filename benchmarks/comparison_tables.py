"""What the side-by-side comparison scripts share: cell formatting, the markdown and terminal tables, picking
requests by label, and finding the shardplan command to compare (``compare_aiconfigurator.py``,
``compare_speculation_prefix.py``)."""

from __future__ import annotations

import fnmatch
import math
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

__all__ = ["fmt", "markdown_table", "print_rich", "print_tables", "select_labelled", "default_shardplan"]


class Labelled(Protocol):
    @property
    def label(self) -> str: ...


L = TypeVar("L", bound=Labelled)


def fmt(value: float | None, digits: int = 0) -> str:
    """A figure with thousands separators, ``-`` when missing."""
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def markdown_table(records: list[dict[str, str]]) -> str:
    """A GitHub markdown table of the records (same keys in each)."""
    if not records:
        return ""
    header = list(records[0])
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(record[key].replace("|", "\\|") for key in header) + " |" for record in records]
    return "\n".join(lines)


def print_rich(title: str, records: list[dict[str, str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for key in records[0] if records else []:
        table.add_column(key, overflow="fold")
    for record in records:
        table.add_row(*record.values())
    Console(width=250).print(table)


def print_tables(tables: dict[str, list[dict[str, str]]], markdown: bool) -> None:
    """Each titled table, as markdown (the README's) or for the terminal."""
    for title, records in tables.items():
        if markdown:
            print(f"{title}\n\n{markdown_table(records)}\n")
        else:
            print_rich(title, records)


def select_labelled(items: Sequence[L], patterns: str | None) -> list[L]:
    """The items whose label matches one of the comma-separated patterns or globs (all when None).

    Raises:
        ValueError: no item matches; the message lists the labels.
    """
    if not patterns:
        return list(items)
    wanted = [pattern.strip() for pattern in patterns.split(",") if pattern.strip()]
    chosen = [item for item in items if any(fnmatch.fnmatch(item.label, pattern) for pattern in wanted)]
    if not chosen:
        raise ValueError(f"--cases {patterns!r} matches no request; labels: " + ", ".join(i.label for i in items))
    return chosen


def default_shardplan() -> str | None:
    """The ``shardplan`` command beside the running interpreter, else the one on PATH."""
    beside = Path(sys.executable).parent / "shardplan"
    return str(beside) if beside.exists() else shutil.which("shardplan")
