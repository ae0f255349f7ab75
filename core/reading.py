"""Reading untrusted JSON and YAML text, and echoing it back, without tracebacks.

The standard parsers fail in ways that are not input errors: deep nesting raises RecursionError, a
5,000-digit integer raises a bare ValueError, ``Infinity`` and ``1e999`` become infinite floats that
overflow the cost model later, and YAML's messages span several lines. These helpers turn each into an
:class:`~shardplan.errors.InputError` of one line that names the field and the fix, and

>>> parse_json_text('{"layers": 2}', what="config.json", field="model")
{'layers': 2}
>>> parse_json_text('{"layers": Infinity}', what="config.json", field="model")
Traceback (most recent call last):
...
shardplan.errors.InputError: config.json is not valid JSON: Infinity is not a finite number; ...
"""

from __future__ import annotations

import math
import stat
from pathlib import Path
from typing import Any

from shardplan.errors import InputError
from shardplan.limits import MAX_CONFIG_BYTES, MAX_INT_DIGITS, MAX_YAML_VALUES
from shardplan.text import counted, one_line

__all__ = ["load_json_strict", "parse_json_text", "parse_yaml_text", "read_text", "finite_numbers", "read_int",
           "expanded_values"]

class _Refused(ValueError):
    """A value the JSON hooks refuse; its message is the reason."""


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a finite number")


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-')):,} digits is too large")
    return int(text)


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"{one_line(text, 40)} is not a finite number")
    return value


