"""The builder DAGs the mutation operators run on, and the kill table: which mutants the validators catch.

:data:`CASES` are strategies that, together, give every operator of :mod:`mutations` something to break;
:func:`kill_table` applies every operator to every case and reports the mutants caught by the rule each
operator declares (benchmarks print it). The validator sweeps draw their models and clusters with the same
helpers (:func:`trimmed_model`, :func:`drawn_node_size`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from mutations import MUTATIONS

from shardplan.contracts.dag import DAG
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.speculation import parse_speculation
from shardplan.contracts.strategy import Strategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster, with_decode_pool
from shardplan.tools.catalogs.models import load_model
from shardplan.validators.registry import RULES
from shardplan.validators.validate import validate

__all__ = [
    "Case",
    "CASES",
    "WORKLOAD",
    "case_dag",
    "trimmed_model",
    "drawn_node_size",
    "KillRow",
    "kill_table",
    "format_kill_table",
]


@dataclass(frozen=True)
class Case:
    """A builder DAG to mutate: model (cut to ``layers``), GPU count, strategy SPEC."""

    model: str
    layers: int
    gpus: int
    spec: str
    speculation: str | None = None
    """Speculative decoding (``mtp:2``, ``eagle:2``, ...): the decode step verifies and drafts."""
    decode_gpu: str | None = None
    """The decode pool's GPU when it is another type than the H100 prefill pool (split strategies only)."""

    @property
    def label(self) -> str:
        drafted = f" --spec {self.speculation}" if self.speculation else ""
        mixed = f" --decode-gpu {self.decode_gpu}" if self.decode_gpu else ""
        return f"{self.model}[{self.layers}L] {self.spec} on {self.gpus}{drafted}{mixed}"


CASES: tuple[Case, ...] = (
    Case("llama-3.1-8b", 4, 4, "tp=2,pp=2,mb=2"),
    Case("llama-3.1-8b", 4, 8, "sp=2,tp=2,pp=2,mb=2"),
    Case("mixtral-8x7b", 4, 8, "sp=2,tp=2,ep=2,pp=2,mb=2"),
    Case("llama-3.1-8b", 4, 4, "prefill:tp=2;decode:tp=2;disagg"),
    Case("qwen3-30b-a3b", 4, 4, "dp=2,tp=2,ep=2"),
    Case("deepseek-v3", 5, 4, "prefill:sp=2,tp=2,ep=4;decode:adp=2,tp=2,ep=4"),
    Case("gpt-oss-20b", 4, 4, "adp=2,tp=2,mb=2"),
    Case("mixtral-8x7b", 4, 8, "prefill:tp=2,ep=2,pp=2;decode:dp=2,tp=2,ep=2;disagg"),
    Case("deepseek-v3", 5, 8, "prefill:sp=2,tp=2,ep=2,pp=2,mb=2;decode:adp=2,tp=2,ep=2,pp=2"),
    Case("mixtral-8x7b", 4, 4, "pp=2,ep=2"),
    Case("deepseek-v3", 5, 4, "adp=2,tp=2,ep=4", speculation="mtp:2"),
    Case("llama-3.1-8b", 4, 4, "tp=2,pp=2", speculation="eagle:2"),
    Case("llama-3.1-8b", 4, 16, "prefill:tp=2;decode:tp=4;disagg", decode_gpu="L40S"),
)
"""Strategies that, together, give every operator something to break."""

WORKLOAD = Workload(isl=64, osl=8, batch=8)


def trimmed_model(name: str, layers: int) -> ModelSpec:
    """A bundled model cut to its first ``layers`` layers (the graph stays small, its structure the same)."""
    model = load_model(name)
    return model.model_copy(update={"num_layers": layers, "layer_types": model.layer_types[:layers]})


@functools.cache
def case_dag(case: Case) -> DAG:
    """The builder DAG of a case (cached; treat it as read-only)."""
    cluster = make_cluster("H100", case.gpus)
    return build_dag(
        trimmed_model(case.model, case.layers),
        with_decode_pool(cluster, case.decode_gpu) if case.decode_gpu else cluster,
        parse_strategy(case.spec),
        WORKLOAD.model_copy(update={"speculation": parse_speculation(case.speculation, 1.0)})
        if case.speculation
        else WORKLOAD,
    )


@dataclass(frozen=True)
class KillRow:
    """How one operator fared over the cases."""

    operator: str
    rule: str
    applied: int
    killed: int
    missed: tuple[str, ...]


def kill_table(cases: Iterable[Case] = CASES) -> list[KillRow]:
    """Apply every operator to every case; a mutant is killed when its declared rule reports a violation
    of the rule's severity (an error for mandatory rules), and the report is invalid for errors."""
    rows = []
    dags = [(case, case_dag(case)) for case in cases]
    for op in MUTATIONS.values():
        applied, killed, missed = 0, 0, []
        severity = RULES[op.rule].severity
        for case, dag in dags:
            mutant = op.apply(dag)
            if mutant is None:
                continue
            applied += 1
            report = validate(mutant)
            caught = any(v.rule == op.rule and v.severity == severity for v in report.violations)
            if caught and (severity != "error" or not report.valid):
                killed += 1
            else:
                missed.append(case.label)
        rows.append(KillRow(op.name, op.rule, applied, killed, tuple(missed)))
    return rows


def format_kill_table(rows: list[KillRow]) -> str:
    """The kill table as Markdown, with the overall kill rate in the last line."""
    lines = ["| operator | rule | mutants | killed |", "| --- | --- | ---: | ---: |"]
    lines += [f"| {r.operator} | {r.rule} | {r.applied} | {r.killed} |" for r in rows]
    applied, killed = sum(r.applied for r in rows), sum(r.killed for r in rows)
    rate = 100.0 * killed / applied if applied else 0.0
    lines.append(f"\n{len(rows)} operators, {applied} mutants, {killed} killed: kill rate {rate:.1f}%")
    return "\n".join(lines)


def drawn_node_size(strategy: Strategy) -> int:
    """Node size for a drawn strategy's own cluster: the largest (up to 8) that divides its GPUs and on which
    its split pools, each placed on node boundaries, span exactly those GPUs (1 always does)."""
    return max(d for d in range(1, 9) if strategy.gpus % d == 0 and strategy.span(d) == strategy.gpus)
