"""Follow-ups that edit the thread's last request relative to itself: "double the batch", "halve the rate",
"drop the TTFT target", "triple the GPUs".

A scaling edit sets the field to the earlier value times the factor (what the message says over the earlier
request, like any other value it says); a drop clears the field, so the default or the search's choice applies.
An edit of a field the thread never set is noted, not guessed. "Switch to H200" needs no edit: a value said in a
follow-up replaces the earlier one.

>>> from shardplan.agent.parse.text import Findings, Scan
>>> found = Findings()
>>> read_edits(Scan("double the batch and drop the ttft target"), found)
>>> found.values["edits"]
[('batch', 'double'), ('ttft_ms', 'drop')]
"""

from __future__ import annotations

import re
from typing import Any

from shardplan.agent.parse.text import Findings, Scan, _matched_name, _named_alternatives

__all__ = ["read_edits", "apply_edits"]

_FACTORS = {"double": 2.0, "twice": 2.0, "triple": 3.0, "quadruple": 4.0, "halve": 0.5, "half": 0.5}
_FIELDS = {
    "batch": r"batch(?:[\s-]*size)?|concurrency|concurrent\s+users|users|clients",
    "rate": r"(?:request\s+|arrival\s+)?rate|qps|rps|traffic|load",
    "isl": r"prompts?(?:[\s-]*(?:length|len|size))?|inputs?(?:[\s-]*(?:length|len))?|isl|context(?:[\s-]*length)?",
    "osl": r"outputs?(?:[\s-]*(?:length|len))?|osl|generations?(?:[\s-]*length)?|answers?(?:[\s-]*length)?"
    r"|max[\s-]*tokens",
    "gpus": r"gpus?(?:[\s-]*count)?|number\s+of\s+gpus",
    "nodes": r"nodes?|number\s+of\s+nodes",
    "ttft_ms": r"ttft(?:[\s-]*(?:target|bound|limit|slo))?|first[\s-]*token\s+(?:target|bound|limit)",
    "tpot_ms": r"tpot(?:[\s-]*(?:target|bound|limit|slo))?|itl(?:[\s-]*target)?",
    "targets": r"(?:latency\s+)?targets|slos",
}
_WHAT = _named_alternatives(_FIELDS)
_EDIT = re.compile(
    rf"(?<![\w#])(?P<op>double|triple|quadruple|halve|twice|half|drop|remove|clear|forget|lose|ignore|no\s+more)\s+"
    rf"(?:the\s+|my\s+|our\s+|that\s+|as\s+many\s+|as\s+much\s+)?(?:{_WHAT})(?![\w])(?:\s+again)?"
    r"(?!\s+(?:is|are|was|were|gets?|got|being|comes?)\s)"
)
"""An edit of an earlier value ("double the rate", "half the prompt length"); not a share of something said about it
("half the prompt was cached" is a prefix hit)."""
_LABELS = {"batch": "batch", "rate": "request rate", "isl": "prompt length", "osl": "output length",
           "gpus": "GPU count", "nodes": "node count", "ttft_ms": "TTFT target", "tpot_ms": "TPOT target"}
_WHOLE = ("batch", "isl", "osl", "gpus", "nodes")
"""Fields that are whole numbers."""


def read_edits(scan: Scan, found: Findings) -> None:
    """Edits of the earlier request, recorded under ``edits`` as (field, operation) and blanked."""
    for match in scan.take(_EDIT):
        op = re.sub(r"\s+", " ", match.group("op"))
        op = "drop" if op in ("remove", "clear", "forget", "lose", "ignore", "no more") else op
        name = _matched_name(match, _FIELDS)
        for field in ("ttft_ms", "tpot_ms") if name == "targets" else (name,):
            found.add("edits", (field, op))
            found.said.setdefault(field, match.group())


def apply_edits(said: dict[str, Any], before: dict[str, Any], found: Findings) -> set[str]:
    """Scaling edits written into ``said`` from the ``before`` values; returns the fields to drop.

    A value the message also says outright wins over an edit of it ("halve the batch, batch 16" is 16).
    """
    dropped = set()
    for field, op in found.values.get("edits", []):
        label = _LABELS[field]
        if op == "drop":
            if before.get(field) is not None:
                found.notes.append(f"Dropped the {label} ({before[field]:g}), as asked.")
            dropped.add(field)
            continue
        if said.get(field) is not None:
            continue
        if before.get(field) is None:
            found.notes.append(f"There is no {label} to {op}: say the value.")
            continue
        value = before[field] * _FACTORS[op]
        said[field] = max(1, round(value)) if field in _WHOLE else round(value, 3)
        found.notes.append(f"Read '{op} the {label}' as {said[field]:g} (was {before[field]:g}).")
    return dropped
