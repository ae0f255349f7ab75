"""Plain-language planning requests read into fields, deterministically (no language model).

``shardplan chat`` with the ``builtin`` policy reads a request such as *"Plan DeepSeek-V3 on two nodes of
8 H200 for 8k prompts and 1k outputs, first token under 2 s"* with :func:`parse_request`, asks back with
:func:`clarifying_question` when :func:`missing_fields` is not empty, and plans :func:`to_plan_request`.

How the text is read:

* Each field family has one reader (models, GPU types, GPU counts, targets, lengths, batch, objective,
  formats, disaggregation). Readers run in a fixed order over one copy of the text and blank out what
  they matched, so no phrase is read twice ("Mixtral 8x7B" is a model, never 8 GPUs of something).
* ``k`` after a length is 1024 and ``m`` is 1024²: "8k prompts" is 8192 tokens, "1k outputs" 1024,
  following the power-of-two convention of serving benchmarks. Written-out numbers are taken as they are
  ("prompts of 1,000 tokens" is 1000).
* A bare format ("in fp8") sets the weight format only; the KV cache changes only when "kv" is said.
* Two different values for one field in one message are recorded in ``contradictions``, never raised;
  the first one is kept. A value after "instead of", "rather than", "from", "replace" or "not" is the one
  being dropped and is ignored ("use H200 instead of H100").
* A follow-up is read on its own and laid over ``previous``: what it says wins, the rest is kept.

>>> parse_request("Llama 3.1 70B on 8 H100s, 4k prompts, TTFT under 500 ms").ttft_ms
500.0
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import InputError
from ..tools.contracts.common import DType, Objective
from ..tools.contracts.plan import PlanRequest
from ..tools.contracts.workload import Workload
from ..tools.hardware import gpu_catalog
from ..tools.models import bundled_models, resolve_model_name

__all__ = [
    "DEFAULT_ISL", "DEFAULT_OSL", "Intent", "ParsedRequest",
    "parse_request", "missing_fields", "to_plan_request", "clarifying_question",
]

DEFAULT_ISL = 2048
"""Prompt length assumed when a request gives none."""
DEFAULT_OSL = 256
"""Output length assumed when a request gives none."""

Intent = Literal["plan", "why_not", "compare", "explain"]
"""What the message asks for: a plan, why a technique was not used, a comparison, an explanation."""


class ParsedRequest(BaseModel):
    """What a plain-language message said; every field is None when the message did not say it."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, description="Bundled Hugging Face id.")
    gpu: str | None = Field(default=None, description="GPU catalog name.")
    gpus: int | None = Field(default=None, ge=1, description="GPUs in all.")
    gpus_per_node: int | None = Field(default=None, ge=1, description="GPUs in one node.")
    nodes: int | None = Field(default=None, ge=1, description="Nodes.")
    isl: int | None = Field(default=None, ge=1, description="Prompt length in tokens.")
    osl: int | None = Field(default=None, ge=1, description="Output length in tokens.")
    batch: int | None = Field(default=None, ge=1, description="Batch size or concurrent users.")
    ttft_ms: float | None = Field(default=None, gt=0, description="Time-to-first-token target, ms.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Time-per-output-token target, ms.")
    objective: Objective | None = Field(default=None, description="latency, throughput or goodput.")
    weight_dtype: DType | None = Field(default=None, description="Weight format override.")
    kv_dtype: DType | None = Field(default=None, description="KV-cache format override.")
    disaggregated: bool | None = Field(default=None, description="Prefill and decode on separate GPUs.")
    intent: Intent = Field(default="plan", description="What the message asks for.")
    about: str | None = Field(default=None, description="Technique(s) asked about, comma-separated: pp, tp, ep, sp, "
                                                        "dp, adp, disagg, mb.")
    contradictions: list[str] = Field(default_factory=list, description="Things the message says both ways.")
    notes: list[str] = Field(default_factory=list, description="Assumptions made and things not understood.")


_SETTINGS = ("model", "gpu", "gpus", "gpus_per_node", "nodes", "isl", "osl", "batch", "ttft_ms", "tpot_ms",
             "objective", "weight_dtype", "kv_dtype", "disaggregated")
"""The fields a message sets and a follow-up inherits."""

_LABELS = {
    "model": "models", "gpu": "GPU types", "gpus": "GPU counts", "nodes": "node counts",
    "gpus_per_node": "GPUs-per-node figures", "isl": "prompt lengths", "osl": "output lengths",
    "batch": "batch sizes", "ttft_ms": "TTFT targets (ms)", "tpot_ms": "TPOT targets (ms)",
    "objective": "objectives", "weight_dtype": "weight formats", "kv_dtype": "KV-cache formats",
    "disaggregated": "answers on disaggregation",
}

# ---------------------------------------------------------------------------------------------------------
# Shared pieces of patterns

