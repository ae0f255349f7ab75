"""Running every registered rule over a DAG: :func:`validate`.

Each rule module registers its checks on :data:`~shardplan.validators.registry.RULES` when it is imported;
this module imports them all, so whoever validates gets every rule.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from shardplan.contracts.dag import DAG
from shardplan.contracts.reports import ValidationReport
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import RULES
from shardplan.validators.rules import (
    decode,
    ep,
    flow,
    hierarchy,
    kv,
    microbatch,
    overlap,
    phases,
    pools,
    pp,
    sp,
    speculation,
    structure,
    tp,
)

__all__ = ["RULE_MODULES", "validate"]

RULE_MODULES = (
    decode,
    ep,
    flow,
    hierarchy,
    kv,
    microbatch,
    overlap,
    phases,
    pools,
    pp,
    sp,
    speculation,
    structure,
    tp,
)
"""The modules whose import registers the checks, one per family of rules."""

_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while indexing and checking.

    A DAG of 100k nodes is millions of live objects, and the index allocates lists in proportion to
    it; each full collection the allocations trigger would scan the whole heap (half a second). The
    validators create no reference cycles, so nothing is lost by collecting afterwards instead.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def validate(dag: DAG, only: Iterable[str] | None = None) -> ValidationReport:
    """Run every registered rule (or the IDs in ``only``) on ``dag``; errors come first in the report.

    The DAG is indexed once; each rule is linear in nodes plus edges. ``valid`` is false exactly when
    some violation has severity ``error``. On a layer-collapsed view (``meta.collapsed``) the rules that
    need every copy of a node are skipped; ``rules_checked`` lists the rules that ran.

    >>> from shardplan.tools.catalogs.models import load_model
    >>> from shardplan.tools.catalogs.gpus import make_cluster
    >>> from shardplan.contracts.strategy import parse_strategy
    >>> from shardplan.contracts.workload import Workload
    >>> from shardplan.tools.builder.build import build_dag
    >>> dag = build_dag(load_model("llama-3.1-8b"), make_cluster("H100", 2), parse_strategy("tp=2"),
    ...                 Workload(isl=64, osl=8, batch=2))
    >>> validate(dag).valid
    True
    """
    selected = list(RULES.values()) if only is None else [RULES[key.strip().upper()] for key in only]
    if dag.meta.collapsed:
        selected = [entry for entry in selected if not entry.full_graph]
    with _collector_paused():
        index = DagIndex(dag)
        violations = [entry.violation(finding) for entry in selected for finding in entry.check(index)]
    violations.sort(key=lambda v: _ORDER[v.severity])
    return ValidationReport(
        valid=not any(v.severity == "error" for v in violations),
        violations=violations,
        rules_checked=[entry.id for entry in selected],
        nodes=len(index),
        edges=index.edge_count,
    )


