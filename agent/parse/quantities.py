"""A small grammar of quantities and the nouns they attach to: how lengths and concurrency are read.

People write the same figure many ways: "8k prompts", "prompts are long, ~16k tokens", "short prompts (256
tokens)", "docs are ~6k tokens", "decode len 1k", "512 max tokens", "128 batch", "concurrency 64", "100 req
concurrency", "32 users". Rather than one regular expression per phrasing, the text left after the other readers
is cut into tokens (:func:`tokenise`): *quantities* (a number with its magnitude, "1k", "1.5k", "16k", "2048",
optionally approximate, "~6k", "about 300", and optionally in tokens, "300 tokens", "8192-token"), *nouns* (words
that name what a figure measures, each with the field it sets: prompts, context, docs → ``isl``; answers,
outputs, summaries, max tokens → ``osl``; batch, concurrency, users → ``batch``), *fillers* (words that may sit
between a noun and its figure: "are", "long", "of", "length", "~", "(") and *barriers* (anything else).

:func:`attach` then pairs quantities with nouns, left to right, by three rules:

1. number first: a quantity followed by its noun, with only units and modifiers between ("8k prompts",
   "2k token prompts", "100 req concurrency", "4k tokens of history");
2. noun first: a noun followed by a quantity across fillers ("decode len 1k", "docs are ~6k tokens",
   "prompts are long, ~16k tokens"), unless that quantity is followed by a noun of its own that has no other
   figure ("input 2048 output 256" pairs input with 2048 and output with 256); crossing a comma or a bracket
   needs the figure to be in tokens, so "prompts, 32 users" never makes 32 a prompt length;
3. a pair: "4k/1k", "2048/256" (prompt and output lengths).

A count of requests is not a length: in "1000 requests of 2k tokens" 1000 counts requests (noted, not used) and
2k is the prompt length; "16 concurrent requests of 8k tokens" is a batch of 16 with 8k prompts.

``k`` is 1024 and ``m`` 1024² (serving benchmarks' convention). Every pair read records the words it came from.

>>> text = "prompts are long, ~16k tokens, answers ~300"
>>> [(r.field, r.value, r.words) for r in attach(tokenise(text), text)[0]]
[('isl', 16384, 'prompts are long, ~16k tokens'), ('osl', 300, 'answers ~300')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Literal

from shardplan.agent.parse.text import _NUMBER_WORDS, Findings, Scan, _add_positive

__all__ = ["Token", "Reading", "tokenise", "attach", "magnitude", "headcount", "read_quantities"]

Kind = Literal["qty", "noun", "filler", "comma", "open", "slash", "barrier"]

_ISL = {"prompt", "prompts", "question", "questions", "message", "messages", "instruction", "instructions", "input",
        "inputs", "context", "contexts", "ctx", "isl", "doc", "docs", "document", "documents", "history", "source",
        "sources", "query"}
_OSL = {"output", "outputs", "answer", "answers", "completion", "completions", "response", "responses", "reply",
        "replies", "generation", "generations", "summary", "summaries", "translation", "translations", "osl",
        "decode", "gen", "generated", "max_tokens", "max_new_tokens", "new_tokens", "max_output_tokens",
        "generate", "generates", "produce", "produces", "writes", "write", "emit", "emits", "decodes"}
_BATCH = {"batch", "bs", "concurrency", "concurrent", "users", "user", "clients", "client", "sessions", "streams",
          "sequences", "simultaneous", "in_flight", "at_a_time"}
_REQUESTS = {"requests", "request", "queries", "conversations", "calls"}
"""A count of these is a batch ("64 requests") unless a length follows ("1000 requests of 2k tokens")."""
_BATCH_WORDS = {"concurrent", "simultaneous", "parallel", "active"}
"""Words that make a count of requests a batch ("16 concurrent requests")."""
_ADJACENT_ONLY = {"in": "isl", "out": "osl", "back": "osl"}
"""Nouns so common as other words that they take only a figure right next to them ("2k in", "in 2048")."""
_TIME_WORDS = {"s", "sec", "secs", "second", "seconds", "h", "hr", "hour", "min", "minute", "ms"}
_UNITS = {"token", "tokens", "tok", "toks"}
_APPROX = {"~", "≈", "about", "around", "roughly", "approx", "approximately", "circa", "ca"}
_MODIFIERS = {"long", "short", "max", "maximum", "avg", "average", "mean", "typical", "new", "length", "len",
              "lengths", "size", "sizes", "level", "req", "reasoning", "texts", "text", "parallel", "active",
              "concurrent", "simultaneous", "of", "per"}
"""Words inside a noun phrase between a number and its noun ("2k token prompts", "100 req concurrency")."""
_FILLERS = _APPROX | {"is", "are", "of", "=", ":", "at", "length", "len", "lengths", "size", "long", "short",
                      "typically", "usually", "up", "to", "be", "mostly", "generally", "has", "have", "target",
                      "level", "roughly", "just",
                      "only", "each", "average", "avg", "mean", "with", "the", "run", "runs", "come", "comes", "sit",
                      "tiny", "small", "big", "large", "huge", "brief", "lengthy", "medium", "in", "typical",
                      "usual", "normally", "often"}
"""Words that may sit between a noun and its figure ("prompts are long, ~16k", "decode len 1k")."""
_PHRASES = (
    (re.compile(r"max[\s_-]*(?:output[\s_-]*|new[\s_-]*)?tokens"), "max_tokens"),
    (re.compile(r"(?<![a-z])new[\s_-]+tokens"), "new_tokens"),
    (re.compile(r"in[\s-]+flight"), "in_flight"),
    (re.compile(r"(?<![a-z])at[\s-]+(?:a[\s-]+time|once)(?![a-z])"), "at_a_time"),
    (re.compile(r"batch[\s_-]*size"), "batch"),
)
"""Multi-word nouns joined into one token before tokenising."""
_TOKEN = re.compile(
    r"(?P<qty>(?<![\w.])\d{1,9}(?:\.\d{1,6})?[km]?(?![\w]|\.\d))|(?P<word>[a-z_]+(?![\w]))|(?P<other>[\w.]*\w)|(?P<p>[,;()\[\]/=:~≈|.+]|#+|\S)"
)


@dataclass(frozen=True)
class Token:
    """One token of the text: its kind, text and place; ``value`` for a quantity, ``field`` for a noun."""

    kind: Kind
    text: str
    start: int
    end: int
    value: int = 0
    field: str = ""


@dataclass(frozen=True)
class Reading:
    """A field read from a quantity and the noun it attaches to, with the words it came from."""

    field: str
    value: int
    words: str
    start: int
    end: int


def magnitude(text: str) -> int:
    """A figure with its magnitude: ``"8k"`` → 8192, ``"1.5k"`` → 1536, ``"1m"`` → 1048576, ``"300"`` → 300.

    >>> magnitude("16k"), magnitude("1.5k"), magnitude("300")
    (16384, 1536, 300)
    """
    scale = {"k": 1024, "m": 1024 * 1024}.get(text[-1], 1)  # the tokeniser takes at most 9 digits, so this is finite
    return round(float(text.rstrip("km")) * scale)


def people_figure(text: str) -> float:
    """A figure of users, clients or requests: k is a thousand here and m a million, as people count them; only token
    lengths take k = 1024.

    >>> people_figure("1.5k"), people_figure("2m"), people_figure("2.5")
    (1500.0, 2000000.0, 2.5)
    """
    scale = {"k": 1e3, "m": 1e6}.get(text[-1], 1.0)
    return float(text.rstrip("km")) * scale


def headcount(text: str) -> int:
    """A count of users, clients or requests (:func:`people_figure`, whole).

    >>> headcount("1k"), headcount("1.5k"), headcount("64")
    (1000, 1500, 64)
    """
    return round(people_figure(text))


def _kind(word: str) -> tuple[Kind, str]:
    for names, field in ((_ISL, "isl"), (_OSL, "osl"), (_BATCH, "batch"), (_REQUESTS, "requests")):
        if word in names:
            return "noun", field
    if word in _ADJACENT_ONLY:
        return "noun", _ADJACENT_ONLY[word]
    if word in _FILLERS or word in _UNITS or word in _MODIFIERS:
        return "filler", ""
    return "barrier", ""


def _joined(match: re.Match[str], joined: str) -> str:
    """A multi-word noun as one word, padded to the phrase's length so every offset stays the text's."""
    return joined.ljust(len(match.group())) if len(match.group()) >= len(joined) else match.group()


def tokenise(text: str) -> list[Token]:
    """The tokens of ``text`` (lowercase); multi-word nouns ("max new tokens", "in flight") become one token.

    >>> [(t.kind, t.text) for t in tokenise("decode len ~1k, 128 batch")]  # doctest: +NORMALIZE_WHITESPACE
    [('noun', 'decode'), ('filler', 'len'), ('filler', '~'), ('qty', '1k'), ('comma', ','), ('qty', '128'),
     ('noun', 'batch')]
    """
    for pattern, joined in _PHRASES:
        text = pattern.sub(partial(_joined, joined=joined), text)
    tokens = []
    for match in _TOKEN.finditer(text):
        raw = match.group()
        if match.group("qty"):
            tokens.append(Token("qty", raw, match.start(), match.end(), value=magnitude(raw)))
        elif match.group("word") and raw in _NUMBER_WORDS and raw not in ("a", "an"):
            tokens.append(Token("qty", raw, match.start(), match.end(), value=_NUMBER_WORDS[raw]))
        elif match.group("word"):
            kind, field = _kind(raw)
            tokens.append(Token(kind, raw, match.start(), match.end(), field=field))
        elif match.group("other"):
            tokens.append(Token("barrier", raw, match.start(), match.end()))
        elif raw == "-":
            continue  # "8192-token", "1k-token": a hyphen joins, it does not separate
        elif raw in ("~", "≈", "=", ":"):
            tokens.append(Token("filler", raw, match.start(), match.end()))
        elif raw in (",", "("):
            tokens.append(Token("comma" if raw == "," else "open", raw, match.start(), match.end()))
        elif raw == "/":
            tokens.append(Token("slash", raw, match.start(), match.end()))
        else:
            tokens.append(Token("barrier", raw, match.start(), match.end()))
    return tokens


def _in_tokens(tokens: list[Token], i: int) -> bool:
    """Whether the quantity at ``i`` is followed by a token unit ("300 tokens", "8192-token")."""
    return i + 1 < len(tokens) and tokens[i + 1].text in _UNITS


class _Pairing:
    """Left-to-right pairing of quantities and nouns; each token is used once."""

    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text, self.tokens = text, tokens
        self.used: set[int] = set()
        self.readings: list[Reading] = []
        self.counts: list[str] = []

    def add(self, field: str, qty: int, first: int, last: int) -> None:
        start, end = self.tokens[first].start, self.tokens[last].end
        if self.text[start:end].count("(") > self.text[start:end].count(")") and self.text[end : end + 1] == ")":
            end += 1  # "answers are short (~300 tokens)": the bracket closes with the words
        token = self.tokens[qty]
        value = headcount(token.text) if field == "batch" and token.text[-1] in "km" else token.value
        self.readings.append(Reading(field, value, self.text[start:end].strip(), start, end))
        self.used.update(range(first, last + 1))

    def noun_after(self, i: int) -> int | None:
        """The noun a quantity at ``i`` names, across units and modifiers ("2k token prompts")."""
        for j in range(i + 1, min(i + 5, len(self.tokens))):
            token = self.tokens[j]
            if token.kind == "noun":
                if token.text in _ADJACENT_ONLY and j != i + 1 + _in_tokens(self.tokens, i):
                    return None
                return j
            if token.kind != "filler" or not (token.text in _UNITS or token.text in _MODIFIERS):
                return None
        return None

    def qty_after(self, i: int) -> int | None:
        """The quantity noun ``i`` takes, across fillers; a comma or bracket only before a figure in tokens."""
        noun = self.tokens[i]
        crossed = False
        reach = 2 if noun.text in _ADJACENT_ONLY else 7
        for j in range(i + 1, min(i + reach + 1, len(self.tokens))):
            token = self.tokens[j]
            if token.kind == "qty":
                if j in self.used or (crossed and not _in_tokens(self.tokens, j) and not self._aside(j)):
                    return None
                if noun.text in _ADJACENT_ONLY and (self.tokens[j - 1].kind not in ("noun", "filler")
                                                    or self._word_after(j)):
                    return None  # "in 2 weeks": the figure counts something else
                after = self.noun_after(j)
                if after is not None and after not in self.used and self.qty_after_free(after) is None:
                    return None  # "..., 128 batch": the figure is the next noun's
                return j
            if token.kind in ("comma", "open"):
                if crossed:
                    return None
                crossed = True
            elif token.text == "in" and noun.text not in _ADJACENT_ONLY:
                continue  # "answers in ~150": a preposition here, not the prompt's "in"
            elif token.kind != "filler" or (noun.text in _ADJACENT_ONLY and token.text not in ("=", ":")):
                return None
        return None

    def _aside(self, j: int) -> bool:
        """Whether the figure at ``j`` alone fills a bracket opened after its noun: "answers are short (~150)"."""
        before = next((t for t in reversed(self.tokens[:j]) if t.kind != "filler"), None)
        return (before is not None and before.kind == "open"
                and j + 1 < len(self.tokens) and self.tokens[j + 1].text == ")")

    def _word_after(self, j: int) -> bool:
        """Whether a word that is not a unit or a noun follows the figure at ``j``."""
        return j + 1 < len(self.tokens) and self.tokens[j + 1].kind == "barrier" and self.tokens[j + 1].text.isalpha()

    def qty_after_free(self, i: int) -> int | None:
        """A quantity right after noun ``i`` (no comma), so the figure before it is not needed."""
        for j in range(i + 1, min(i + 5, len(self.tokens))):
            token = self.tokens[j]
            if token.kind == "qty":
                return j if j not in self.used else None
            if token.kind != "filler":
                return None
        return None

    def run(self) -> None:
        tokens = self.tokens
        self.pairs()  # "ISL/OSL 4k/1k": the pair first, so a noun before it does not take its first figure
        for i, token in enumerate(tokens):
            if i in self.used:
                continue
            if token.kind == "qty":
                self.number_first(i)
            elif token.kind == "noun" and token.field != "requests":
                j = self.qty_after(i)
                if j is not None:
                    self.add(token.field, j, i, j + _in_tokens(tokens, j))
            elif token.kind == "noun":  # "requests of 8k tokens" after "16 concurrent"
                j = self.length_after(i)
                if j is not None:
                    self.add("isl", j, i, j + _in_tokens(tokens, j))

    def number_first(self, i: int) -> None:
        j = self.noun_after(i)
        if j is None or j in self.used:
            return
        noun = self.tokens[j]
        counted = noun.field in ("isl", "requests") and not _in_tokens(self.tokens, i)  # "2k token prompts": a length
        length = self.length_after(j) if counted else None
        if length is not None:  # "100k prompts of 1024 tokens", "16 concurrent requests of 8k tokens"
            if any(t.field == "batch" or t.text in _BATCH_WORDS for t in self.tokens[i + 1 : j]):
                self.add("batch", i, i, j - 1)
            else:
                self.counts.append(self.text[self.tokens[i].start : self.tokens[i].end])
                self.used.update(range(i, j))
            self.add("isl", length, j, length + _in_tokens(self.tokens, length))
            return
        self.add("batch" if noun.field == "requests" else noun.field, i, i, j)

    def length_after(self, j: int) -> int | None:
        """The length in "requests of 2k tokens", "queries with ~500 tokens"."""
        k = j + 1
        while k < len(self.tokens) and self.tokens[k].text in {"of", "with", "at"} | _APPROX:
            k += 1
        if k > j + 1 and k < len(self.tokens) and self.tokens[k].kind == "qty" and _in_tokens(self.tokens, k):
            return k
        return None

    def pairs(self) -> None:
        """"4k/1k", "2048/256": a prompt and an output length."""
        t = self.tokens
        for i in range(len(t) - 2):
            if t[i].kind == "qty" and t[i + 1].kind == "slash" and t[i + 2].kind == "qty":
                if {i, i + 2} & self.used or (t[i].value < 100 and not t[i].text.endswith("k")):
                    continue
                if i + 3 < len(t) and (t[i + 3].kind == "slash" or t[i + 3].text in _TIME_WORDS):
                    continue  # "2/4/8", "30/1 s": not a pair of lengths
                self.add("isl", i, i, i)
                self.add("osl", i + 2, i + 2, i + 2)


def attach(tokens: list[Token], text: str) -> tuple[list[Reading], list[str]]:
    """The fields read from ``tokens`` of ``text``, in text order, and the counts of requests said beside a
    length ("1000 requests of 2k tokens": 1000 is neither a length nor a batch).

    >>> text = "input 2048 output 256"
    >>> [(r.field, r.value) for r in attach(tokenise(text), text)[0]]
    [('isl', 2048), ('osl', 256)]
    >>> text = "8k prompts 1k outputs, 100 req concurrency"
    >>> [(r.field, r.value) for r in attach(tokenise(text), text)[0]]
    [('isl', 8192), ('osl', 1024), ('batch', 100)]
    """
    pairing = _Pairing(text, tokens)
    pairing.run()
    return sorted(pairing.readings, key=lambda r: r.start), pairing.counts


def read_quantities(scan: Scan, found: Findings) -> None:
    """Prompt and output lengths and the batch, read by the grammar above from what the other readers left; each
    value is recorded with the words it came from, and those words are blanked."""
    tokens = tokenise(scan.text)
    readings, counts = attach(tokens, scan.text)
    for reading in readings:
        _add_positive(found, reading.field, reading.value, reading.words)
        if reading.field == "batch" and re.search(r"\d[km](?![\w])", reading.words):
            found.notes.append(f"Read '{reading.words}' as {reading.value}: a count of users or requests takes k as a "
                               "thousand (only token lengths take k = 1024).")
        found.said.setdefault(reading.field, reading.words)
        scan.blank(reading.start, reading.end)
    for count in counts:
        found.notes.append(f"'{count}' is a count of requests, not a length: not used.")
