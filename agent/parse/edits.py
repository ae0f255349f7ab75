"""Follow-ups that edit the thread's last request relative to itself: "double the batch", "halve the rate",
"drop the TTFT target", "triple the GPUs", "outputs 4x longer", "10x the traffic".

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

_FACTORS = {"double": 2.0, "twice": 2.0, "triple": 3.0, "quadruple": 4.0, "halve": 0.5, "half": 0.5,
            "doubled": 2.0, "tripled": 3.0, "halved": 0.5, "doubles": 2.0, "triples": 3.0, "quadruples": 4.0,
            "quadrupled": 4.0, "halves": 0.5}
_FIELDS = {
    "batch": r"batch(?:[\s-]*size)?|concurrency|concurrent\s+users|users|clients",
    "rate": r"(?:request\s+|arrival\s+)?rate|qps|rps|traffic|load",
    "isl": r"prompts?(?:[\s-]*(?:length|len|size))?|inputs?(?:[\s-]*(?:length|len))?|isl|context(?:[\s-]*length)?",
    "osl": r"outputs?(?:[\s-]*(?:length|len))?|osl|generations?(?:[\s-]*length)?|answers?(?:[\s-]*length)?"
    r"|max[\s-]*tokens",
    "gpus": r"gpus?(?:[\s-]*count)?|number\s+of\s+gpus|rack|cluster|fleet",
    "nodes": r"nodes?|number\s+of\s+nodes",
    "ttft_ms": r"ttft(?:[\s-]*(?:target|bound|limit|slo))?|first[\s-]*token\s+(?:target|bound|limit)",
    "tpot_ms": r"tpot(?:[\s-]*(?:target|bound|limit|slo))?|itl(?:[\s-]*target)?",
    "targets": r"(?:latency\s+)?targets|slos",
}
_WHAT = _named_alternatives(_FIELDS)
_EDIT = re.compile(
    rf"(?<![\w#])(?P<op>doubled|tripled|halved|double|triple|quadruple|halve|twice|half|drop|remove|clear|forget|lose"
    r"|ignore|no\s+more)\s+"
    rf"(?:the\s+|my\s+|our\s+|that\s+|as\s+many\s+|as\s+much\s+)?(?:{_WHAT})(?![\w])(?:\s+again)?"
    r"(?!\s+(?:is|are|was|were|gets?|got|being|comes?)\s)"
)
"""An edit of an earlier value ("double the rate", "half the prompt length"); not a share of something said about it
("half the prompt was cached" is a prefix hit)."""
_ANY_FIELD = "|".join(f"(?:{words})" for words in _FIELDS.values())
_TIMES = r"(?P<{n}>\d+(?:\.\d+)?)\s*(?:x|×|times)"
_MORE = r"longer|larger|bigger|higher|more|as\s+long|as\s+large|as\s+big|as\s+high|as\s+many|as\s+much"
_LESS = r"shorter|smaller|lower|fewer|less"
_SCALED = re.compile(
    rf"(?<![\w#])(?:the\s+)?(?P<what>{_ANY_FIELD})\s+(?:(?:were|are|was|is|got|get|became|become|grew|grow)\s+)?"
    rf"{_TIMES.format(n='n')}\s+(?:(?P<more>{_MORE})|(?P<less>{_LESS}))(?![\w])(?!\s+than\b)"
    rf"|(?<![\w#.])(?:make\s+it\s+)?{_TIMES.format(n='n2')}\s+(?:more\s+|the\s+|that\s+|this\s+|as\s+many\s+|as\s+much\s+)?"
    rf"(?P<what2>{_ANY_FIELD})(?![\w])(?!\s+(?:is|are|was|were|gets?|got|being|comes?)\s)"
    rf"|(?<![\w#])(?:the\s+)?(?P<what3>{_ANY_FIELD})\s+(?:(?:were|are|was|is|got|get|became|become)\s+)?"
    r"(?P<word>twice|half)\s+as\s+(?:long|large|big|high|many|much)(?![\w])"
)
"""A scaling by a figure: "outputs 4x longer", "what if the prompts were 3 times shorter", "10x the traffic", "4x more
users", "outputs twice as long"."""
_BY_VERB = re.compile(
    rf"(?<![\w#])(?:the\s+|our\s+|my\s+)?(?P<what>{_ANY_FIELD})\s+(?:(?:were|was|is|are|got|gets|get)\s+)?"
    r"(?P<verb>doubles|triples|quadruples|halves|doubled|tripled|quadrupled|halved)(?![\w])"
)
"""A scaling said by its verb, the field first: "what if traffic doubles?", "the prompts halved"."""
_BY_PERCENT = re.compile(
    r"(?<![\w#])(?P<verb>bump|raise|increase|grow|boost|up|cut|lower|reduce|decrease|trim|shrink)\s+"
    rf"(?:the\s+|my\s+|our\s+)?(?P<what>{_ANY_FIELD})\s+(?:by\s+)?(?P<pct>\d+(?:\.\d+)?)\s*%"
)
"""A scaling by a share: "bump the rate 50%", "cut the prompts by 25%"."""
_LABELS = {"batch": "batch", "rate": "request rate", "isl": "prompt length", "osl": "output length",
           "gpus": "GPU count", "nodes": "node count", "ttft_ms": "TTFT target", "tpot_ms": "TPOT target"}
