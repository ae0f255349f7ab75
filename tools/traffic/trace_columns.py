"""What the columns of a request trace mean, and their cells read strictly.

Columns are recognised by name in any case, with ``_``, ``-`` and spaces ignored, as the exports of public
traces and benchmark tools spell them:

* prompt tokens: ``ContextTokens`` (Azure), ``input_tokens``, ``prompt_tokens``, ``input_length``,
  ``prompt_length``, ``input_len``, ``isl``, ``num_prompt_tokens``, ``input_lens`` (vLLM's saved results) ...
* output tokens: ``GeneratedTokens`` (Azure), ``output_tokens``, ``completion_tokens``, ``output_length``,
  ``output_len``, ``osl``, ``num_generated_tokens``, ``output_lens`` ...
* arrival time, optional: ``TIMESTAMP`` (Azure), ``timestamp``, ``arrival_time``, ``time``, ``request_time`` ...;
  seconds, or ISO datetimes; a name ending in ``_ms``, ``_us`` or ``_ns`` is in that unit.
* prefix group, optional: ``prefix_group``, ``session_id``, ``conversation_id``, ``group_id`` ...; any text.
* prefix tokens, optional: ``prefix_tokens``, ``cached_tokens``, ``prefix_len``, ``shared_prefix_tokens`` ...;
  the leading tokens of the prompt shared with earlier requests of its prefix group, 0 up to the prompt's length.

Other columns are ignored.

>>> recognise_columns(["TIMESTAMP", "ContextTokens", "GeneratedTokens"], "trace").isl
'ContextTokens'
>>> token_count("512.0")
512
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from shardplan.errors import InputError
from shardplan.limits import MAX_TRACE_TOKENS
from shardplan.text import counted, one_line

__all__ = ["TraceColumns", "recognise_columns", "token_count", "prefix_count", "arrival_time", "ROLE_SPELLINGS",
           "TOKEN_FIX", "TIME_FIX", "PREFIX_FIX"]

ROLE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "isl": ("contexttokens", "inputtokens", "prompttokens", "inputlength", "promptlength", "inputlen", "promptlen",
            "isl", "numinputtokens", "numprompttokens", "inputtokencount", "prompttokencount",
            "inputsequencelength", "inputlens", "promptlens"),
    "osl": ("generatedtokens", "outputtokens", "completiontokens", "outputlength", "outputlen", "osl",
            "numoutputtokens", "numcompletiontokens", "numgeneratedtokens", "outputtokencount",
            "completiontokencount", "outputsequencelength", "generationtokens", "outputlens"),
    "time": ("timestamp", "arrivaltime", "arrivaltimestamp", "arrival", "time", "requesttime", "starttime",
             "sendtime"),
    "group": ("prefixgroup", "prefixgroupid", "prefixid", "sessionid", "session", "conversationid",
              "conversation", "groupid"),
    "prefix": ("prefixtokens", "prefixlen", "prefixlength", "cachedtokens", "sharedprefixtokens", "sharedtokens",
               "numcachedtokens", "cachedprompttokens", "prefixtokencount"),
}
"""Column names of each role, squashed (lowercase, letters and digits only)."""

_LABELS = {"isl": "prompt-token", "osl": "output-token", "time": "arrival-time", "group": "prefix-group",
           "prefix": "prefix-token"}
_EXAMPLES = {"isl": "input_tokens (or ContextTokens, prompt_tokens, input_length)",
             "osl": "output_tokens (or GeneratedTokens, completion_tokens, output_length)"}
_TIME_UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "seconds": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_FIELD = "workload"


@dataclass(frozen=True)
class TraceColumns:
    """The columns a trace's rows are read from (names as the file spells them)."""

    isl: str
    osl: str
    time: str | None = None
    group: str | None = None
    time_scale: float = 1.0
    """Seconds per unit of a numeric time column (0.001 for ``*_ms``)."""
    prefix: str | None = None
    """Prompt tokens shared with the request's prefix group."""


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _role(name: str) -> tuple[str, float] | None:
    """The role of a column named ``name`` and, for a time column, the seconds per unit of its numbers."""
    key = _squash(name)
    for role, spellings in ROLE_SPELLINGS.items():
        if role == "time":
            for base in spellings:
                if key.startswith(base) and key[len(base):] in _TIME_UNITS:
                    return role, _TIME_UNITS[key[len(base):]]
        elif key in spellings:
            return role, 1.0
    return None


