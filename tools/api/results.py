"""Compact results an LLM can read: headline figures and the first violations, never a whole DAG.

A result that has more to say holds it in one optional field, named by its class's ``DETAIL_FIELD``, filled
only when the call asked for ``detail=true``; the MCP server keeps that detail to be read later.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from shardplan.contracts.feature_effects import PrefixCacheEffect, SpeculationEffect
from shardplan.contracts.figures import Figures
from shardplan.contracts.plan import FitHint
from shardplan.contracts.reports import CostReport, PricingReport, ValidationReport
from shardplan.contracts.targets import Miss

# ------------------------------------------------------------------------------------------------ results


class Result(BaseModel):
    """Base of every result."""

    model_config = ConfigDict(extra="forbid")

    DETAIL_FIELD: ClassVar[str | None] = None
    """The field that holds the full result when the call asks for detail; None when the result has none."""


class ViolationBrief(Result):
    """One broken rule, briefly."""

    rule: str = Field(description="Rule ID (knowledge rule it enforces).")
    severity: str = Field(description="error, warning or info.")
    message: str = Field(description="What is wrong, with the numbers.")
    fix: str = Field(default="", description="How to fix it.")
    nodes: list[str] = Field(default_factory=list, description="First offending nodes.")


class StrategyCheck(Result):
    """A strategy built, validated and priced for a request."""

    strategy: str = Field(description="The strategy's SPEC, normalised.")
    gpus_used: int = Field(description="GPUs the strategy occupies.")
    buildable: bool = Field(description="False when the degrees do not fit the model or GPU count (see violations).")
    valid: bool = Field(description="Buildable and no error-severity violation.")
    violations: list[ViolationBrief] = Field(default_factory=list, description="First violations, errors first.")
    violations_total: int = Field(default=0, description="All violations found.")
    concurrency: int | None = Field(default=None, description="Sequences in flight at its best concurrency.")
    figures: Figures | None = Field(
        default=None, description="The deployment's steady-state figures; None when not buildable or nothing fits."
    )
    meets_targets: bool = Field(default=False, description="TTFT/TPOT (and rate) targets met and memory fits.")
    misses: list[Miss] = Field(
        default_factory=list, description="Missed targets and memory overflow, each with its gap and a sentence."
    )
    constraint_breaks: list[str] = Field(default_factory=list, description="Constraints of the request it breaks.")

    @property
    def acceptable(self) -> bool:
        """Valid, fits and on target: nothing left to repair."""
        return self.valid and self.meets_targets


class CandidateBrief(Result):
    """One ranked deployment of a search."""

    strategy: str = Field(description="SPEC (dp counts replicas or pool workers).")
    concurrency: int = Field(description="Sequences in flight across the deployment.")
    figures: Figures = Field(description="What it delivers.")
    meets_targets: bool
    misses: list[Miss] = Field(default_factory=list)


class SearchDetail(Result):
    """Everything a search kept: every ranked deployment and the whole frontier, with their figures."""

    candidates: list[CandidateBrief] = Field(description="Every deployment the search kept, best first.")
    frontier: list[CandidateBrief] = Field(description="The Pareto frontier of tokens/s/GPU against tokens/s/user.")
    seconds: float = Field(description="Wall time of the search.")


class SearchSummary(Result):
    """Ranked strategies, or why nothing fits."""

    DETAIL_FIELD: ClassVar[str | None] = "detail"

    feasible: bool = Field(description="False when no strategy fits in memory.")
    objective: str
    candidates: list[CandidateBrief] = Field(default_factory=list, description="Best first.")
    frontier: list[str] = Field(default_factory=list, description="Pareto-optimal SPECs, by tokens/s/user.")
    evaluated: int = 0
    rejected: dict[str, int] = Field(default_factory=dict, description="Pruned strategies by rule ID.")
    min_gpus: int | None = Field(default=None, description="When infeasible: fewest GPUs that would fit.")
    hints: list[FitHint] = Field(
        default_factory=list, description="When infeasible: each single change that would make it fit, with figures."
    )
    message: str = ""
    detail: SearchDetail | None = Field(
        default=None, description="Every kept deployment and the whole frontier with figures; only with detail=true."
    )


class DagCheck(Result):
    """A DAG validated (and priced, when submitted and valid)."""

    DETAIL_FIELD: ClassVar[str | None] = "report"

    valid: bool
    nodes: int
    edges: int
    strategy: str | None = Field(default=None, description="The DAG's strategy SPEC, when it could be read.")
    violations: list[ViolationBrief] = Field(default_factory=list)
    violations_total: int = 0
    rules_checked: int = 0
    figures: Figures | None = Field(default=None, description="One batch of the DAG priced (when submitted).")
    meets_targets: bool | None = None
    misses: list[Miss] = Field(default_factory=list)
    report: ValidationReport | None = Field(
        default=None, description="The whole validation report (every violation, every rule ID); only with detail=true."
    )


class PhaseBrief(Result):
    """One phase's schedule, briefly."""

    latency_ms: float
    exposed_communication_ms: float
    collectives: int
    inter_node_collectives: int
    bubble_fraction: float


class MemoryBrief(Result):
    """Memory per GPU of one pool."""

    pool: str
    weights_gb: float
    kv_cache_gb: float
    total_gb: float
    capacity_gb: float
    fits: bool


class CostSummary(Result):
    """A cost report without the critical paths."""

    DETAIL_FIELD: ClassVar[str | None] = "report"

    figures: Figures = Field(description="One batch of the DAG: TTFT, TPOT, throughput, memory (static_batch).")
    prefill: PhaseBrief
    decode: PhaseBrief
    memory: list[MemoryBrief]
    kv_transfer_ms: float
    meets_targets: bool
    misses: list[Miss] = Field(default_factory=list)
    pricing: PricingReport | None = Field(
        default=None, description="Which backend priced the figures, on which data, with its measured error."
    )
    speculation: SpeculationEffect | None = Field(
        default=None, description="What speculative decoding did: the verify step, TPOT without it, draft memory."
    )
    prefix_cache: PrefixCacheEffect | None = Field(
        default=None, description="What prefix caching did: the hit rate and its source, prefill saved, TTFT without."
    )
    report: CostReport | None = Field(
        default=None, description="The whole cost report (critical paths of both phases, notes); only with "
        "detail=true."
    )


class BuildSummary(Result):
    """What a built DAG holds."""

    strategy: str
    nodes: int
    edges: int
    node_kinds: dict[str, int] = Field(description="Nodes per kind.")
    dag: dict[str, Any] | None = Field(default=None, description="The whole DAG, when asked for.")
