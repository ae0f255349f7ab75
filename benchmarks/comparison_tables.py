"""What the side-by-side comparison scripts share: cell formatting, the markdown and terminal tables, picking
requests by label, finding the shardplan command to compare, and the command-line options they all take
(``compare_aiconfigurator.py``, ``compare_speculation_prefix.py``)."""

from __future__ import annotations

import argparse
import fnmatch
import math
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

__all__ = [
    "fmt",
    "markdown_table",
    "print_rich",
    "print_tables",
    "select_labelled",
    "default_shardplan",
    "comparison_parser",
    "parse_comparison",
]


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


def comparison_parser(description: str, cases_help: str, aic_venv: Path) -> argparse.ArgumentParser:
    """A parser with the options every comparison takes; a script adds its own after these."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cases", help=cases_help)
    parser.add_argument("--jobs", type=int, default=1, help="requests run at once (default 1)")
    parser.add_argument("--markdown", action="store_true", help="print the README's markdown tables")
    parser.add_argument("--json", type=Path, help="also write every row's figures to this JSON file")
    parser.add_argument("--aic-venv", type=Path, default=aic_venv)
    parser.add_argument("--shardplan", default=default_shardplan(), help="the shardplan command to compare")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed to each tool run")
    return parser


T = TypeVar("T")


def parse_comparison(
    parser: argparse.ArgumentParser, argv: list[str] | None, select: Callable[[str | None], list[T]]
) -> tuple[argparse.Namespace, list[T]]:
    """The parsed options and the requests ``--cases`` picks with ``select``.

    Raises:
        SystemExit: (code 2, through ``parser.error``) ``--jobs`` below 1, no shardplan command, or
            ``--cases`` matching no request.
    """
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if not args.shardplan:
        parser.error("no shardplan command found: install shardplan or pass --shardplan PATH")
    try:
        requests = select(args.cases)
    except ValueError as error:
        parser.error(str(error))
    return args, requests