def recognise_columns(names: list[str], what: str) -> TraceColumns:
    """The columns among ``names`` that hold each role.

    Raises:
        InputError: no prompt-token or output-token column, or two columns of one role (field ``workload``).
    """
    found: dict[str, tuple[str, float]] = {}
    for name in names:
        recognised = _role(name)
        if recognised is None:
            continue
        role, scale = recognised
        if role in found:
            first, second = one_line(found[role][0], 80), one_line(name, 80)
            raise InputError(f"workload: {what} has two {_LABELS[role]} columns, '{first}' and '{second}'",
                             field=_FIELD, fix="keep one of them, or rename the other")
        found[role] = (name, scale)
    for required in ("isl", "osl"):
        if required not in found:
            listed = ", ".join(one_line(n, 40) for n in names[:12]) or "none"
            raise InputError(f"workload: {what} has no {_LABELS[required]} column (its columns: {listed})",
                             field=_FIELD, fix=f"name that column {_EXAMPLES[required]}")
    time = found.get("time")
    group = found.get("group")
    prefix = found.get("prefix")
    return TraceColumns(found["isl"][0], found["osl"][0], time[0] if time else None, group[0] if group else None,
                        time[1] if time else 1.0, prefix[0] if prefix else None)


TOKEN_FIX = f"give a whole number of tokens from 1 to {MAX_TRACE_TOKENS:,} on that row, or drop the row"
"""How to mend a cell :func:`token_count` refuses."""
TIME_FIX = "give every row a time: seconds (a number) or an ISO datetime such as 2023-11-16 18:15:46.68"
"""How to mend a cell :func:`arrival_time` refuses."""


def token_count(value: object) -> int:
    """A cell holding a count of tokens: a whole number from 1 to :data:`~shardplan.limits.MAX_TRACE_TOKENS`
    (``512``, ``"512"``, ``512.0``).

    Raises:
        ValueError: anything else (text, NaN, a fraction, zero, a negative count, a huge one); the message says
            what is wrong with the value, for the caller to place (row, column) and pair with :data:`TOKEN_FIX`.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, float | str):
        try:
            number = float(value)
        except ValueError:
            raise ValueError("is not a number of tokens") from None
        if not math.isfinite(number):
            raise ValueError("is not a finite number")
        if not number.is_integer():
            raise ValueError("is not a whole number of tokens")
        count = int(number)
    else:
        raise ValueError("is not a number of tokens")
    if count < 1:
        raise ValueError("is not a count of 1 or more tokens")
    if count > MAX_TRACE_TOKENS:
        raise ValueError(f"exceeds the limit of {MAX_TRACE_TOKENS:,} tokens")
    return count


PREFIX_FIX = "give the prompt tokens shared with earlier requests of its group: a whole number from 0 to the prompt's"
"""How to mend a cell :func:`prefix_count` refuses."""


def prefix_count(value: object, prompt: int) -> int:
    """A cell holding the prompt tokens a request shares with its prefix group: a whole number from 0 to ``prompt``.

    >>> prefix_count("0", 512), prefix_count(256.0, 512)
    (0, 256)

    Raises:
        ValueError: anything else; the message says what is wrong with the value (as :func:`token_count`).
    """
    if value in (0, "0", 0.0):
        return 0
    count = token_count(value)
    if count > prompt:
        raise ValueError(f"exceeds the prompt's {counted(prompt, 'token')}")
    return count


def arrival_time(value: object, scale: float = 1.0) -> float | datetime:
    """A cell holding an arrival time: a number (its seconds are the number times ``scale``) or an ISO datetime
    (a naive one read as UTC), returned as seconds or as an aware datetime.

    Raises:
        ValueError: a non-finite number, or anything that is neither a number nor an ISO datetime (the message
            says which, for the caller to place and pair with :data:`TIME_FIX`).
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            try:
                moment = datetime.fromisoformat(value.strip())
            except ValueError:
                raise ValueError("is neither seconds nor an ISO datetime") from None
            return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    else:
        raise ValueError("is not a time")
    if not math.isfinite(number):
        raise ValueError("is not a finite number")
    return number * scale