def load_json_strict(text: str | bytes, *, what: str = "the input", field: str | None = None,
                     fix: str = "give valid JSON with finite numbers of at most 19 digits") -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity``, ``1e999`` and integers over
    :data:`~shardplan.limits.MAX_INT_DIGITS` digits; other errors (JSONDecodeError, RecursionError) pass.

    Raises:
        InputError: a refused number, named with ``what``.
    """
    import json

    try:
        return json.loads(text, parse_constant=_constant, parse_int=_integer, parse_float=_number)
    except _Refused as exc:
        raise InputError(f"{what} is not valid JSON: {exc}", field=field, fix=fix) from None


def parse_json_text(text: str | bytes, *, what: str, field: str,
                    fix: str = "give valid JSON with finite numbers of at most 19 digits") -> Any:
    """Parsed JSON of ``text`` (UTF-8 when bytes; named ``what`` in messages); refuses non-finite numbers,
    integers over :data:`~shardplan.limits.MAX_INT_DIGITS` digits and nesting Python cannot recurse into.

    Raises:
        InputError: ``field`` names what was given; the message says where the text is broken.
    """
    import json

    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return load_json_strict(text, what=what, field=field, fix=fix)
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})", field=field,
                         fix="save it as UTF-8 JSON") from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply", field=field, fix="give a flat JSON document") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                         field=field, fix=fix) from None
    except InputError:
        raise
    except ValueError as exc:  # int() past Python's digit limit, and similar conversions
        raise InputError(f"{what} is not valid JSON: {one_line(str(exc), 120)}", field=field, fix=fix) from None


def finite_numbers(data: Any, where: str, field: str) -> Any:
    """``data`` when every number in it is finite and every integer fits 64 bits; else an InputError naming
    the key path (``where.key[0]``)."""
    stack = [(data, where)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            stack.extend((v, f"{path}.{one_line(str(k), 60)}") for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{path} is {value}, not a finite number", field=path, fix="give a finite number")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
            raise InputError(f"{path} is an integer too large to be real", field=path, fix="give a smaller number")
    return data


def expanded_values(data: Any, limit: int = MAX_YAML_VALUES) -> int:
    """How many values ``data`` holds with every shared list or mapping counted at each place it appears (what
    a walk over it visits), counting each shared one once: a YAML alias is one object used many times.

    Raises:
        ValueError: past ``limit`` values, or a list or mapping that holds itself (``&a [*a]``); the message
            says which.
    """
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, done = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        key = id(value)
        children = list(value.values()) if isinstance(value, dict) else value
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[key] > limit:
                raise _Refused(f"it expands to over {counted(limit, 'value', spec=',')} (aliases counted at each use)")
            continue
        if key in sizes:
            continue
        if key in open_:
            raise _Refused("it holds itself through an alias")
        open_.add(key)
        stack.append((value, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)))
    return sizes.get(id(data), 1)


def parse_yaml_text(text: str, *, what: str, field: str, fix: str) -> Any:
    """Parsed YAML of ``text`` (safe loader, libyaml's when installed), with aliases expanded to at most
    :data:`~shardplan.limits.MAX_YAML_VALUES` values and numbers checked by :func:`finite_numbers`.

    Raises:
        InputError: one line: the parser's problem and its line and column, too deep a nesting, or too many
            values once aliases are expanded.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506  (a safe loader: libyaml's or the Python one)
    except RecursionError:
        raise InputError(f"{what} is nested too deeply", field=field, fix=fix) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        place = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = one_line(str(exc.problem or exc.context or "unreadable YAML"), 160)
        if "nesting depth" in problem:  # libyaml stops at its own depth, where the Python parser recurses
            raise InputError(f"{what} is nested too deeply{place}", field=field, fix=fix) from None
        raise InputError(f"{what} is not valid YAML: {problem}{place}", field=field, fix=fix) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise InputError(f"{what} is not valid YAML: {one_line(str(exc), 160)}", field=field, fix=fix) from None
    try:
        expanded_values(data)
    except _Refused as exc:
        raise InputError(f"{what} is refused: {exc}", field=field,
                         fix=f"{fix}, with its values written out rather than nested aliases") from None
    return finite_numbers(data, field, field)


def read_int(text: str, *, field: str, what: str, fix: str) -> int:
    """The whole number ``text`` (digits only), refusing more than
    :data:`~shardplan.limits.MAX_INT_DIGITS` digits before converting, so no input reaches Python's
    integer-string limit.

    Raises:
        InputError: not digits, or too many; the message names ``what`` and ``field``.

    >>> read_int("12", field="tp", what="tp=12", fix="give a degree")
    12
    """
    digits = text.strip()
    if not digits.isdigit() or not digits.isascii():
        raise InputError(f"{what} is not a whole number", field=field, fix=fix)
    if len(digits) > MAX_INT_DIGITS:
        raise InputError(f"{one_line(what, 60)} has {len(digits):,} digits, more than {MAX_INT_DIGITS}", field=field,
                         fix=fix)
    return int(digits)


def read_text(path: Path, *, what: str, field: str, fix: str, limit: int = MAX_CONFIG_BYTES) -> str:
    """The UTF-8 text of ``path``, refusing files over ``limit`` bytes before reading them, and anything but a
    regular file (a FIFO, ``/dev/zero``) without opening it; never more than ``limit`` bytes are read.

    Raises:
        InputError: the file is missing, unreadable, too large, not a regular file or not text.
    """
    try:
        status = path.stat()
        size = status.st_size
        if stat.S_ISREG(status.st_mode) and size <= limit:
            with path.open("rb") as handle:
                data = handle.read(limit + 1)  # a file that grew since stat() is still read no further
            size = max(size, len(data))
            if len(data) <= limit:
                return data.decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} does not exist", field=field, fix=fix) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start:,})", field=field,
                         fix=fix) from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InputError(f"cannot read {what}: {reason}", field=field, fix=fix) from None
    # Raised outside the try: an InputError is a ValueError, which the handler above would rename.
    if stat.S_ISDIR(status.st_mode):
        raise InputError(f"cannot read {what}: it is a folder", field=field, fix=fix)
    if not stat.S_ISREG(status.st_mode):
        # A FIFO would block until a writer comes, /dev/zero never ends, and stat() gives neither a size.
        raise InputError(f"cannot read {what}: it is not a regular file (a pipe, a device or a socket)",
                         field=field, fix=fix)
    raise InputError(f"{what} is {size:,} bytes, over the limit of {limit:,}", field=field, fix=fix)
