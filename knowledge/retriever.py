"""Retrieval over the knowledge documents, one ``## `` section per indexed unit.

``search`` ranks sections against free text with BM25 (the ``bm25s`` library, imported on first use so
that importing ``shardplan.knowledge`` stays light). ``sections_for_strategy`` picks the sections that
a given strategy has to respect, without any ranking.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from shardplan.knowledge.rules import RULE_LINE, doc_files, split_sections

if TYPE_CHECKING:
    import bm25s

__all__ = ["DEGREE_KEYS", "Section", "all_sections", "search", "sections_for_strategy", "tokenize"]

DEGREE_KEYS: frozenset[str] = frozenset({"tp", "pp", "sp", "ep", "etp", "dp", "adp", "mb"})
"""Degree names accepted by ``sections_for_strategy``."""

PHASES_DOC = "01-phases.md"
TP_DOC = "02-tensor-parallelism.md"
PP_DOC = "03-pipeline-parallelism.md"
EP_DOC = "04-expert-parallelism.md"
SP_DOC = "05-sequence-parallelism.md"
DP_DOC = "06-data-parallelism.md"
MB_DOC = "07-microbatching.md"
OVERLAP_DOC = "08-overlap.md"
COMBINATIONS_DOC = "09-combinations.md"
DECODE_DOC = "10-decode-constraints.md"
TP_ALLREDUCE_DOC = "12-tp-allreduce-and-pp-vs-tp.md"

NESTING_SECTION = "Nesting order and GPU count"
"""The section of ``09-combinations.md`` that holds the hierarchy rules (HIER-1, HIER-2)."""

COMBINATION_ORDER = ("tp", "sp", "pp", "ep")
"""Order in which ``09-combinations.md`` names the dimensions in its headings (``TP + SP + PP``)."""

_WORD = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")


class Section(BaseModel):
    """One ``## `` section of a knowledge document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc: str
    """File name of the document, e.g. ``05-sequence-parallelism.md``."""
    heading: str
    """The section heading without the leading ``## ``."""
    text: str
    """The section body in markdown, heading excluded."""
    rule_ids: list[str]
    """IDs of the rules defined in this section, in order of appearance."""
    score: float = 0.0
    """BM25 relevance from ``search``; 0.0 for sections chosen by ``sections_for_strategy``."""


def tokenize(text: str) -> list[str]:
    """Turn text into BM25 terms: lowercase words, with hyphenated compounds both joined and split.

    English stopwords are dropped and two endings are normalized (plural ``s``, ``ism``), so
    "all-reduces", "allreduce" and "all-reduce" share the term ``allreduce``, and "parallelism" matches
    "parallel".

    >>> tokenize("The all-reduce blocks")
    ['allreduce', 'all', 'reduce', 'block']
    """
    from bm25s.stopwords import STOPWORDS_EN

    stop = set(STOPWORDS_EN)
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        parts = re.split(r"[-_]", word)
        candidates = ["".join(parts), *parts] if len(parts) > 1 else parts
        terms.extend(_normalize(term) for term in candidates if term not in stop)
    return terms


def _normalize(term: str) -> str:
    """Strip ``ism`` and a plural ``s`` (not ``ss``) from longer words: ranks -> rank, gpus -> gpu."""
    if len(term) > 6 and term.endswith("ism"):
        term = term[:-3]
    if len(term) > 3 and term.endswith("s") and not term.endswith("ss"):
        term = term[:-1]
    return term


@functools.lru_cache(maxsize=1)
def all_sections() -> tuple[Section, ...]:
    """Return every ``## `` section of every document, in document then section order (cached).

    The introduction before a document's first ``## `` heading is not a section.
    """
    sections: list[Section] = []
    for path in doc_files():
        for heading, body in split_sections(path.read_text(encoding="utf-8")):
            if not heading:
                continue
            rule_ids = [m["id"] for line in body.splitlines() if (m := RULE_LINE.match(line.rstrip()))]
            sections.append(Section(doc=path.name, heading=heading, text=body, rule_ids=rule_ids))
    return tuple(sections)


@functools.lru_cache(maxsize=1)
def _index() -> bm25s.BM25:
    """Build (once) the BM25 index; each section is indexed with its document title and heading."""
    import bm25s

    titles = {path.name: _title(path.read_text(encoding="utf-8")) for path in doc_files()}
    corpus = [tokenize(f"{titles[s.doc]}\n{s.heading}\n{s.heading}\n{s.text}") for s in all_sections()]
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    return retriever


