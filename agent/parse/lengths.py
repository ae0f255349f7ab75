"""Reading prompt and output lengths given as more than one figure: a range drawn uniformly ("prompts of 1k to 8k
tokens", ``uniform:A,B``), a lognormal with its mean and cv, a mean with its standard deviation (drawn as the
lognormal of the same mean and cv, said in a note), and a fixed length said as such ("OSL fixed 256"), which a range
beside it contradicts.
"""

from __future__ import annotations

import re

from shardplan.agent.parse.text import _LEN, Findings, Scan, _tokens
from shardplan.text import counted

__all__ = ["read_length_ranges"]


_RANGE_TAIL = (
    rf"\s+(?:(?:are\s+|is\s+)?(?:drawn\s+)?(?:uniformly\s+|evenly\s+)?(?:distributed\s+)?between\s+(?P<a>{_LEN})\s*"
    rf"(?:tokens?\s*)?and\s*(?P<b>{_LEN})"
    rf"|(?:(?:are|is|of|from|ranging\s+from|range\s+from|vary\s+from|varying\s+from|vary|varying|range|ranging"
    r"|(?:are\s+|is\s+)?anywhere\s+from|(?:are\s+|is\s+)?from)\s+)?"
    rf"(?P<a2>{_LEN})\s*(?:tokens?\s*)?(?:to|-|–|up\s+to)\s*(?P<b2>{_LEN})"
    r"|(?:(?:are|is)\s+)?(?:drawn\s+)?uniform(?:ly)?(?:\s+distributed)?\s*(?:(?:in|on|over|from|between|within)\s+)?"
    rf"[\[(]?\s*(?P<a3>{_LEN})\s*(?:tokens?\s*)?(?:,|to|-|–|and)\s*(?P<b3>{_LEN})\s*[\])]?)(?:\s*tokens?)?(?!\w|\.\d)"
)
"""A range of lengths: "between A and B", "of A to B", "A-B", "vary 200 to 3000", "anywhere from A to B", "from A up to
B", "uniform in [A, B]", "uniformly A-B" (tokens, or 1k and the like)."""
_LENGTH_NOUNS = {
    "isl_dist": r"(?:prompts?|inputs?|(?:prompt|input)\s+lengths?|contexts?|isl)",
    "osl_dist": r"(?:outputs?|answers?|responses?|completions?|generations?|output\s+lengths?|osl)",
}
"""What prompts (``isl_dist``) and outputs (``osl_dist``) are called."""
_RANGES = {name: re.compile(rf"(?<![\w#]){noun}{_RANGE_TAIL}") for name, noun in _LENGTH_NOUNS.items()}
"""A range said of prompts or of outputs."""


_LOGNORMAL_TAIL = (
    r"\s+(?:(?:are|is|follows?|:|also|too)\s+){0,2}(?:an?\s+)?log[\s-]?normal(?:ly)?(?:\s+distributed|\s+distribution)?"
    r"\s*,?\s*(?:with\s+|around\s+|about\s+|of\s+)?(?:an?\s+)?(?:(?:mean|average)\s*(?:of|=|:)?\s*)?"
    rf"(?P<mean>{_LEN})\s*(?:tokens?)?"
    r"(?:\s*(?:,|and|with)?\s*(?:an?\s+)?(?:cv|coefficient\s+of\s+variation)\s*(?:of|=|:|is)?\s*"
    r"(?P<cv>\d+(?:\.\d+)?))?(?!\w|\.\d)"
)
"""A lognormal length: "lognormal with mean 3k and cv 0.5", "log-normal around 3k tokens" (a mean without a spread)."""
_LOGNORMALS = {name: re.compile(rf"(?<![\w#]){noun}{_LOGNORMAL_TAIL}") for name, noun in _LENGTH_NOUNS.items()}


_SD = r"(?:std(?:dev)?|sd|σ|sigma|standard\s+deviation)"
_NORMAL_FORMS = (
    rf"{{noun}}\s+(?:(?:are|is)\s+)?(?:~|≈)?\s*n\(\s*(?P<mean>{_LEN})\s*,\s*(?P<sd>{_LEN})\s*\)",
    rf"(?:avg|average|mean)\s+{{noun}}(?:\s+(?:length|size))?\s*(?:of|=|:|is)?\s*(?P<mean>{_LEN})\s*(?:tokens?|toks?)?"
    rf"\s*[(,]?\s*(?:with\s+)?(?:an?\s+)?{_SD}\s*(?:of|=|:)?\s*(?P<sd>{_LEN})\s*(?:tokens?|toks?)?\s*\)?",
    rf"{{noun}}\s+(?:(?:are|is)\s+)?normal(?:ly)?(?:\s+distributed)?\s*,?\s*(?:with\s+)?(?:mean|average)\s*(?:of|=|:)?\s*"
    rf"(?P<mean>{_LEN})\s*(?:tokens?)?\s*(?:,|and)?\s*(?:an?\s+)?{_SD}\s*(?:of|=|:)?\s*(?P<sd>{_LEN})",
    rf"{{noun}}\s+(?:(?:are|is)\s+)?(?P<mean>{_LEN})\s*(?:±|\+/-)\s*(?P<sd>{_LEN})",
)
_NORMALS = {name: [re.compile(rf"(?<![\w#])(?:{form.format(noun=noun)})(?:\s*tokens?)?(?!\w|\.\d)")
                   for form in _NORMAL_FORMS]
            for name, noun in _LENGTH_NOUNS.items()}
