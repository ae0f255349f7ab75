"""The rule registry: one check per knowledge rule ID (:func:`.validate.validate` runs them all).

A check is a plain function from a :class:`~shardplan.validators.index.DagIndex` to the problems it
finds, each a :class:`Finding` (message, fix, offending nodes and edges). The registry turns findings
into :class:`~shardplan.contracts.Violation` objects, stamping the rule ID, the severity and the
citation taken from the knowledge base, so no check repeats them::

    @rule("DAG-1")
    def rule_acyclic(ix: DagIndex) -> Iterator[Finding]:
        \"\"\"The graph has no directed cycle.\"\"\"
        ...

Severity follows the knowledge rule: mandatory -> error, recommended -> warning, informational -> info.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from shardplan.contracts.reports import Severity, Violation
from shardplan.knowledge.rules import get_rule
from shardplan.validators.index import DagIndex

__all__ = [
    "Finding",
    "Rule",
    "RULES",
    "INFORMATIONAL",
    "MAX_LISTED",
    "rule",
    "sample",
    "citation_of",
    "from_problems",
]

MAX_LISTED = 10
"""Most node ids (and edges) listed on one violation; the message gives the full count."""

_SEVERITY: dict[str, Severity] = {"mandatory": "error", "recommended": "warning", "informational": "info"}


@dataclass(frozen=True)
class Finding:
    """One problem a check found, before the registry stamps rule, severity and citation on it."""

    message: str
    fix: str
    nodes: Sequence[str] = field(default_factory=tuple)
    edges: Sequence[tuple[str, str]] = field(default_factory=tuple)


Check = Callable[[DagIndex], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    """A registered validator rule."""

    id: str
    """Knowledge rule ID it enforces, e.g. ``DEC-1``."""
    severity: Severity
    """error, warning or info, from the knowledge rule's mandatory, recommended or informational."""
    title: str
    """One line: what the check verifies (the first line of its docstring)."""
    check: Check
    """The check itself."""
    citation: str
    """Knowledge document and section that state the rule."""
    full_graph: bool = False
    """Whether the check needs every copy of every node, so that it is skipped on a layer-collapsed view
    (``meta.collapsed``), which folds microbatches, shards, expert ranks and layers into one drawn node."""

    def violation(self, finding: Finding) -> Violation:
        """The finding as a violation of this rule, listing at most :data:`MAX_LISTED` nodes and edges."""
        return Violation(
            rule=self.id,
            severity=self.severity,
            message=finding.message,
            nodes=list(finding.nodes[:MAX_LISTED]),
            edges=list(finding.edges[:MAX_LISTED]),
            citation=self.citation,
            fix=finding.fix,
        )


RULES: dict[str, Rule] = {}
"""Every registered rule by ID, in registration order."""

INFORMATIONAL: dict[str, str] = {
    "PH-2": "guidance for choosing degrees per phase (compute-bound prefill, memory-bound decode); the cost "
    "model and the search act on it, a graph cannot break it",
    "PP-5": "a consequence of DEC-1, OVL-1 and PP-2, which are checked: stages run in order within one step",
    "PP-6": "a latency trade-off (fewer decode stages, more TP/EP) that the cost model prices and the search "
    "weighs; no graph is wrong for it",
    "OVL-2": "says communication is not free and overlaps only where the schedule allows; the cost model's "
    "scheduler implements it",
    "TP-6": "explains why the post-attention all-reduce cannot be hidden; the cost model keeps it on the "
    "critical path, TP-2 and TP-4 check the dependency itself",
    "MEM-1": "needs the per-GPU memory breakdown (weights, KV cache, activations, workspace) of the cost "
    "model, which reports it as CostReport.fits",
    "MEM-2": "describes which degree divides which memory term; the cost model's memory report applies it",
}
"""Knowledge rules with no check on the graph, each with the reason (and where it is enforced instead)."""


def citation_of(rule_id: str) -> str:
    """Where a knowledge rule is written: ``"<document> § <section>"``.

    Raises:
        KeyError: no knowledge rule has this ID.

    >>> citation_of("DAG-1")
    '11-dag-vocabulary.md § Structural rules'
    """
    knowledge = get_rule(rule_id)
    return f"{knowledge.doc} § {knowledge.section}"


def rule(rule_id: str, *, full_graph: bool = False) -> Callable[[Check], Check]:
    """Register the decorated check as the validator of knowledge rule ``rule_id``; ``full_graph`` marks a
    check that counts copies of nodes or compares their GPU sets, which a collapsed view cannot answer.

    Raises:
        KeyError: the knowledge base has no rule ``rule_id`` (so every validator cites a real rule).
        ValueError: a check is already registered for ``rule_id``.
    """
    knowledge = get_rule(rule_id)

    def register(check: Check) -> Check:
        if knowledge.id in RULES:
            raise ValueError(
                f"rule {knowledge.id} is registered twice ({RULES[knowledge.id].check.__name__}, "
                f"{check.__name__})"
            )
        title = (check.__doc__ or knowledge.text).strip().splitlines()[0]
        RULES[knowledge.id] = Rule(
            id=knowledge.id,
            severity=_SEVERITY[knowledge.severity],
            title=title,
            check=check,
            citation=citation_of(knowledge.id),
            full_graph=full_graph,
        )
        return check

    return register


def from_problems(ix: DagIndex, rule_id: str) -> Iterator[Finding]:
    """Findings for the strategy problems (:func:`~shardplan.contracts.arithmetic.feasibility.strategy_problems`) that
    break ``rule_id``: the DAG is checked against the same feasibility rules as the builder."""
    for problem in ix.problems:
        if problem.rule == rule_id:
            yield Finding(
                message=f"strategy {ix.meta.strategy.to_spec()}: {problem.message}", fix=problem.fix
            )


def sample(names: Sequence[str], limit: int = 3) -> str:
    """A short list for a message: the first ``limit`` names and how many more.

    >>> sample(["a", "b", "c", "d", "e"])
    'a, b, c and 2 more'
    """
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
