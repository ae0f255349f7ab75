"""The rows of a request trace's text, by format: CSV with a header row, or JSON (JSON Lines, an array of
objects, or one object of equal-length arrays such as vLLM's saved benchmark results).

Each reader returns the trace's column names and its rows as (line in the file, where the format has lines;
{column: cell}); cells stay as the file has them, for :mod:`.traces` to read strictly. A file that is not
readable as its format is one :class:`~shardplan.errors.InputError` with field ``workload`` naming the line.

>>> names, rows = rows_csv("input_tokens,output_tokens\\n512,128\\n", "trace")
>>> names, list(rows)
(['input_tokens', 'output_tokens'], [(2, {'input_tokens': '512', 'output_tokens': '128'})])
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from shardplan.errors import InputError
from shardplan.reading import load_json_strict
from shardplan.text import counted, one_line

__all__ = ["Rows", "rows_csv", "rows_json", "trace_kind"]

_FIELD = "workload"
_FIX = "give a CSV file with a header row, or a JSON Lines file, one request a row (see shardplan traces)"

Rows = Iterator[tuple[int | None, dict[str, Any]]]
"""A trace's rows as (line in the file, where it has lines; {column: cell})."""


def rows_csv(text: str, what: str) -> tuple[list[str], Rows]:
    """The header of a CSV trace and its rows."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next((row for row in reader if row), [])
    except csv.Error as exc:
        raise InputError(f"workload: {what} is not readable CSV: {one_line(str(exc), 120)} on line {reader.line_num}",
                         field=_FIELD, fix=_FIX) from None
    names = [name.strip() for name in header]

    def rows() -> Rows:
        try:
            for cells in reader:
                if not cells or all(not c.strip() for c in cells):
                    continue
                if len(cells) != len(names):
                    raise InputError(f"workload: {what} line {reader.line_num} has {counted(len(cells), 'cell')}, the "
                                     f"header "
                                     f"{len(names)}", field=_FIELD, fix="give every row one cell per header column")
                yield reader.line_num, dict(zip(names, cells, strict=True))
        except csv.Error as exc:
            raise InputError(f"workload: {what} is not readable CSV: {one_line(str(exc), 120)} on line "
                             f"{reader.line_num}", field=_FIELD, fix=_FIX) from None

    return names, rows()


_JSON_FIX = "give one JSON object a line, with finite numbers"


def _json_value(text: str, what: str) -> Any:
    """Parsed JSON of ``text`` (refusing NaN, Infinity and huge integers); ``what`` says where it is."""
    try:
        return load_json_strict(text, what=f"workload: {what}", field=_FIELD, fix=_JSON_FIX)
    except InputError:
        raise
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise InputError(f"workload: {what} is not valid JSON: {reason}", field=_FIELD, fix=_JSON_FIX) from None


def _whole_json(text: str, what: str) -> Any:
    """``text`` as one JSON document when it is one (an array, an object of arrays); None for JSON Lines."""
    if text.startswith("["):
        return _json_value(text, what)
    try:
        return load_json_strict(text, what=what, field=_FIELD)
    except (json.JSONDecodeError, RecursionError, ValueError):
        return None  # several documents: JSON Lines, read (and its errors placed) line by line


def rows_json(text: str, what: str) -> tuple[list[str], Rows]:
    """The keys of a JSON trace and its rows: JSON Lines, an array of objects, or an object of equal-length
    arrays (one entry per request)."""
    whole = _whole_json(text.strip(), what)
    if isinstance(whole, dict) and whole and all(isinstance(v, list) for v in whole.values()):
        lengths = sorted({len(v) for v in whole.values()})
        if len(lengths) != 1:
            raise InputError(f"workload: {what} holds arrays of different lengths ({lengths[:4]})",
                             field=_FIELD, fix="give one entry per request in every array")
        keys = list(whole)
        return keys, ((None, {k: whole[k][i] for k in keys}) for i in range(lengths[0]))
    objects: list[tuple[int | None, Any]]
    if isinstance(whole, list):
        objects = [(None, item) for item in whole]
    elif whole is not None:
        objects = [(1, whole)]
    else:
        objects = [(n, _json_value(line, f"{what} line {n}")) for n, line in enumerate(text.splitlines(), 1)
                   if line.strip()]
    for row, (line, obj) in enumerate(objects, 1):
        if not isinstance(obj, dict):
            at = f"line {line}" if line is not None else f"row {row}"
            raise InputError(f"workload: {what} {at} is not a JSON object", field=_FIELD,
                             fix='give one object a request, such as {"input_tokens": 512, "output_tokens": 128}')
    keys = list(objects[0][1]) if objects else []
    return keys, iter(objects)



def trace_kind(file_name: str, text: str) -> str:
    """``csv`` or ``json``: by the file's suffix, else by the text's first character."""
    suffix = file_name.rsplit(".", 1)[-1].lower() if "." in file_name else ""
    if suffix in ("jsonl", "ndjson", "json"):
        return "json"
    if suffix == "csv":
        return "csv"
    return "json" if text.lstrip().startswith(("{", "[")) else "csv"