_NUMBER_WORDS = {
    "a single": 1, "single": 1, "an": 1, "a": 1, "one": 1, "dual": 2, "two": 2, "three": 3, "four": 4,
    "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16, "thirty-two": 32, "sixty-four": 64,
}
_START = r"(?<![\w.#-])"
_WORDS = "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in sorted(_NUMBER_WORDS, key=len, reverse=True))
_COUNT = rf"(?:(?:{_WORDS})(?![a-z])|\d+(?![\d.k]))"
"""A whole count: digits or a number word; never the 8 of 8k or 8.5."""
_LEN = r"\d+(?:\.\d+)?[km]?(?![a-z\d])"
"""A token length: 2048, 8k, 1.5k."""
_DUR = r"(\d+(?:\.\d+)?)\s*(ms|msecs?|millis(?:econds?)?|milliseconds?|s|secs?|seconds?)(?![a-z])"
_UPPER = (r"under|below|less\s+than|lower\s+than|at\s+most|within|no\s+more\s+than|not\s+above|up\s+to"
          r"|max(?:imum)?|<=|<|≤")
_LOWER = r"over|above|more\s+than|greater\s+than|longer\s+than|at\s+least|>=|>|≥"
_CMP = rf"(?:{_UPPER}|{_LOWER})"
_PER_TOKEN = r"(?:per|/|a|each|every|between)\s*(?:output\s+|generated\s+|decoded?\s+|new\s+)?tokens?\b"
_REJECTED = re.compile(
    rf"(?:instead\s+of|rather\s+than|replac(?:e|ing)|swap(?:ping)?(?:\s+out)?|from|not)\s+(?:the\s+)?"
    rf"(?:{_COUNT}\s*[x×]?\s*)?$"
)
"""What comes right before a value the message drops: "instead of H100", "from 8 H100s"."""


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


def _normalise(text: str) -> str:
    """Lowercase, plain dashes and spaces, thousands separators dropped ("1,000" → "1000")."""
    text = text.lower().replace("\u00a0", " ")
    text = re.sub(r"[\u2010-\u2015\u2212]", "-", text)
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)


# ---------------------------------------------------------------------------------------------------------
# Reading state


