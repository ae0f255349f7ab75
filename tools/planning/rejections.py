"""Why the search set layouts aside, in words a person reads: ``91 did not fit in memory (MEM-1)``.

The search counts what it prunes under a short key (:attr:`~shardplan.tools.search.deployments.SearchResult.rejected`):
a knowledge rule ID, ``constraints``, or ``constraint <text>``. This module turns each count into a phrase.
A rule ID the search does not name here still reads well: the phrase then quotes the knowledge rule.
"""

from __future__ import annotations

from shardplan.knowledge.rules import get_rule

__all__ = ["REASONS", "rejection_phrase", "rejection_summary"]

REASONS: dict[str, str] = {
    "MEM-1": "did not fit in memory",
    "constraints": "broke the request's constraints",
}
"""What each key the search counts under means, as the predicate of ``<count> ...``."""


def rejection_phrase(key: str, count: int) -> str:
    """One count of pruned layouts as a phrase, the rule ID (if any) in brackets.

    >>> rejection_phrase("MEM-1", 91)
    '91 did not fit in memory (MEM-1)'
    >>> rejection_phrase("constraint tp<=4", 3)
    '3 broke the constraint tp<=4'
    """
    if key in REASONS:
        return f"{count} {REASONS[key]}" + (f" ({key})" if _is_rule_id(key) else "")
    if key.startswith("constraint "):
        return f"{count} broke the constraint {key.removeprefix('constraint ')}"
    if _is_rule_id(key):
        try:
            statement = get_rule(key).text.rstrip(".")
        except KeyError:
            return f"{count} broke {key}"
        return f"{count} broke {key} ({statement[:1].lower()}{statement[1:]})"
    return f"{count} set aside: {key}"


def rejection_summary(rejected: dict[str, int]) -> str:
    """Every count, most first, joined into one line; empty when nothing was pruned.

    >>> rejection_summary({"constraints": 2, "MEM-1": 91})
    "91 did not fit in memory (MEM-1), 2 broke the request's constraints"
    """
    ordered = sorted(rejected.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(rejection_phrase(key, count) for key, count in ordered)


def _is_rule_id(key: str) -> bool:
    head, _, number = key.partition("-")
    return head.isalpha() and head.isupper() and number.isdigit()
