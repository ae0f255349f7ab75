"""Normative rules of the knowledge base, parsed from the markdown documents in ``docs/``.

Every rule is one line of a document, in exactly this form::

    - **DEC-1** (mandatory): <statement>

The ID is stable and is what validators cite. A rule belongs to the ``## `` section it appears in.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterator
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "RULE_LINE",
    "KnowledgeRule",
    "Severity",
    "doc_files",
    "get_rule",
    "iter_rule_lines",
    "load_rules",
    "split_sections",
]

Severity = Literal["mandatory", "recommended", "informational"]

RULE_LINE = re.compile(
    r"^- \*\*(?P<id>[A-Z]+-\d+)\*\* \((?P<severity>mandatory|recommended|informational)\): (?P<text>.+)$"
)
"""A rule definition line; groups ``id``, ``severity`` and ``text``."""

_RULE_ID = re.compile(r"^[A-Z]+-\d+$")


class KnowledgeRule(BaseModel):
    """One normative statement of the knowledge base."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Z]+-\d+$")
    """Stable rule ID such as ``DEC-1``; validators cite it."""
    severity: Severity
    """``mandatory`` rules make a plan invalid when broken; the others guide the choice."""
    text: str = Field(min_length=1)
    """The statement, as written in the document."""
    doc: str
    """File name of the defining document, e.g. ``10-decode-constraints.md``."""
    section: str
    """Heading of the ``## `` section that holds the rule (without the ``## ``)."""


def doc_files() -> list[Traversable]:
    """Return the knowledge documents (``docs/*.md`` of the package), sorted by file name.

    Raises:
        FileNotFoundError: when the package ships no documents.
    """
    root = files("shardplan.knowledge") / "docs"
    docs = sorted((p for p in root.iterdir() if p.name.endswith(".md")), key=lambda p: p.name)
    if not docs:
        raise FileNotFoundError("shardplan.knowledge ships no docs/*.md files")
    return docs


def split_sections(text: str) -> list[tuple[str, str]]:
    """Split a markdown document into ``(heading, body)`` pairs at its ``## `` headings.

    Text before the first ``## `` heading (title and introduction) comes first with heading ``""``;
    ``###`` and deeper headings stay inside their ``## `` section.

    >>> split_sections("# T\\nintro\\n## A\\nbody\\n")
    [('', '# T\\nintro'), ('A', 'body')]
    """
    sections: list[tuple[str, str]] = []
    heading, lines = "", list[str]()
    for line in text.splitlines():
        if line.startswith("## "):
            sections.append((heading, "\n".join(lines).strip()))
            heading, lines = line[3:].strip(), []
        else:
            lines.append(line)
    sections.append((heading, "\n".join(lines).strip()))
    return sections


def iter_rule_lines(doc: str, text: str) -> Iterator[KnowledgeRule]:
    """Yield the rules defined in one document's text, in order of appearance.

    Args:
        doc: the document's file name, recorded on each rule.
        text: the document's markdown.

    Raises:
        ValueError: when a line starts like a rule (``- **ID**``) but does not match the rule format.

    >>> [r.id for r in iter_rule_lines("x.md", "## S\\n- **AB-1** (mandatory): a rule.\\n")]
    ['AB-1']
    """
    for section, body in split_sections(text):
        for line in body.splitlines():
            match = RULE_LINE.match(line.rstrip())
            if match:
                yield KnowledgeRule(
                    id=match["id"],
                    severity=match["severity"],  # type: ignore[arg-type]
                    text=match["text"].strip(),
                    doc=doc,
                    section=section,
                )
            elif line.startswith("- **") and _RULE_ID.match(line[4:].split("**", 1)[0]):
                raise ValueError(
                    f"{doc}, section {section!r}: rule line does not match "
                    f"'- **ID** (mandatory|recommended|informational): text': {line!r}"
                )


@functools.lru_cache(maxsize=1)
def load_rules() -> dict[str, KnowledgeRule]:
    """Parse every document and return all rules keyed by ID, in document order.

    The result is cached; treat it as read-only.

    Raises:
        ValueError: when an ID is defined twice or a rule line is malformed.

    >>> load_rules()["SP-1"].severity
    'mandatory'
    """
    rules: dict[str, KnowledgeRule] = {}
    for path in doc_files():
        for rule in iter_rule_lines(path.name, path.read_text(encoding="utf-8")):
            if rule.id in rules:
                raise ValueError(f"rule {rule.id} is defined twice: in {rules[rule.id].doc} and {rule.doc}")
            rules[rule.id] = rule
    return rules


def get_rule(rule_id: str) -> KnowledgeRule:
    """Return the rule with this ID (case and surrounding spaces are ignored).

    Raises:
        KeyError: when no rule has this ID; the message lists the closest known IDs.

    >>> get_rule("dec-1").id
    'DEC-1'
    """
    rules = load_rules()
    key = rule_id.strip().upper()
    if key in rules:
        return rules[key]
    close = difflib.get_close_matches(key, list(rules), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known prefixes: {_prefixes(rules)}"
    raise KeyError(f"unknown knowledge rule {rule_id!r}{hint}")


def _prefixes(rules: dict[str, KnowledgeRule]) -> str:
    """Return the distinct ID prefixes (``DEC``, ``TP``, ...) as a comma-separated string."""
    return ", ".join(sorted({rule_id.split("-")[0] for rule_id in rules}))
