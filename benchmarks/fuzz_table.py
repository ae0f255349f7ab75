"""The fuzzers' table of counts: one row per kind of input and a total row (``max ms`` the largest, the rest summed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping


def print_counts(totals: Mapping[str, Counter[str]], columns: list[str]) -> None:
    """Print the counts of every kind under ``columns`` as a markdown table with an **all** row."""
    print("| kind | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    total: Counter[str] = Counter()
    for kind, counts in totals.items():
        print(f"| {kind} | " + " | ".join(f"{counts[c]:,}" for c in columns) + " |")
        for c in columns:
            total[c] = max(total[c], counts[c]) if c == "max ms" else total[c] + counts[c]
    print("| **all** | " + " | ".join(f"{total[c]:,}" for c in columns) + " |")
