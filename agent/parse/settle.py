"""Settling what a message said with what the thread said before: GPU counts made consistent, degrees "across all
GPUs" made the GPU count, and this message's constraints laid over the earlier ones."""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardplan.agent.parse.constraint_phrases import ALL_GPUS
from shardplan.agent.parse.text import Findings
from shardplan.text import agreeing, counted
from shardplan.tools.catalogs.gpus import gpu_catalog

__all__ = ["Counts", "settle_counts", "across_all", "merge_constraints"]


@dataclass(frozen=True)
class Counts:
    gpus: int | None = None
    nodes: int | None = None
    per_node: int | None = None


def settle_counts(said: Counts, before: Counts, gpu: str | None, found: Findings) -> Counts:
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
            found.contradictions.append(
                f"{counted(gpus, 'GPU')} {agreeing(gpus, 'does', 'do')} not match {counted(nodes, 'node')} of "
                f"{counted(per, 'GPU')} "
                f"({counted(nodes * per, 'GPU')}); say which one you mean."
            )
    elif gpus and nodes:
        if gpus % nodes:
            found.contradictions.append(f"{counted(gpus, 'GPU')} {agreeing(gpus, 'does', 'do')} not split evenly "
                                        f"over {counted(nodes, 'node')}; say how many per node.")
        else:
            per = gpus // nodes
    elif nodes and per:
        gpus = nodes * per
    elif nodes and gpu and gpu.split(",")[0] not in gpu_catalog():  # "any GPU": no one node to count by
        found.notes.append(f"{counted(nodes, 'node')} of any GPU type: each type is counted by its usual node; say how "
                           "many GPUs each node has to fix the count.")
    elif nodes and gpu:
        gpu = gpu.split(",")[0]  # a choice of types ("H100,H200"): the first one's node
        per = gpu_catalog()[gpu].gpus_per_node
        gpus = nodes * per
        found.notes.append(f"Assumed {counted(per, 'GPU')} per node, the usual {gpu} node; {counted(gpus, 'GPU')} in "
                           f"all.")
    elif gpus and per:
        if gpus <= per:
            nodes = 1
        elif gpus % per == 0:
            nodes = gpus // per
        else:
            found.notes.append(f"{counted(gpus, 'GPU')} {agreeing(gpus, 'does', 'do')} not fill whole nodes of {per}.")
    return Counts(gpus, nodes, per)


def across_all(texts: list[str], gpus: int | None, found: Findings) -> list[str]:
    """Degrees said to span all GPUs ("EP across all GPUs") made the settled GPU count; without one, noted."""
    kept = []
    for text in texts:
        if text.endswith(f"={ALL_GPUS}"):
            if gpus is None:
                found.notes.append(f"'{text}' spans all GPUs, but the request gives no GPU count: not used.")
                continue
            text = text.removesuffix(ALL_GPUS) + str(gpus)
        kept.append(text)
    return kept


def constraint_key(text: str) -> str:
    """What a constraint bounds: ``decode:tp`` for ``decode:tp<=8``, the whole text for a flag."""
    return re.split(r"<=|>=|=", text, maxsplit=1)[0] if "=" in text else text


def merge_constraints(before: list[str], said: list[str], found: Findings) -> list[str]:
    """This message's constraints over the earlier ones (a new bound on a degree replaces the old one);
    two fixed values of one degree in one message are a contradiction."""
    fixed: dict[str, str] = {}
    for text in said:
        key = constraint_key(text)
        if "=" in text and not re.search(r"<=|>=", text) and not text.startswith(("engine", "gpus")):
            if key in fixed and fixed[key] != text and not found.comparing:  # "EP 8 vs EP 16" compares the two
                found.contradictions.append(f"The request gives both {fixed[key]} and {text}; say which one you mean.")
            fixed.setdefault(key, text)
    keys = {constraint_key(t) for t in said}
    dropped = found.values.get("constraint_drops", [])
    if "all" in dropped:
        if before:
            found.notes.append(f"Dropped the constraints {', '.join(before)}, as asked.")
        return list(said)
    kept = [t for t in before if constraint_key(t) not in keys and not any(t.startswith(d) for d in dropped)]
    gone = [t for t in before if t not in kept and constraint_key(t) not in keys]
    if gone:
        found.notes.append(f"Dropped the constraint{'s' if len(gone) > 1 else ''} {', '.join(gone)}, as asked.")
    return kept + said
