"""Request traces read strictly into arrays: one request a row of a CSV or JSON Lines file, or a bundled trace.

A trace names each request's prompt and output tokens and, optionally, its arrival time and prefix group; which
columns hold them is read from their names (:mod:`.trace_columns`). Formats, by the file's suffix, else by its
first character:

* CSV (``.csv``): a header row, then one request a row.
* JSON Lines (``.jsonl``, ``.ndjson``, ``.json``): one object a line; also a JSON array of such objects, or one
  object of equal-length arrays (vLLM's saved benchmark results: ``input_lens``, ``output_lens``).

Times become seconds from the earliest request, and rows out of time order are put in it (exports often list
requests as they completed). Prefix groups are numbered in order of first appearance, -1 where a row has none.
The file's size is checked before it is read (:data:`~shardplan.limits.MAX_TRACE_BYTES`), then its rows
(:data:`~shardplan.limits.MAX_TRACE_ROWS`). Every malformed file, column or row is one
:class:`~shardplan.errors.InputError` with field ``workload`` that names the row, the line and the column.

>>> trace = read_trace("azure-conv")
>>> len(trace), round(trace.mean_isl), trace.span_s
(5000, 1161, 1023.316984)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np

from shardplan.errors import InputError
from shardplan.limits import MAX_TRACE_BYTES, MAX_TRACE_ROWS
from shardplan.reading import read_text
from shardplan.text import one_line
from shardplan.tools.catalogs.trace_files import bundled_trace_name, bundled_trace_text, bundled_traces
from shardplan.tools.traffic.trace_columns import (
    PREFIX_FIX,
    TIME_FIX,
    TOKEN_FIX,
    TraceColumns,
    arrival_time,
    prefix_count,
    recognise_columns,
    token_count,
)
from shardplan.tools.traffic.trace_formats import rows_csv, rows_json, trace_kind

__all__ = ["Trace", "read_trace", "parse_trace_text", "require_times", "trace_stats"]

_FIELD = "workload"


@dataclass(frozen=True)
class Trace:
    """A request trace as arrays of one length, one entry per request, in arrival order (read-only)."""

    name: str
    """The trace as it was named: a bundled name or the path given."""
    isl: np.ndarray
    """Prompt tokens (int64, at least 1)."""
    osl: np.ndarray
    """Output tokens (int64, at least 1)."""
    arrival_s: np.ndarray | None
    """Arrival times in seconds from the earliest request, non-decreasing (float64); None: the trace has none."""
    prefix_group: np.ndarray
    """Shared-prefix group of each request (int64; -1: none)."""
    prefix_tokens: np.ndarray | None = None
    """Leading prompt tokens each request shares with earlier requests of its group (int64); None: no such column."""

    def __len__(self) -> int:
        return int(self.isl.shape[0])

    @property
    def mean_isl(self) -> float:
        return float(self.isl.mean())

    @property
    def mean_osl(self) -> float:
        return float(self.osl.mean())

    @property
    def span_s(self) -> float | None:
        """Seconds from the first request to the last; None without times."""
        return float(self.arrival_s[-1]) if self.arrival_s is not None else None

    @property
    def mean_rate(self) -> float | None:
        """Requests per second over the trace's span (gaps counted, not requests); None without times or with
        every request at one instant."""
        span = self.span_s
        return (len(self) - 1) / span if span else None


def require_times(trace: Trace) -> np.ndarray:
    """The trace's arrival times, for replaying them.

    Raises:
        InputError: the trace has none (field ``arrival``).
    """
    if trace.arrival_s is None:
        raise InputError(f"arrival 'trace' replays a trace's timestamps; {_describe(trace.name)} has none",
                         field="arrival", fix="give a trace with an arrival-time column (timestamp, arrival_time), "
                         "or an arrival process: poisson, gamma:cv=3, closed:N")
    return trace.arrival_s


def trace_stats(trace: Trace) -> dict[str, Any]:
    """What a trace holds, as ``shardplan traces`` shows it: requests, mean, median and 99th-percentile prompt
    and output tokens, the span in seconds and the mean rate (None without times).

    >>> trace_stats(read_trace("azure-code"))["isl_p50"]
    1473.0
    """
    stats: dict[str, Any] = {"name": trace.name, "requests": len(trace)}
    for which, values in (("isl", trace.isl), ("osl", trace.osl)):
        p50, p99 = np.percentile(values, [50, 99])
        stats.update({f"{which}_mean": round(float(values.mean()), 1), f"{which}_p50": round(float(p50), 1),
                      f"{which}_p99": round(float(p99), 1)})
    span, rate = trace.span_s, trace.mean_rate
    stats.update(span_s=round(span, 1) if span is not None else None,
                 rate_per_s=round(rate, 3) if rate is not None else None)
    return stats


def _describe(source: str) -> str:
    return f"trace '{one_line(source, 120)}'"


def _where(what: str, row: int, line: int | None, column: str) -> str:
    at = f" (line {line})" if line is not None else ""
    return f"{what} row {row}{at}, column '{one_line(column, 60)}'"


def parse_trace_text(text: str, *, name: str, kind: str) -> Trace:
    """The trace in ``text`` (``kind`` ``csv`` or ``json``), named ``name`` in messages.

    Raises:
        InputError: no rows, no prompt- or output-token column, a malformed row (its row, line and column named),
            more than :data:`~shardplan.limits.MAX_TRACE_ROWS` rows.
    """
    what = _describe(name)
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise InputError(f"workload: {what} is empty", field=_FIELD,
                         fix="give a header row, then one request a row (see shardplan traces)")
    keys, rows = rows_csv(text, what) if kind == "csv" else rows_json(text, what)
    columns = recognise_columns([str(k) for k in keys], what)
    isl: list[int] = []
    osl: list[int] = []
    times: list[float | datetime] = []
    groups: list[int] = []
    shared: list[int] = []
    numbering: dict[str, int] = {}
    for row, (line, cells) in enumerate(rows, 1):
        if row > MAX_TRACE_ROWS:
            raise InputError(f"workload: {what} has more than {MAX_TRACE_ROWS:,} requests", field=_FIELD,
                             fix=f"give at most {MAX_TRACE_ROWS:,} rows (a sample of the trace)")
        isl.append(_convert(cells, columns.isl, token_count, TOKEN_FIX, (what, row, line)))
        osl.append(_convert(cells, columns.osl, token_count, TOKEN_FIX, (what, row, line)))
        if columns.prefix is not None:
            shared.append(_convert(cells, columns.prefix, partial(prefix_count, prompt=isl[-1]), PREFIX_FIX,
                                   (what, row, line)))
        if columns.time is not None:
            times.append(_time(cells, columns, (what, row, line), times[0] if times else None))
        group = _group(cells, columns.group, (what, row, line))
        groups.append(-1 if group is None else numbering.setdefault(group, len(numbering)))
    if not isl:
        raise InputError(f"workload: {what} holds no requests", field=_FIELD, fix="give one request a row")
    return _arrays(name, isl, osl, times if columns.time is not None else None, groups,
                   shared if columns.prefix is not None else None)


_Place = tuple[str, int, int | None]
"""Where a cell is: the trace as named in messages, its row, its line in the file (None: no lines)."""


def _convert(cells: dict[str, Any], column: str, convert: Callable[[Any], Any], fix: str, place: _Place) -> Any:
    """The cell of ``column`` converted; an empty or refused cell is one InputError naming its row and column."""
    value = cells.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"workload: {_where(*place, column)} is empty", field=_FIELD, fix=fix)
    try:
        return convert(value)
    except ValueError as exc:
        raise InputError(f"workload: {_where(*place, column)}: {one_line(repr(value), 60)} {exc}", field=_FIELD,
                         fix=fix) from None


def _group(cells: dict[str, Any], column: str | None, place: _Place) -> str | None:
    """A row's prefix group as text (None: the row has none); a JSON object or array is no group's name."""
    if column is None:
        return None
    value = cells.get(column)
    if isinstance(value, dict | list):
        shape = "an object" if isinstance(value, dict) else "an array"
        raise InputError(f"workload: {_where(*place, column)} holds {shape}, not a group name", field=_FIELD,
                         fix="name each prefix group with text or a number (a session or conversation id)")
    text = str(value).strip() if value is not None else ""
    return text or None


def _time(cells: dict[str, Any], columns: TraceColumns, place: _Place,
          first: float | datetime | None) -> float | datetime:
    """One row's arrival time, of the same kind (seconds or datetime) as the first row's."""
    assert columns.time is not None
    scale = columns.time_scale
    value = _convert(cells, columns.time, lambda v: arrival_time(v, scale), TIME_FIX, place)
    if first is not None and isinstance(first, datetime) != isinstance(value, datetime):
        raise InputError(f"workload: {_where(*place, columns.time)} mixes seconds and datetimes", field=_FIELD,
                         fix="write every time in one form: seconds, or ISO datetimes")
    return value


def _arrays(name: str, isl: list[int], osl: list[int], times: list[float | datetime] | None,
            groups: list[int], shared: list[int] | None = None) -> Trace:
    """The trace's arrays, sorted by arrival time, made read-only (a cached trace is shared)."""
    seconds = None
    if times is not None:
        moments = [t for t in times if isinstance(t, datetime)]  # all of them or none (checked row by row)
        if moments:
            earliest = min(moments)
            seconds = np.array([(t - earliest).total_seconds() for t in moments])
        else:
            seconds = np.array(times, dtype=np.float64)
            first, last = float(seconds.min()), float(seconds.max())
            with np.errstate(over="ignore"):
                seconds -= first
            if not np.isfinite(seconds).all():  # each time is finite, but 1e308 after -1e308 is not
                raise InputError(f"workload: {_describe(name)} spans more seconds than a float holds ({first:g} to "
                                 f"{last:g})", field=_FIELD, fix=TIME_FIX)
    arrays = [np.array(isl, dtype=np.int64), np.array(osl, dtype=np.int64), np.array(groups, dtype=np.int64)]
    if shared is not None:
        arrays.append(np.array(shared, dtype=np.int64))
    if seconds is not None:
        order = np.argsort(seconds, kind="stable")
        seconds = seconds[order]
        arrays = [a[order] for a in arrays]
    for array in (*arrays, seconds):
        if array is not None:
            array.flags.writeable = False
    return Trace(name, arrays[0], arrays[1], seconds, arrays[2], arrays[3] if shared is not None else None)


