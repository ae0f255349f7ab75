"""Compact results an LLM can read: headline figures and the first violations, never a whole DAG.

A result that has more to say holds it in one optional field, named by its class's ``DETAIL_FIELD``, filled
only when the call asked for ``detail=true``; the MCP server keeps that detail to be read later.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from shardplan.contracts.plan import FitHint
from shardplan.contracts.reports import CostReport, PricingReport, ValidationReport

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


class CostBrief(Result):
    """Headline figures of the cost model."""

    ttft_ms: float
    tpot_ms: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    memory_per_gpu_gb: float
    fits: bool = Field(description="Memory fits on every GPU.")


class StrategyCheck(Result):
    """A strategy built, validated and priced for a request."""

    strategy: str = Field(description="The strategy's SPEC, normalised.")
    gpus_used: int = Field(description="GPUs the strategy occupies.")
    buildable: bool = Field(description="False when the degrees do not fit the model or GPU count (see violations).")
    valid: bool = Field(description="Buildable and no error-severity violation.")
    violations: list[ViolationBrief] = Field(default_factory=list, description="First violations, errors first.")
    violations_total: int = Field(default=0, description="All violations found.")
    cost: CostBrief | None = Field(default=None, description="Predicted figures; None when not buildable.")
    meets_targets: bool = Field(default=False, description="TTFT/TPOT targets met and memory fits.")
    misses: list[str] = Field(default_factory=list, description="Missed targets and memory overflow, with the gaps.")

    @property
    def acceptable(self) -> bool:
        """Valid, fits and on target: nothing left to repair."""
        return self.valid and self.meets_targets


class CandidateBrief(Result):
    """One ranked strategy of a search."""

    strategy: str
    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    memory_per_gpu_gb: float
    meets_targets: bool
    misses: list[str] = Field(default_factory=list)
    concurrency: int = Field(default=1, description="Sequences in flight across the deployment.")
    gpus_used: int = Field(default=0, description="GPUs the deployment uses; 0 when not recorded.")
    requests_per_s: float = Field(default=0.0, description="Requests per second served.")


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
    cost: CostBrief | None = None
    meets_targets: bool | None = None
    misses: list[str] = Field(default_factory=list)
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

    headline: CostBrief
    prefill: PhaseBrief
    decode: PhaseBrief
    memory: list[MemoryBrief]
    kv_transfer_ms: float
    meets_targets: bool
    misses: list[str] = Field(default_factory=list)
    pricing: PricingReport | None = Field(
        default=None, description="Which backend priced the figures, on which data, with its measured error."
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
