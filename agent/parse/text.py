"""The text primitives of the request parser: number words, regex building blocks, the scan that
blanks out what a reader consumed, and what the readers found."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

# ---------------------------------------------------------------------------------------------------------
# Shared pieces of patterns

_NUMBER_WORDS = {
    "a single": 1,
    "a pair of": 2,
    "pair of": 2,
    "single": 1,
    "an": 1,
    "a": 1,
    "one": 1,
    "dual": 2,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "thirty-two": 32,
    "sixty-four": 64,
}
_START = r"(?<![\w.#-])"
_WORDS = "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in sorted(_NUMBER_WORDS, key=len, reverse=True))
_COUNT = rf"(?:(?:{_WORDS})(?![a-z])|(?<![\d.])\d+(?![\d.k]))"
"""A whole count: digits or a number word; never the 8 of 8k or 8.5."""
_LEN = r"(?<![\d.])\d+(?:\.\d+)?[km]?(?![a-z\d])"
"""A token length: 2048, 8k, 1.5k. Numbers are only read from their first digit, which keeps every
pattern linear in a long run of digits."""
_ABOUT = r"(?:(?:~|≈|about|around|roughly|approx(?:imately|\.)?|circa)\s*)?"
"""An approximate figure: "hit rate ~70%", "acceptance about 0.7"."""
_DUR = r"((?<![\d.])\d+(?:\.\d+)?)\s*(ms|msecs?|millis(?:econds?)?|milliseconds?|s|secs?|seconds?)(?![a-z])"
_UPPER = (
    r"under|below|less\s+than|lower\s+than|at\s+most|within|no\s+more\s+than|not\s+above|up\s+to"
    r"|max(?:imum)?|<=|<|≤"
)
_LOWER = r"over|above|more\s+than|greater\s+than|longer\s+than|at\s+least|>=|>|≥"
_CMP = rf"(?:{_UPPER}|{_LOWER})"
_PER_TOKEN = r"(?:per|/|a|each|every|between)\s*(?:output\s+|generated\s+|decoded?\s+|new\s+)?tokens?\b"
_REJECTED = re.compile(
    rf"(?:instead\s+of|rather\s+than|replac(?:e|ing)|swap(?:ping)?(?:\s+out)?|from|not)\s+(?:the\s+)?"
    rf"(?:{_COUNT}\s*[x×]?\s*)?$"
)
"""What comes right before a value the message drops: "instead of H100", "from 8 H100s"."""


Intent = Literal["plan", "why_not", "compare", "explain"]
"""What the message asks for: a plan, why a technique was not used, a comparison, an explanation."""

_LABELS = {
    "model": "models",
    "gpu": "GPU types",
    "gpus": "GPU counts",
    "nodes": "node counts",
    "gpus_per_node": "GPUs-per-node figures",
    "isl": "prompt lengths",
    "osl": "output lengths",
    "isl_dist": "prompt-length ranges",
    "osl_dist": "output-length ranges",
    "batch": "batch sizes",
    "arrival": "arrival processes",
    "rate": "request rates (requests/s)",
    "trace": "request traces",
    "ttft_ms": "TTFT targets (ms)",
    "tpot_ms": "TPOT targets (ms)",
    "slo_percentile": "percentiles",
    "objective": "objectives",
    "weight_dtype": "weight formats",
    "kv_dtype": "KV-cache formats",
    "disaggregated": "answers on disaggregation",
    "spec_method": "speculative-decoding drafters",
    "spec_tokens": "draft-token counts",
    "spec_accept": "acceptances (accepted draft tokens per step)",
    "prefix_hit": "prefix-cache hit rates",
    "prefix_tokens": "shared-prefix lengths",
    "gpu_price": "GPU prices ($ per GPU-hour)",
}


def _named_alternatives(patterns: dict[str, str]) -> str:
    """One alternation with a named group per entry, ``(?P<name>pattern)|...``, so that a match says which
    entry it is (:func:`_matched_name`)."""
    return "|".join(f"(?P<{name}>{pattern})" for name, pattern in patterns.items())


def _matched_name(match: re.Match[str], names: Iterable[str]) -> str:
    """The first of ``names`` whose group took part in ``match`` (of a :func:`_named_alternatives` pattern)."""
    return next(name for name in names if match.group(name) is not None)


def _number(match: re.Match[str], *names: str) -> str:
    """The text of the first of ``names`` that matched (one pattern may hold several alternatives' groups)."""
    return next(match.group(n) for n in names if match.groupdict().get(n) is not None)


def _count(token: str) -> int:
    """A count phrase as a number: ``"two"`` → 2, ``"a single"`` → 1, ``"16"`` → 16."""
    token = re.sub(r"\s+", " ", token.strip())
    return _NUMBER_WORDS[token] if token in _NUMBER_WORDS else int(token)


def _tokens(token: str) -> int:
    """A length phrase in tokens: ``"8k"`` → 8192 (k = 1024), ``"1.5k"`` → 1536, ``"4096"`` → 4096."""
    scale = {"k": 1024, "m": 1024 * 1024}.get(token[-1], 1)
    return round(float(token.rstrip("km")) * scale)


def _ms(value: str, unit: str) -> float:
    """A duration in milliseconds."""
    return float(value) * (1.0 if unit.startswith("m") else 1000.0)


def _squash(text: str) -> str:
    """Lowercase with spaces, dots, hyphens, underscores and slashes removed: how model names are compared."""
    return re.sub(r"[\s._/-]+", "", text.lower())


_SECONDS_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                  "ten": 10}
_WORD_DURATIONS = (
    (re.compile(r"(?<![\w#])half\s+a\s+sec(?:ond)?(?![\w])"), "500 ms"),
    (re.compile(r"(?<![\w#])sub[\s-]*second(?![\w])"), "under 1 s"),
    (re.compile(r"(?<![\w#])half\s+a\s+million(?![\w])"), "0.5m"),
    (re.compile(r"(?<![\w#])(?:a|one)\s+million(?![\w])"), "1m"),
    (re.compile(r"(?<![\w#])a\s+quarter\s+(?:of\s+)?a\s+sec(?:ond)?(?![\w])"), "250 ms"),
    (re.compile(rf"(?<![\w#])({'|'.join(_SECONDS_WORDS)})\s+seconds(?![\w])"),
     lambda m: f"{_SECONDS_WORDS[m.group(1)]} s"),
    # "a second" is a duration only after words that bound one: "a second node" is not
    (re.compile(r"(?<![\w#])(within|under|below|than|about|around|max|most)\s+(?:a|one)\s+sec(?:ond)?(?![\w])"),
     r"\1 1 s"),
)
"""Durations and counts said in words ("first token within half a second", "under two seconds", "sub-second", "half a
million requests"), as figures."""