@lru_cache(maxsize=4)
def _read_bundled(name: str) -> Trace:
    file_name = bundled_traces()[name]
    return parse_trace_text(bundled_trace_text(name), name=name, kind=trace_kind(file_name, ""))


@lru_cache(maxsize=4)
def _read_file(path: str, source: str, _stamp: tuple[int, int]) -> Trace:
    """The trace at ``path``; ``_stamp`` (modification time, size) makes an edited file a new cache entry."""
    text = read_text(Path(path), what=_describe(source), field=_FIELD, limit=MAX_TRACE_BYTES,
                     fix=f"give a trace file of at most {MAX_TRACE_BYTES:,} bytes, or a bundled trace "
                         f"({', '.join(bundled_traces())})")
    return parse_trace_text(text, name=source, kind=trace_kind(path, text))


def read_trace(source: str) -> Trace:
    """The trace ``source`` names: a bundled trace (``azure-conv``, see :func:`bundled_traces`) or the path of a
    CSV or JSON Lines file (``~`` expanded, relative to the working directory). A file is read again when it
    changes; otherwise the last few traces read are kept.

    Raises:
        InputError: a missing, unreadable or oversized file, or a malformed trace (field ``workload``).
    """
    name = bundled_trace_name(source)
    if name is not None:
        return _read_bundled(name)
    fix = f"give a CSV or JSON Lines file, or a bundled trace ({', '.join(bundled_traces())})"
    if "\x00" in source or not source.strip():
        raise InputError("workload: the trace path is empty or holds a NUL byte", field=_FIELD, fix=fix)
    path = Path(os.path.expanduser(source))
    try:
        status = path.stat()
    except FileNotFoundError:
        raise InputError(f"workload: {_describe(source)} is neither a file nor a bundled trace", field=_FIELD,
                         fix=fix) from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InputError(f"workload: cannot read {_describe(source)}: {reason}", field=_FIELD, fix=fix) from None
    return _read_file(str(path.resolve()), source, (status.st_mtime_ns, status.st_size))