class _Scan:
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
class _Findings:
    """Values found per field, in reading order, with the notes and contradictions met on the way."""

    comparing: bool = False
    values: dict[str, list[Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)

    def add(self, name: str, value: Any) -> None:
        """Record one value of field ``name``."""
        self.values.setdefault(name, []).append(value)

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


# ---------------------------------------------------------------------------------------------------------
# Intent

_TOPICS = {
    "adp": r"adp|dp[\s-]*attention|attention[\s-]*(?:dp|data[\s-]*parallel\w*)|data[\s-]*parallel(?:ism)?[\s-]+"
           r"(?:for\s+)?attention",
    "pp": r"pp|pipeline(?:[\s-]*parallel\w*|[\s-]*stages?)?",
    "tp": r"tp|tensor(?:[\s-]*parallel\w*)?",
    "ep": r"ep|experts?(?:[\s-]*parallel\w*)",
    "sp": r"sp|cp|sequence(?:[\s-]*parallel\w*)?|context[\s-]*parallel\w*",
    "dp": r"dp|data[\s-]*parallel\w*|replicas?|replication",
    "disagg": r"disaggregat\w*|pd[\s-]+disagg\w*|separate\s+prefill(?:\s+and\s+decode)?",
    "mb": r"mb|micro[\s-]*batch\w*",
}
_TOPIC = "|".join(rf"(?P<{name}>{pattern})" for name, pattern in _TOPICS.items())
_WHY_NOT = re.compile(
    r"\b(?:why\s+(?:not|no|didn'?t\s+you|did\s+you\s+not|don'?t\s+you|aren'?t\s+you|isn'?t\s+it|wasn'?t)"
    r"|what\s+about|how\s+about)\s+(?:use\s+|using\s+|try\s+|trying\s+|pick\s+|choose\s+|more\s+|some\s+|any\s+)?"
    rf"(?:{_TOPIC})(?![\w=])"
)
_EXPLAIN = re.compile(r"\bexplain\b|\bwhy\b(?!\s+not\b)|\bhow\s+come\b")
_COMPARE = re.compile(r"\bcompare\b|\bvs\b\.?|\bversus\b|\bwhich\s+is\s+(?:better|faster|cheaper)\b")
_ANY_TOPIC = re.compile(rf"(?<![\w#])(?:{_TOPIC})(?![\w])")


def _topic(match: re.Match[str]) -> str:
    """The topic name of the named group that matched."""
    return next(name for name, text in match.groupdict().items() if text is not None and name in _TOPICS)


def _read_intent(scan: _Scan) -> tuple[Intent, str | None]:
    """The intent and the technique it is about. A why-not without a technique ("why not 16 GPUs?") is a
    what-if, read as a plan. The why-not phrase is blanked so "why not disaggregate?" sets nothing."""
    for match in scan.take(_WHY_NOT):
        return "why_not", _topic(match)
    if _COMPARE.search(scan.text):
        topics = list(dict.fromkeys(_topic(m) for m in _ANY_TOPIC.finditer(scan.text)))
        return "compare", ",".join(topics) or None
    if _EXPLAIN.search(scan.text):
        topic = _ANY_TOPIC.search(scan.text)
        return "explain", _topic(topic) if topic else None
    return "plan", None


# ---------------------------------------------------------------------------------------------------------
# Models


@lru_cache(maxsize=1)
def _model_patterns() -> list[tuple[re.Pattern[str], str]]:
    """One pattern per way of writing each bundled model, longest first.

    A model's short name is squashed ("Llama-3.1-70B" → "llama3170b") and the pattern lets spaces, dots,
    hyphens and underscores sit between any two characters, so "llama 3.1 70b", "Llama-3.1-70B" and
    "llama3.1-70b" all match. Extra spellings: without a release suffix ("Mixtral 8x7B"), without the
    active-parameter suffix ("Qwen3-235B"), and Llama without its version ("Llama 70B"). A spelling that
    two models share is dropped.
    """
    spellings: dict[str, set[str]] = {}
    for repo in bundled_models():
        short = repo.split("/", 1)[1]
        variants = {short, re.sub(r"(?i)-v\d+(\.\d+)+$", "", short), re.sub(r"(?i)-a\d+(\.\d+)?b$", "", short),
                    re.sub(r"(?i)^(llama)-\d+(\.\d+)*-", r"\1-", short)}
        for variant in variants:
            spellings.setdefault(_squash(variant), set()).add(repo)
    patterns = []
    for squashed, repos in sorted(spellings.items(), key=lambda item: -len(item[0])):
        if len(repos) == 1:
            body = r"[\s._-]*".join(re.escape(char) for char in squashed)
            patterns.append((re.compile(rf"(?<![a-z0-9#])(?:[\w-]+/)?{body}(?![a-z0-9]|\.\d)"), repos.pop()))
    return patterns


_FAMILY = re.compile(
    r"(?<![\w#])(?:gpt|llama|qwen|mistral|mixtral|deepseek|gemma|claude|falcon|kimi|glm|grok|olmo|nemotron"
    r"|gemini)(?=[\s.\d-]|$)(?:[\s-]?[a-z.]*\d[\w.]*){0,2}(?![\w])"
)
"""A model family name and up to two version or size tokens after it: "gpt-5", "llama 3.3 70b"."""


def _read_models(scan: _Scan, found: _Findings) -> None:
    """Bundled models by any spelling, the longest match winning; then unknown names with close suggestions."""
    hits = [(m.start(), m.end(), repo) for pattern, repo in _model_patterns() for m in pattern.finditer(scan.text)]
    taken: list[tuple[int, int, str]] = []
    for start, end, repo in sorted(hits, key=lambda hit: (hit[0] - hit[1], hit[0])):
        if all(end <= s or start >= e for s, e, _ in taken):
            taken.append((start, end, repo))
    for start, end, repo in sorted(taken):
        if not _drop_if_rejected(scan, start, end, repo, found):
            found.add("model", repo)
        scan.blank(start, end)
    for match in scan.take(_FAMILY):
        name = match.group().strip(" .-")
        try:
            repo = resolve_model_name(name)
        except InputError as exc:
            found.notes.append(f"'{name}' is not a bundled model; {exc.fix}.")
            continue
        found.add("model", repo)
        found.notes.append(f"Read '{name}' as {repo}.")


def _drop_if_rejected(scan: _Scan, start: int, end: int, value: str, found: _Findings) -> bool:
    """Whether the value at ``text[start:end]`` is the one being replaced; if so blank it with its lead-in."""
    lead = _REJECTED.search(scan.text[:start])
    if not lead:
        return False
    scan.blank(lead.start(), end)
    found.notes.append(f"Dropped {value}, which the request replaces.")
    return True


# ---------------------------------------------------------------------------------------------------------
# GPU types and counts


@lru_cache(maxsize=1)
def _gpu_names() -> dict[str, str]:
    """Lowercase spellings of catalog GPUs mapped to their catalog names."""
    names = {name.lower(): name for name in gpu_catalog()}
    if "MI300X" in gpu_catalog():
        names["mi300"] = "MI300X"
    return names


def _gpu_type_pattern() -> str:
    """A catalog GPU with an optional variant (SXM, PCIe, NVL, 80GB) and an optional plural s."""
    names = "|".join(re.escape(n) for n in sorted(_gpu_names(), key=len, reverse=True))
    return rf"(?:{names})(?:[\s-]*(?:sxm\d?|pcie|nvl|hgx|\d+\s*gb))*s?(?![a-wyz0-9])"


def _read_gpu_types(scan: _Scan, found: _Findings) -> None:
    """GPU types named anywhere; a replaced one ("instead of H100") is dropped with its count."""
    for match in list(re.finditer(rf"(?<![\w#]){_gpu_type_pattern()}", scan.text)):
        name = next(n for key, n in sorted(_gpu_names().items(), key=lambda kv: -len(kv[0]))
                    if match.group().startswith(key))
        if _drop_if_rejected(scan, match.start(), match.end(), name, found):
            continue
        found.add("gpu", name)
        if re.search(r"pcie|nvl", match.group()):
            found.notes.append(f"The catalog's {name} is the SXM part; '{match.group()}' may be slower than planned.")


@lru_cache(maxsize=1)
def _count_patterns() -> dict[str, re.Pattern[str]]:
    """GPU-count phrases, tried in this order: whole clusters, then node shapes, then plain counts."""
    gpu_t = _gpu_type_pattern()
    node = r"(?:nodes?|servers?|machines?|hosts?|boxes|box)"
    per = rf"(?:{gpu_t}\s*)?(?:gpus?\s*)?"
    return {
        "cluster": re.compile(
            rf"{_START}(?P<nodes>{_COUNT})[\s-]+(?:{gpu_t}[\s-]+)?{node}\s*,?\s*(?:of|with|x|×|each\s+with|having|"
            rf"containing)\s+(?P<per>{_COUNT})\s*[x×]?\s*{per}(?:each|per\s+node|apiece)?"),
        "shaped": re.compile(
            rf"{_START}(?P<nodes>{_COUNT})\s*[x×]\s*(?P<per>{_COUNT})\s*(?:{gpu_t}|gpus?)"
            rf"|{_START}(?P<nodes2>{_COUNT})\s+(?P<per2>{_COUNT})[\s-]*(?:[x×]\s*{gpu_t}|gpus?)[\s-]+"
            rf"(?:{gpu_t}\s+)?{node}"),
        "per_node": re.compile(rf"{_START}(?P<per>{_COUNT})\s*{per}(?:per|a|each|/)\s*{node}"
                               rf"|{node}\s+of\s+(?P<per2>{_COUNT})\s*{per}"),
        "nodes": re.compile(rf"{_START}(?P<nodes>{_COUNT})[\s-]+(?:{gpu_t}[\s-]+)?(?:gpus?[\s-]+)?{node}(?![a-z])"),
        "gpus": re.compile(rf"{_START}(?P<gpus>{_COUNT})[\s-]*(?:[x×*][\s-]*)?(?:{gpu_t}(?:[\s-]*gpus?)?|gpus?)"
                           rf"(?![a-z])|(?<![\w#]){gpu_t}\s*[x×]\s*(?P<gpus2>{_COUNT})"),
    }


def _group(match: re.Match[str], *names: str) -> str | None:
    """The first of ``names`` that took part in the match."""
    groups = match.groupdict()
    return next((groups[n] for n in names if groups.get(n) is not None), None)


def _read_gpu_counts(scan: _Scan, found: _Findings) -> None:
    """Total GPUs, nodes and GPUs per node: "two nodes of 8 H200", "2x8 H100", "8 GPUs per node",
    "4 nodes", "8x H100", "a single A100", "16 GPUs"."""
    patterns = _count_patterns()
    for kind in ("cluster", "shaped", "per_node", "nodes", "gpus"):
        for match in scan.take(patterns[kind]):
            nodes = _group(match, "nodes", "nodes2") if kind in ("cluster", "shaped", "nodes") else None
            per = _group(match, "per", "per2") if kind in ("cluster", "shaped", "per_node") else None
            gpus = _group(match, "gpus", "gpus2") if kind == "gpus" else None
            for name, text in (("nodes", nodes), ("gpus_per_node", per), ("gpus", gpus)):
                if text is not None:
                    _add_positive(found, name, _count(text), match.group())


def _add_positive(found: _Findings, name: str, value: float, phrase: str) -> None:
    """Record ``value`` unless it is zero, which no field accepts."""
    if value > 0:
        found.add(name, value)
    else:
        found.notes.append(f"Ignored '{phrase.strip()}': {_LABELS[name]} must be positive.")


# ---------------------------------------------------------------------------------------------------------
# Targets

_TTFT_WORDS = (r"ttft|time[\s-]+to[\s-]+first[\s-]+token|first[\s-]+token(?:[\s-]+(?:latency|time))?"
               r"|prefill[\s-]+latency")
_TPOT_WORDS = (r"tpot|time[\s-]+per[\s-]+output[\s-]+token|inter[\s-]*token[\s-]+latency|itl"
               r"|token[\s-]+to[\s-]+token[\s-]+latency|per[\s-]+token[\s-]+latency|decode[\s-]+latency")
_FILLER = (r"(?:(?:is|of|at|be|to|should|must|needs?|has|have|stay|stays|remain|remains|kept|target|targets|slo"
           r"|latency|goal|time|ideally)\s*[:=]?\s*)*")
_NOT_PER_TOKEN = rf"(?!\s*(?:{_PER_TOKEN}|tpot|itl))"
_FIRST_BOUND = re.compile(rf"[\s:=,]*{_FILLER}(?P<cmp>{_CMP})?\s*{_DUR}{_NOT_PER_TOKEN}")
_NEXT_BOUND = re.compile(rf"\s*,?\s*(?:and|but|yet)\s+(?P<cmp>{_CMP})\s*{_DUR}{_NOT_PER_TOKEN}")
_TARGET_KEYWORDS = {name: re.compile(rf"(?<![\w#])(?:{words})(?![a-z])")
                    for name, words in (("ttft_ms", _TTFT_WORDS), ("tpot_ms", _TPOT_WORDS))}
_TARGETS_BEFORE = {
    "ttft_ms": re.compile(rf"(?:(?P<cmp>{_CMP})\s*)?{_DUR}\s*(?:of\s+)?(?:{_TTFT_WORDS}|to\s+first\s+token)"),
    "tpot_ms": re.compile(rf"(?:(?P<cmp>{_CMP})\s*)?{_DUR}\s*(?:{_PER_TOKEN}|(?:of\s+)?(?:{_TPOT_WORDS})(?![a-z]))"),
}
"""Targets written number first: "2 s TTFT", "under 30 ms per token"."""
_RATE = re.compile(
    rf"(?:(?P<cmp>{_CMP}|min(?:imum)?(?:\s+of)?)\s*)?(?P<rate>\d+(?:\.\d+)?)\s*(?:tokens?|toks?)\s*(?:/|per\s+)\s*"
    r"(?:s|sec|second)\b(?P<per>\s*(?:/|per|for\s+each|for|each)\s*(?:user|request|stream|sequence|session|client))?"
)


def _read_targets(scan: _Scan, found: _Findings) -> None:
    """TTFT and TPOT targets, in ms: "first token under 2 s", "TPOT 20 ms", "under 30 ms per token",
    "at least 50 tokens/s per user" (TPOT 1000/50 = 20 ms), "2 s TTFT"."""
    for name, keyword in _TARGET_KEYWORDS.items():
        _read_bounds_after(scan, found, name, keyword)
    for name, pattern in _TARGETS_BEFORE.items():
        for match in scan.take(pattern):
            _file_bounds(found, name, [(match.group("cmp"), _ms(match.group(2), match.group(3)))])
    for match in scan.take(_RATE):
        rate = float(match.group("rate"))
        if match.group("per") and rate > 0:
            found.add("tpot_ms", round(1000.0 / rate, 3))
        elif not match.group("per"):
            found.notes.append(f"'{match.group().strip()}' reads as aggregate throughput, which is not a target; "
                               "say 'per user' for a per-user speed.")


def _read_bounds_after(scan: _Scan, found: _Findings, name: str, keyword: re.Pattern[str]) -> None:
    """Bounds that follow a keyword, chained with "and": "TTFT under 1 s and over 2 s"."""
    for key in list(keyword.finditer(scan.text)):
        if "#" in scan.text[key.start():key.end()]:
            continue
        bounds: list[tuple[str | None, float]] = []
        match = _FIRST_BOUND.match(scan.text, key.end())
        end = key.end()
        while match:
            bounds.append((match.group("cmp"), _ms(match.group(2), match.group(3))))
            end = match.end()
            match = _NEXT_BOUND.match(scan.text, end)
        if bounds:
            scan.blank(key.start(), end)
            _file_bounds(found, name, bounds)


def _file_bounds(found: _Findings, name: str, bounds: list[tuple[str | None, float]]) -> None:
    """File the bounds said of one target: an upper bound (or a bare figure) is the target; a lower bound is
    only checked against the upper ones, since a target cannot be a floor."""
    is_lower = [bool(cmp and re.fullmatch(_LOWER, cmp)) for cmp, _ in bounds]
    lowers = [ms for (_, ms), low in zip(bounds, is_lower, strict=True) if low]
    uppers = [ms for (_, ms), low in zip(bounds, is_lower, strict=True) if not low]
    for ms in uppers:
        _add_positive(found, name, ms, f"{ms:g} ms")
    label = name[:4].upper()
    if uppers and lowers and max(lowers) >= min(uppers):
        found.contradictions.append(f"{label} must be under {min(uppers):g} ms and over {max(lowers):g} ms; "
                                    "both cannot hold.")
    elif lowers:
        found.notes.append(f"Ignored a lower bound on {label} ({max(lowers):g} ms): only upper bounds are targets.")


# ---------------------------------------------------------------------------------------------------------
# Lengths and batch

_IN = r"(?:inputs?|prompts?|context|isl)"
_OUT = r"(?:outputs?|completions?|responses?|generations?|answers?|osl)"
_OF = r"(?:[\s_-]*(?:length|len|size|tokens?)s?)?\s*(?:of|=|:|is|are|at|around|about|~|≈)?\s*(?:about\s+|around\s+)?"
_AFTER_NUMBER = r"(?<![\dk]\s)(?<![\dk]-)(?<!token\s)(?<!tokens\s)(?<!token-)"
"""Not right after a number: in "8k prompts 1k outputs" the 1k belongs to outputs, not to prompts."""
_LENGTH_PATTERNS = (
    (None, re.compile(rf"{_START}(?P<isl>{_LEN})\s*(?:tokens?\s*)?in\s*(?:[,/]|and)\s*(?P<osl>{_LEN})\s*"
                      r"(?:tokens?\s*)?out\b"
                      rf"|(?:isl\s*/\s*osl|input\s*/\s*output|in\s*/\s*out)\s*(?:of|=|:)?\s*(?P<isl2>{_LEN})\s*/\s*"
                      rf"(?P<osl2>{_LEN})|{_START}(?P<isl3>\d+(?:\.\d+)?k)\s*/\s*(?P<osl3>\d+(?:\.\d+)?k?)(?![\w/])")),
    ("isl", re.compile(rf"(?<![\w#]){_AFTER_NUMBER}{_IN}{_OF}(?P<v>{_LEN})")),
    ("osl", re.compile(rf"(?<![\w#]){_AFTER_NUMBER}(?:{_OUT}|max[\s_-]*(?:new[\s_-]*)?tokens){_OF}(?P<v>{_LEN})")),
    ("isl", re.compile(rf"{_START}(?P<v>{_LEN})[\s-]*(?:tokens?|tok)?[\s-]*(?:long\s+)?{_IN}(?![a-z])"
                       rf"|{_START}(?P<v2>{_LEN})\s*tokens?\s+of\s+(?:context|input|prompt)")),
    ("osl", re.compile(rf"{_START}(?P<v>{_LEN})[\s-]*(?:tokens?|tok)?[\s-]*(?:long\s+)?(?:{_OUT}|decode)(?![a-z])"
                       rf"|(?:generat(?:e|es|ing)|produc(?:e|es|ing)|writ(?:e|es|ing)|decod(?:e|es|ing)|emit)\s+"
                       rf"(?:about\s+|around\s+|up\s+to\s+)?(?P<v2>{_LEN})\s*(?:new\s+|output\s+)?tokens?\b")),
)


def _read_lengths(scan: _Scan, found: _Findings) -> None:
    """Prompt and output lengths: "8k prompts", "8192-token prompts", "input 2048", "isl 4096",
    "32k context" (prompt), "prompts of 1,000 tokens", "1k outputs", "generate 512 tokens",
    "output length 256", "8k in, 1k out", "ISL/OSL 8k/1k", "8k/1k"."""
    for name, pattern in _LENGTH_PATTERNS:
        for match in scan.take(pattern):
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            for key, text in groups.items():
                _add_positive(found, name or key.rstrip("23"), _tokens(text), match.group())


_BATCH_PATTERNS = (
    re.compile(r"(?<![\w#])(?:max[\s_-]*)?(?:batch(?:[\s_-]*size)?|bs|concurrency(?:\s+level)?)\s*(?:of|=|:|is)?"
               rf"\s*(?P<v>{_COUNT})"),
    re.compile(rf"{_START}(?P<v>{_COUNT})\s+(?:(?:concurrent|simultaneous|parallel|active)\s+)?"
               r"(?:users?|requests?|sequences?|streams?|sessions?|clients?)(?![a-z])"
               rf"|{_START}(?P<v2>{_COUNT})\s+(?:concurrent|simultaneous)(?![a-z])"),
)


def _read_batch(scan: _Scan, found: _Findings) -> None:
    """Batch size or concurrency: "batch 32", "batch size of 64", "64 concurrent users", "concurrency 128",
    "single user"."""
    for pattern in _BATCH_PATTERNS:
        for match in scan.take(pattern):
            _add_positive(found, "batch", _count(_group(match, "v", "v2") or "0"), match.group())


# ---------------------------------------------------------------------------------------------------------
# Objective, formats, disaggregation

_OBJECTIVES: tuple[tuple[Objective, re.Pattern[str]], ...] = (
    ("goodput", re.compile(
        r"goodput|(?:max(?:imi[sz]e|imum)?|highest|best|most|more)\s+throughput\s+(?:under|within|while\s+meeting|"
        r"subject\s+to|meeting|that\s+meets?|given)\s+(?:the\s+|these\s+|those\s+|our\s+|my\s+|its\s+)?"
        r"(?:slos?|slas?|targets?|constraints?|latency\s+targets?|goals?|limits?)")),
    ("throughput", re.compile(
        r"(?:max(?:imi[sz]e|imum)?|highest|best|most|more|high)\s+throughput|optimi[sz]e\s+(?:for\s+)?throughput"
        r"|throughput[\s-]+(?:optimi[sz]ed|oriented|first)|cheapest|lowest\s+cost|cost[\s-]+(?:efficient|effective)"
        r"|cost\s+per\s+token|tokens?\s+per\s+dollar|most\s+tokens|offline\s+batch")),
    ("latency", re.compile(
        r"(?:lowest|minimi[sz]e|min(?:imum)?|low|best|least)\s+latency|optimi[sz]e\s+(?:for\s+)?latency"
        r"|latency[\s-]+(?:optimi[sz]ed|oriented|first|sensitive|critical)|fastest|as\s+fast\s+as\s+possible")),
)


def _read_objective(scan: _Scan, found: _Findings) -> None:
    """The objective: "max throughput under the SLO" (goodput), "highest throughput", "cheapest per token"
    (throughput), "lowest latency", "fastest" (latency)."""
    for objective, pattern in _OBJECTIVES:
        for _ in scan.take(pattern):
            found.add("objective", objective)


_DTYPES: dict[str, DType] = {
    "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "fp8": "fp8", "float8": "fp8",
    "e4m3": "fp8", "int8": "int8", "w8a8": "int8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "fp32": "fp32",
    "float32": "fp32",
}
_DT = "(?P<dt>" + "|".join(sorted(_DTYPES, key=len, reverse=True)) + ")"
_KV = r"kv(?:[\s-]*cache)?"
_KV_DTYPES = (re.compile(rf"(?<![\w#]){_DT}[\s-]*{_KV}"),
              re.compile(rf"(?<![\w#]){_KV}(?:\s+(?:dtype|precision|format))?\s*(?:in|at|as|of|=|:|to)?\s*{_DT}(?![\w])"))
_WEIGHT_DTYPE = re.compile(rf"(?<![\w#]){_DT}(?![\w])")


def _read_dtypes(scan: _Scan, found: _Findings) -> None:
    """Formats: "fp8 kv cache" / "kv cache in fp8" set the KV cache; any other "fp8", "FP4 weights", "bf16"
    sets the weights."""
    for name, pattern in (("kv_dtype", _KV_DTYPES[0]), ("kv_dtype", _KV_DTYPES[1]), ("weight_dtype", _WEIGHT_DTYPE)):
        for match in scan.take(pattern):
            found.add(name, _DTYPES[match.group("dt")])
    for match in scan.take(re.compile(r"(?<![\w#])(?:int4|4[\s-]*bit|awq|gptq)(?![\w])")):
        found.notes.append(f"'{match.group()}' is not a supported format; the formats are {', '.join(_DTYPES)}.")


_DISAGG_NO = re.compile(
    r"(?:no|not|without|non)[\s-]+(?:pd[\s-]+|p/d[\s-]+)?disaggregat\w*|co[\s-]?located|colocat\w*"
    r"|(?<!dis)aggregated\s+serving|same\s+gpus?\s+for\s+prefill\s+and\s+decode")
_DISAGG_YES = re.compile(
    r"disaggregat\w*|(?:separate|split|dedicated|different|distinct)\s+(?:gpus\s+for\s+)?prefill\s+and\s+decode"
    r"|prefill\s+and\s+decode\s+(?:on|in)\s+(?:separate|different|distinct|dedicated)|p/?d\s+disagg\w*")


def _read_disaggregation(scan: _Scan, found: _Findings) -> None:
    """Disaggregated serving: "disaggregated", "separate prefill and decode", "PD disaggregation"; and its
    negation ("colocated", "without disaggregation")."""
    for value, pattern in ((False, _DISAGG_NO), (True, _DISAGG_YES)):
        for _ in scan.take(pattern):
            found.add("disaggregated", value)


def _note_leftovers(scan: _Scan, found: _Findings) -> None:
    """Durations and lengths no reader claimed, so the user learns they were not used."""
    for match in re.finditer(rf"(?<![\w#]){_DUR}", scan.text):
        found.notes.append(f"'{match.group()}' was not used: say whether it bounds TTFT or TPOT.")
    for match in re.finditer(r"(?<![\w#])\d+(?:\.\d+)?k(?![\w])", scan.text):
        found.notes.append(f"'{match.group()}' was not used: say whether it is the prompt or the output length.")


# ---------------------------------------------------------------------------------------------------------
# Putting a request together


@dataclass(frozen=True)
class _Counts:
    gpus: int | None = None
    nodes: int | None = None
    per_node: int | None = None


def _settle_counts(said: _Counts, before: _Counts, gpu: str | None, found: _Findings) -> _Counts:
    """Total GPUs, nodes and GPUs per node made consistent.

    What this message said wins over ``before``. Only nodes given ("now with 4 nodes"): the node size is
    kept (or the GPU's usual one) and the total follows. Only a total ("what about 16 GPUs"): the node size
    is kept and the node count follows. Only a node size: the total is kept.
    """
    gpus, nodes, per = said.gpus, said.nodes, said.per_node
    if gpus is None and nodes is None and per is None:
        gpus, nodes, per = before.gpus, before.nodes, before.per_node
    elif gpus is None and nodes is None:
        gpus, nodes = before.gpus, None if before.gpus else before.nodes
    if per is None and not (gpus and nodes):
        per = before.per_node
    if gpus and nodes and per:
        if gpus != nodes * per:
            found.contradictions.append(f"{gpus} GPUs do not match {nodes} nodes of {per} GPUs ({nodes * per} GPUs); "
                                        "say which one you mean.")
    elif gpus and nodes:
        if gpus % nodes:
            found.contradictions.append(f"{gpus} GPUs do not split evenly over {nodes} nodes; say how many per node.")
        else:
            per = gpus // nodes
    elif nodes and per:
        gpus = nodes * per
    elif nodes and gpu:
        per = gpu_catalog()[gpu].gpus_per_node
        gpus = nodes * per
        found.notes.append(f"Assumed {per} GPUs per node, the usual {gpu} node; {gpus} GPUs in all.")
    elif gpus and per:
        if gpus <= per:
            nodes = 1
        elif gpus % per == 0:
            nodes = gpus // per
        else:
            found.notes.append(f"{gpus} GPUs do not fill whole nodes of {per}.")
    return _Counts(gpus, nodes, per)


def _assemble(found: _Findings, intent: Intent, about: str | None, previous: ParsedRequest | None) -> ParsedRequest:
    """This message's findings laid over ``previous``, with counts settled and defaults noted."""
    said = {name: found.first(name) for name in _SETTINGS}
    merged = {name: getattr(previous, name) for name in _SETTINGS} if previous else dict.fromkeys(_SETTINGS)
    merged.update({name: value for name, value in said.items() if value is not None})
    before = _Counts(previous.gpus, previous.nodes, previous.gpus_per_node) if previous else _Counts()
    counts = _settle_counts(_Counts(said["gpus"], said["nodes"], said["gpus_per_node"]), before, merged["gpu"], found)
    merged.update(gpus=counts.gpus, nodes=counts.nodes, gpus_per_node=counts.per_node)
    if merged["objective"] == "throughput" and (merged["ttft_ms"] or merged["tpot_ms"]):
        merged["objective"] = "goodput"
        found.notes.append("Throughput with latency targets is planned as goodput (throughput under the targets).")
    if intent == "plan":
        for name, default, what in (("isl", DEFAULT_ISL, "prompt"), ("osl", DEFAULT_OSL, "output")):
            if merged[name] is None:
                found.notes.append(f"No {what} length given; assuming {default} tokens.")
    return ParsedRequest(**merged, intent=intent, about=about, contradictions=found.contradictions,
                         notes=found.notes)


def parse_request(text: str, previous: ParsedRequest | None = None) -> ParsedRequest:
    """Read a plain-language planning request; with ``previous``, read it as a follow-up to that one.

    Never raises on odd text: what cannot be read is left None and explained in ``notes``, and what is
    said two ways is listed in ``contradictions``.

    >>> r = parse_request("Plan DeepSeek-V3 on two nodes of 8 H200 for 8k prompts and 1k outputs, "
    ...                   "first token under 2 s")
    >>> (r.model, r.gpu, r.gpus, r.nodes, r.isl, r.osl, r.ttft_ms)
    ('deepseek-ai/DeepSeek-V3', 'H200', 16, 2, 8192, 1024, 2000.0)
    >>> parse_request("now with 4 nodes", previous=r).gpus
    32
    """
    scan = _Scan(_normalise(text))
    intent, about = _read_intent(scan)
    found = _Findings(comparing=intent == "compare")
    for reader in (_read_models, _read_gpu_types, _read_gpu_counts, _read_targets, _read_lengths, _read_batch,
                   _read_objective, _read_dtypes, _read_disaggregation, _note_leftovers):
        reader(scan, found)
    return _assemble(found, intent, about, previous)


def missing_fields(parsed: ParsedRequest) -> list[str]:
    """The essential fields a plan still needs, in asking order: ``model``, ``gpu`` (type), ``gpus`` (a GPU
    or node count). Lengths are not essential: they default to DEFAULT_ISL and DEFAULT_OSL.

    >>> missing_fields(parse_request("plan Llama 3.1 70B on 16 GPUs"))
    ['gpu']
    """
    missing = []
    if parsed.model is None:
        missing.append("model")
    if parsed.gpu is None:
        missing.append("gpu")
    if parsed.gpus is None and parsed.nodes is None:
        missing.append("gpus")
    return missing


_QUESTIONS = {
    "model": "which model to plan (for example Llama 3.1 70B, Qwen3-235B or DeepSeek-V3)",
    "gpu": "which GPU type ({gpus})",
    "gpus": "how many GPUs or nodes",
    "isl": "how long the prompts are",
    "osl": "how many tokens each answer generates",
    "batch": "how many requests run at once",
}


def clarifying_question(missing: list[str]) -> str:
    """One friendly question asking for every field in ``missing``; empty when nothing is missing.

    >>> clarifying_question(["gpu", "gpus"])
    'Could you tell me which GPU type (H100, H200, B200, A100, L40S or MI300X) and how many GPUs or nodes?'
    """
    if not missing:
        return ""
    names = list(gpu_catalog())
    gpus = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
    parts = [_QUESTIONS.get(name, f"the {name.replace('_', ' ')}").format(gpus=gpus) for name in missing]
    asked = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Could you tell me {asked}?"


def to_plan_request(parsed: ParsedRequest, policy: str = "builtin") -> PlanRequest:
    """The PlanRequest a parsed request stands for; lengths default to DEFAULT_ISL and DEFAULT_OSL, batch to 1,
    objective to the Workload's default. ``disaggregated`` is not part of a PlanRequest: callers pass it to the
    search themselves.

    Raises:
        InputError: an essential field is missing (``field`` names the first; the fix is the question to ask),
            or the request contradicts itself (``field`` is ``request``; the fix lists the contradictions).
    """
    missing = missing_fields(parsed)
    if missing:
        raise InputError(f"the request does not say {', '.join(missing)}", field=missing[0],
                         fix=clarifying_question(missing))
    if parsed.contradictions:
        raise InputError("the request contradicts itself", field="request", fix=" ".join(parsed.contradictions))
    assert parsed.model and parsed.gpu
    gpus = parsed.gpus or (parsed.nodes or 1) * (parsed.gpus_per_node or gpu_catalog()[parsed.gpu].gpus_per_node)
    workload = Workload(
        isl=parsed.isl or DEFAULT_ISL, osl=parsed.osl or DEFAULT_OSL, batch=parsed.batch or 1,
        ttft_ms=parsed.ttft_ms, tpot_ms=parsed.tpot_ms, **({"objective": parsed.objective} if parsed.objective else {}),
    )
    return PlanRequest(model=parsed.model, gpu=parsed.gpu, gpus=gpus, gpus_per_node=parsed.gpus_per_node,
                       workload=workload, weight_dtype=parsed.weight_dtype, kv_dtype=parsed.kv_dtype, policy=policy)