"""Lengths given by their mean and standard deviation: "outputs ~N(512, 128)", "avg prompt 3000 tok (std 600)",
"prompts normally distributed with mean 2k and sd 500", "outputs 300 ± 50"."""
_EXACT = {name: re.compile(rf"(?<![\w#])(?:(?:every|each|all)\s+{noun}\s+(?:is|are)\s+exactly\s+(?P<n>{_LEN})\s*tokens?"
                           rf"|{noun}\s+(?:(?:is|are)\s+)?(?:fixed|held|pinned)\s+(?:(?:at|to)\s+)?(?P<n2>{_LEN})"
                           r"(?:\s*tokens?)?(?!\w|\.\d))")
          for name, noun in _LENGTH_NOUNS.items()}
"""A fixed length said as such ("every prompt is exactly 2048 tokens", "OSL fixed 256", "inputs fixed at 1024"), which a
range beside it contradicts."""


def read_length_ranges(scan: Scan, found: Findings) -> None:
    """Prompt or output lengths given as a range, drawn uniformly from it (``--isl-dist uniform:A,B``): "prompts of
    1k to 8k tokens", "outputs between 100 and 500 tokens", "answers 100-500 tokens"; or as a lognormal with its
    mean and cv (``lognormal:mean=M,cv=C``): "prompt lengths are lognormal with mean 3k and cv 0.5" (a mean alone
    is the length, with a note asking for the spread).

    >>> found = Findings()
    >>> read_length_ranges(Scan("prompts of 1k to 8k tokens, outputs 100-500 tokens"), found)
    >>> found.values
    {'isl_dist': ['uniform:1024,8192'], 'osl_dist': ['uniform:100,500']}
    """
    for name, pattern in _EXACT.items():
        for match in scan.take(pattern):
            found.add("isl" if name == "isl_dist" else "osl", _tokens(match.group("n") or match.group("n2")),
                      match.group())
    for name, patterns in _NORMALS.items():
        for match in (m for pattern in patterns for m in scan.take(pattern)):
            _add_normal(found, name, match)
    for name, pattern in _LOGNORMALS.items():
        for match in scan.take(pattern):
            mean, cv = _tokens(match.group("mean")), match.group("cv")
            if mean < 1:
                continue
            if cv is not None and 0 < float(cv) <= 20:
                found.add(name, f"lognormal:mean={mean},cv={float(cv):g}", match.group())
                continue
            length = name.removesuffix("_dist").replace("_", "")  # isl or osl: the mean, as a fixed length
            found.add(length, mean, match.group())
            found.notes.append(f"Read '{match.group().strip()}' as a mean {length.upper()} of "
                               f"{counted(mean, 'token')}: give "
                               "its spread (a cv from above 0 to 20, e.g. 'cv 0.8') to draw lengths around it.")
    for name, pattern in _RANGES.items():
        for match in scan.take(pattern):
            ends = (match.group("a") or match.group("a2") or match.group("a3"),
                    match.group("b") or match.group("b2") or match.group("b3"))
            low, high = sorted(_tokens(end) for end in ends)
            if low < 1 or low == high:
                found.notes.append(f"Ignored '{match.group().strip()}': a range of lengths runs from one length to "
                                   "a longer one.")
                continue
            found.add(name, f"uniform:{low},{high}", match.group())


def _add_normal(found: Findings, name: str, match: re.Match[str]) -> None:
    """Lengths of a mean and a standard deviation, drawn as the lognormal of that mean and cv, with a note saying so
    (shardplan draws lognormal or uniform lengths)."""
    mean, sd = _tokens(match.group("mean")), _tokens(match.group("sd"))
    if mean < 1 or not 0 < sd / mean <= 20:
        found.notes.append(f"Ignored '{match.group().strip()}': a spread of lengths needs a mean of at least one token "
                           "and a standard deviation above 0 and at most 20 times it.")
        return
    cv = round(sd / mean, 3)
    found.add(name, f"lognormal:mean={mean},cv={cv:g}", match.group())
    found.notes.append(f"Read '{match.group().strip()}' as lengths of mean {mean} and standard deviation {sd}, drawn "
                       f"as the lognormal of that mean and cv {cv:g}: shardplan draws lognormal or uniform lengths, "
                       "not normal ones.")