def _title(text: str) -> str:
    """Return the first ``# `` heading of a document, or an empty string."""
    return next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")


def search(query: str, k: int = 5) -> list[Section]:
    """Return up to ``k`` sections ranked by BM25 relevance to ``query``, best first.

    Sections with no matching term are left out, so the list may be shorter than ``k`` (empty when no
    query term occurs in the knowledge base). Ties keep document order.

    Raises:
        ValueError: when ``k`` is smaller than 1.

    >>> search("sequence parallelism in decode", k=1)[0].doc
    '05-sequence-parallelism.md'
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got k={k}")
    terms = tokenize(query)
    if not terms:
        return []
    retriever = _index()
    known = [term for term in terms if term in retriever.vocab_dict]
    if not known:
        return []
    scores = retriever.get_scores(known)
    sections = all_sections()
    ranked = sorted(range(len(sections)), key=lambda i: (-float(scores[i]), i))
    return [
        sections[i].model_copy(update={"score": float(scores[i])}, deep=True)
        for i in ranked[:k]
        if scores[i] > 0
    ]


def sections_for_strategy(prefill: Mapping[str, int], decode: Mapping[str, int], moe: bool) -> list[Section]:
    """Return the knowledge sections a strategy must respect, in document order, without duplicates.

    Args:
        prefill: degrees of the prefill phase, e.g. ``{"tp": 4, "pp": 2, "sp": 2, "mb": 1}``; keys from
            ``DEGREE_KEYS``, missing keys mean 1.
        decode: degrees of the decode phase, same form.
        moe: whether the model has MoE layers (their routing and expert layout then always matter).

    Returns:
        All sections of the phase document and of the decode constraints; all sections of the document of
        every dimension whose degree is above 1 in either phase (TP, PP, SP, DP or ADP, microbatching, and
        EP also whenever ``moe``); the overlap document when PP or microbatching is used; the seed-001
        analysis when TP or PP is used in decode; and from ``09-combinations.md`` the nesting section
        plus the combination section of each phase's set of TP/SP/PP/EP dimensions.

    Raises:
        ValueError: on an unknown degree name or a degree that is not an integer of at least 1.

    >>> docs = {s.doc for s in sections_for_strategy({"tp": 2}, {"tp": 2}, moe=False)}
    >>> sorted(docs)[:3]
    ['01-phases.md', '02-tensor-parallelism.md', '09-combinations.md']
    """
    pre, dec = _checked_degrees("prefill", prefill), _checked_degrees("decode", decode)

    def used(dim: str) -> bool:
        return pre.get(dim, 1) > 1 or dec.get(dim, 1) > 1

    docs = {PHASES_DOC, DECODE_DOC}
    if used("tp") or used("etp"):
        docs.add(TP_DOC)
    if used("pp"):
        docs.add(PP_DOC)
    if used("ep") or used("etp") or moe:
        docs.add(EP_DOC)
    if used("sp"):
        docs.add(SP_DOC)
    if used("dp") or used("adp"):
        docs.add(DP_DOC)
    if used("mb"):
        docs.add(MB_DOC)
    if used("pp") or used("mb"):
        docs.add(OVERLAP_DOC)
    if dec.get("tp", 1) > 1 or dec.get("pp", 1) > 1:
        docs.add(TP_ALLREDUCE_DOC)

    combination_headings = {NESTING_SECTION} | {
        heading for heading in (_combination_heading(pre), _combination_heading(dec)) if heading
    }
    return [
        section.model_copy(deep=True)
        for section in all_sections()
        if section.doc in docs
        or (section.doc == COMBINATIONS_DOC and section.heading in combination_headings)
    ]


def _combination_heading(degrees: Mapping[str, int]) -> str:
    """Return the ``09-combinations.md`` heading for the TP/SP/PP/EP dimensions above 1, or ``""``."""
    return " + ".join(dim.upper() for dim in COMBINATION_ORDER if degrees.get(dim, 1) > 1)


def _checked_degrees(phase: str, degrees: Mapping[str, int]) -> dict[str, int]:
    """Return ``degrees`` as a dict after checking names and values.

    Raises:
        ValueError: on an unknown name or a value that is not an integer of at least 1.
    """
    checked: dict[str, int] = {}
    for name, value in degrees.items():
        if name not in DEGREE_KEYS:
            raise ValueError(
                f"{phase}: unknown degree {name!r}; expected one of {', '.join(sorted(DEGREE_KEYS))}"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{phase}: degree {name}={value!r} must be an integer of at least 1")
        checked[name] = value
    return checked
