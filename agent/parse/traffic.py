"""Reading how requests arrive: "bursty traffic" (gamma arrivals, cv 3), "Poisson arrivals", and "64 concurrent
users" or "32 clients" (a closed loop of that many clients).

A count of concurrent users or clients is also the batch (:func:`~shardplan.agent.parse.readers._read_batch`
reads it after this reader, which leaves the phrase in place); it is recorded here as ``clients``, and becomes
the closed loop only when the message names no arrival process itself ("bursty traffic from 64 concurrent
users" is bursty, with 64 in flight).

>>> from shardplan.agent.parse.text import Findings, Scan
>>> found = Findings()
>>> read_arrival(Scan("bursty traffic, 64 concurrent users"), found)
>>> found.values
{'arrival': ['gamma:cv=3'], 'clients': [64]}
"""

from __future__ import annotations

import re

from shardplan.agent.parse.text import _COUNT, _START, Findings, Scan, _count

__all__ = ["read_arrival", "BURSTY"]

BURSTY = "gamma:cv=3"
"""The arrival process "bursty" reads as: gamma gaps with a coefficient of variation of 3."""

_PROCESSES = (
    (BURSTY, re.compile(r"(?<![\w#])(?:bursty|spiky|burst(?:s|ing)?\s+of\s+(?:traffic|requests|load)"
                        r"|(?:traffic|requests|load)\s+(?:comes?\s+|arrives?\s+)?in\s+bursts)(?![a-z])")),
    ("poisson", re.compile(r"(?<![\w#])poisson(?:\s+(?:arrivals?|traffic|process))?(?![a-z])")),
)
_CLIENTS = re.compile(
    rf"{_START}(?P<v>{_COUNT})\s+(?:(?:concurrent|simultaneous|parallel)\s+(?:users?|clients?)|clients?)(?![a-z])"
)


def read_arrival(scan: Scan, found: Findings) -> None:
    """Arrival processes named in words (taken from the text), and counts of concurrent users or clients (left
    for the batch reader)."""
    for process, pattern in _PROCESSES:
        for _ in scan.take(pattern):
            found.add("arrival", process)
    for match in _CLIENTS.finditer(scan.text):
        clients = _count(match.group("v"))
        if clients > 0:
            found.add("clients", clients)
