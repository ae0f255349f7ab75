"""Figures that count nothing the plan needs: a year or quarter ("we launch in 2025 Q3"), a port ("on port 8000") and
a machine's name ("gpu-node-07").

Left in the text, the quantity reader would take "2025" for a prompt length and "8000" for an output length; they are
taken out first, each with a note.

>>> from shardplan.agent.parse.text import Findings, Scan
>>> found = Findings()
>>> scan = Scan("we launch in 2025 q3, 4k prompts, endpoint on port 8000")
>>> read_dates_and_ports(scan, found)
>>> scan.text
'we #################, 4k prompts, endpoint on #########'
"""

from __future__ import annotations

import re

from shardplan.agent.parse.text import Findings, Scan

__all__ = ["read_dates_and_ports"]

_YEAR = r"20[1-4]\d"
_DATE = re.compile(
    rf"(?<![\w.#]){_YEAR}[\s-]+(?:q[1-4]|h[12])(?![\w])"
    rf"|(?<![\w#])(?:q[1-4]|h[12]|(?:early|mid|late|end\s+of|start\s+of)(?:[\s-]+of)?)[\s-]+{_YEAR}(?![\w.])"
    rf"|(?<![\w#])(?:launch(?:es|ing)?|go(?:es|ing)?\s+live|ship(?:s|ping)?|since|until|year)\s+(?:in\s+)?{_YEAR}"
    r"(?:[\s-]+(?:q[1-4]|h[12]))?(?![\w.])"
)
"""A year said as one: beside a quarter or half ("2025 Q3", "H2 2026", "late 2025") or after a word of time ("launch in
2025", "since 2024")."""
_PORT = re.compile(r"(?<![\w#])port\s*[:#]?\s*\d{2,5}(?![\w.])")
_HOST = re.compile(r"(?<![\w#-])(?:[a-z]+-)*(?:node|host|worker|server|box|rack|pod|machine)s?-\d{1,4}(?![\w.])")
"""A machine's name with a number in it ("gpu-node-07"): no count of anything."""


def read_dates_and_ports(scan: Scan, found: Findings) -> None:
    """Take out years and ports, with a note for each."""
    for match in scan.take(_DATE):
        found.notes.append(f"Read '{match.group().strip()}' as a date, not a figure of the plan.")
    for match in scan.take(_PORT):
        found.notes.append(f"Read '{match.group().strip()}' as a network port, not a figure of the plan.")
    for match in scan.take(_HOST):
        found.notes.append(f"Read '{match.group().strip()}' as a machine's name, not a figure of the plan.")