_WHOLE = ("batch", "isl", "osl", "gpus", "nodes")
"""Fields that are whole numbers."""


def read_edits(scan: Scan, found: Findings) -> None:
    """Edits of the earlier request, recorded under ``edits`` as (field, operation) and blanked."""
    for match in scan.take(_BY_PERCENT):
        share = float(match.group("pct")) / 100
        down = match.group("verb") in ("cut", "lower", "reduce", "decrease", "trim", "shrink")
        factor = 1 - share if down else 1 + share
        if factor <= 0:
            continue
        _add_scaling(found, match.group("what"), factor, match.group())
    for match in scan.take(_BY_VERB):
        _add_scaling(found, match.group("what"), _FACTORS[match.group("verb")], match.group())
    for match in scan.take(_SCALED):
        word = match.group("word")
        factor = _FACTORS[word] if word else float(match.group("n") or match.group("n2"))
        if factor <= 0:
            continue
        factor = 1.0 / factor if match.group("less") else factor
        _add_scaling(found, match.group("what") or match.group("what2") or match.group("what3"), factor, match.group())
    for match in scan.take(_EDIT):
        op = re.sub(r"\s+", " ", match.group("op"))
        op = "drop" if op in ("remove", "clear", "forget", "lose", "ignore", "no more") else op
        name = _matched_name(match, _FIELDS)
        for field in ("ttft_ms", "tpot_ms") if name == "targets" else (name,):
            found.add("edits", (field, op))
            found.said.setdefault(field, match.group())


def _add_scaling(found: Findings, what: str, factor: float, words: str) -> None:
    """Record a scaling by ``factor`` of the field ``what`` names (both targets for "targets")."""
    name = next(field for field, pattern in _FIELDS.items() if re.fullmatch(pattern, what))
    for field in ("ttft_ms", "tpot_ms") if name == "targets" else (name,):
        found.add("edits", (field, f"x{factor:g}"))
        found.said.setdefault(field, words)


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
            verb = f"scale by {float(op[1:]):g}" if op.startswith("x") else op
            found.notes.append(f"There is no {label} to {verb}: say the value.")
            continue
        factor = float(op[1:]) if op.startswith("x") else _FACTORS[op]
        value = before[field] * factor
        said[field] = max(1, round(value)) if field in _WHOLE else round(value, 3)
        words = f"{factor:g} times the {label}" if op.startswith("x") else f"{op} the {label}"
        found.notes.append(f"Read '{words}' as {said[field]:g} (was {before[field]:g}).")
    return dropped