def _plain_figure(match: re.Match[str]) -> str:
    """``2e3`` as ``2000``; a figure that is no whole number below a trillion stays as written."""
    value = float(match.group(1)) * 10 ** int(match.group(2))
    return str(int(value)) if value.is_integer() and value < 1e12 else match.group()


def _normalise(text: str) -> str:
    """Lowercase, plain dashes and spaces, thousands separators dropped ("1,000" → "1000"), durations said in
    words as figures ("half a second" → "500 ms").

    >>> _normalise("TTFT within half a second, TPOT under a second, a second node, two seconds")
    'ttft within 500 ms, tpot under 1 s, a second node, 2 s'
    """
    text = text.lower().replace("\u00a0", " ")
    text = re.sub(r"[\u2010-\u2015\u2212]", "-", text)
    for pattern, figure in _WORD_DURATIONS:
        text = pattern.sub(figure, text)
    text = re.sub(r"(?<=[\dk])\s*(?:->|→|=>)\s*(?=\d)", "/", text)  # "2k->512": a prompt/output pair
    # "16 384-token prompts": a thin-space thousands separator before a token length
    text = re.sub(r"(?<![\d.])(\d{1,3}) (\d{3})(?=[\s-]*tok)", r"\1\2", text)
    # "1e3 rps", "2e3 in / 5e2 out": figures in scientific notation, where they are whole numbers a reader can take
    text = re.sub(r"(?<![\w.])(\d+(?:\.\d+)?)e\+?(\d{1,2})(?![\w.])", _plain_figure, text)
    # "half a node", "half an HGX H100": four GPUs of an eight-GPU node
    text = re.sub(r"(?<![\w#])half\s+an?\s+(?:(?:hgx|dgx)\s+)?(?:node|box|server|machine)(?![\w])", "4 gpus", text)
    text = re.sub(r"(?<![\w#])half\s+an?\s+(?:hgx|dgx)\s+(?=[a-z]+\d)", "4 ", text)
    # "8 k prompts": a thousand written apart from its figure
    text = re.sub(r"(?<=\d)\s+k(?=\s+(?:tokens?|toks?|prompts?|inputs?|outputs?|in|out|context|ctx|completions?)\b)",
                  "k", text)
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)


# ---------------------------------------------------------------------------------------------------------
# Reading state


class Scan:
    """The message being read. What a reader takes is blanked out with ``#`` so no later reader sees it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def take(self, pattern: re.Pattern[str]) -> list[re.Match[str]]:
        """Every match of ``pattern`` in what is left, blanked out."""
        matches = list(pattern.finditer(self.text))
        for match in matches:
            self.blank(match.start(), match.end())
        return matches

    def blank(self, start: int, end: int) -> None:
        """Blank out ``text[start:end]``."""
        self.text = self.text[:start] + "#" * (end - start) + self.text[end:]


@dataclass
class Findings:
    """Values found per field, in reading order, with the notes and contradictions met on the way."""

    comparing: bool = False
    original: str = ""
    """The message as written (its case kept), for the words a reader must echo as written: a file's path."""
    values: dict[str, list[Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)
    said: dict[str, str] = field(default_factory=dict)
    """Field -> the words its (first) value was read from, echoed in the answer."""

    def add(self, name: str, value: Any, words: str | None = None) -> None:
        """Record one value of field ``name``, and the words it came from when given."""
        self.values.setdefault(name, []).append(value)
        if words:  # each constraint has its own words; any other field keeps those of its first value
            self.said.setdefault(f"constraint {value}" if name == "constraints" else name, words.strip())

    def first(self, name: str) -> Any:
        """The field's first value; two different values become a contradiction (a note when comparing)."""
        seen = list(dict.fromkeys(self.values.get(name, [])))
        if len(seen) > 1:
            listed = " and ".join(str(v) for v in seen)
            if self.comparing and name in ("model", "gpu"):
                self.notes.append(f"Comparing {listed}; planning {seen[0]} first.")
            else:
                self.contradictions.append(f"The request gives two {_LABELS[name]}: {listed}; say which one you mean.")
        return seen[0] if seen else None


def _add_positive(found: Findings, name: str, value: float, phrase: str) -> None:
    """Record ``value`` unless it is zero, which no field accepts."""
    if value > 0:
        found.add(name, value, phrase)
    else:
        found.notes.append(f"Ignored '{phrase.strip()}': {_LABELS[name]} must be positive.")
