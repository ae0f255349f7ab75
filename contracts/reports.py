"""ValidationReport and CostReport: what the validators and the cost model answer."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shardplan.contracts.common import Contract
from shardplan.contracts.feature_effects import PrefixCacheEffect, SpeculationEffect
from shardplan.contracts.figures import Figures
from shardplan.contracts.targets import Miss

__all__ = [
    "Severity",
    "Violation",
    "ValidationReport",
    "PhaseCost",
    "MemoryReport",
    "CostReport",
    "PathStep",
    "PricingReport",
]

Severity = Literal["error", "warning", "info"]


class Violation(Contract):
    """One broken rule, located in the graph, with the rule it breaks and how to mend it."""

    rule: str = Field(description="Validator rule ID, equal to the knowledge rule it enforces (e.g. DEC-1).")
    severity: Severity = Field(description="error fails validation; warning and info do not.")
    message: str = Field(description="What is wrong, quoting the numbers.")
    nodes: list[str] = Field(default_factory=list, description="Offending node ids (first few).")
    edges: list[tuple[str, str]] = Field(default_factory=list, description="Offending edges as (src, dst) (first few).")
    citation: str = Field(default="", description="Where the rule is written: knowledge document and section.")
    fix: str = Field(default="", description="How to fix it.")


class ValidationReport(Contract):
    """The verdict of every rule on one DAG."""

    valid: bool = Field(description="True when no error-severity violation was found.")
    violations: list[Violation] = Field(default_factory=list, description="Every violation found.")
    rules_checked: list[str] = Field(default_factory=list, description="IDs of the rules that ran.")
    nodes: int = Field(default=0, ge=0, description="Nodes checked.")
    edges: int = Field(default=0, ge=0, description="Edges checked.")


class PathStep(Contract):
    """One node on the critical path, with its time."""

    node: str = Field(description="Node id.")
    kind: str = Field(description="Node kind.")
    ms: float = Field(ge=0, description="Duration in milliseconds.")


class PhaseCost(Contract):
    """Schedule of one phase on per-GPU compute and communication streams."""

    latency_ms: float = Field(ge=0, description="Makespan of the phase (prefill: TTFT; decode: one step).")
    compute_ms: float = Field(ge=0, description="Busy time of the busiest compute stream.")
    communication_ms: float = Field(ge=0, description="Busy time of the busiest communication stream.")
    exposed_communication_ms: float = Field(
        ge=0, description="Communication time on the critical path, not hidden behind compute."
    )
    bubble_fraction: float = Field(
        ge=0, le=1, description="Share of GPU-time idle within the makespan, averaged over GPUs."
    )
    overlap_fraction: float = Field(
        ge=0, le=1, description="Share of communication time that ran while the same GPU computed."
    )
    communication_bytes: float = Field(ge=0, description="Bytes sent over links per step, summed over ranks.")
    collectives: int = Field(ge=0, description="Communication nodes per step (per token in decode).")
    inter_node_collectives: int = Field(ge=0, description="Communication nodes that cross the network.")
    critical_path: list[PathStep] = Field(default_factory=list, description="The longest chain of the schedule.")


class MemoryReport(Contract):
    """Memory per GPU of one GPU pool, for the worst-loaded GPU."""

    pool: Literal["shared", "prefill", "decode"] = Field(
        description="Which GPUs: shared by both phases, or one pool of disaggregated serving."
    )
    weights_gb: float = Field(ge=0, description="Weight shard, experts included.")
    kv_cache_gb: float = Field(ge=0, description="KV cache for the batch over input plus output length.")
    activations_gb: float = Field(ge=0, description="Peak live activations.")
    workspace_gb: float = Field(ge=0, description="Runtime and communication buffers, CUDA graphs, fragmentation.")
    total_gb: float = Field(ge=0, description="Sum of the above.")
    capacity_gb: float = Field(gt=0, description="GPU memory.")
    fits: bool = Field(description="total_gb <= capacity_gb.")
    max_batch: int = Field(
        ge=0, description="Largest batch (sequences in flight on this layout) for which the same account still fits."
    )


class PricingReport(Contract):
    """How a cost report was priced: which backend priced what share of the time, on which data."""

    backend: Literal["measured", "roofline"] = Field(
        description="measured: NVIDIA's measured kernel tables (aiconfigurator-core) priced the kernels they cover "
        "and the calibrated roofline the rest; roofline: the roofline priced everything."
    )
    engine: str = Field(description="Serving engine whose tables and collectives were priced (vllm, sglang, trtllm).")
    data: str | None = Field(
        default=None, description="Measured data used: package version, system, engine and engine version."
    )
    prefill_measured_share: float = Field(
        ge=0, le=1, description="Share of the prefill's summed node time priced from measured tables."
    )
    decode_measured_share: float = Field(
        ge=0, le=1, description="Share of one decode step's summed node time priced from measured tables."
    )
    roofline_profile: str = Field(description="Roofline efficiency profile used for what the tables do not cover.")
    why_roofline: str = Field(default="", description="Why no measured tables were used, when none were.")
    error: str = Field(description="The measured error of the backend that priced the report.")


class CostReport(Contract):
    """What one batch of a DAG costs: its figures (source ``static_batch``), the per-phase schedule, memory per
    pool, and how it was priced."""

    figures: Figures = Field(description="TTFT (the prefill makespan), TPOT (one decode step), throughput, memory.")
    misses: list[Miss] = Field(default_factory=list, description="The targets these figures miss, with the gaps.")
    memory: list[MemoryReport] = Field(default_factory=list, description="Breakdown per pool.")
    prefill: PhaseCost = Field(description="Prefill schedule.")
    decode: PhaseCost = Field(description="One decode step's schedule.")
    kv_transfer_ms: float = Field(default=0.0, ge=0, description="KV handoff time in disaggregated serving.")
    notes: list[str] = Field(default_factory=list, description="Assumptions that shaped the figures.")
    pricing: PricingReport | None = Field(
        default=None, description="Which backend priced the figures, on which data, with its measured error."
    )
    speculation: SpeculationEffect | None = Field(
        default=None, description="What speculative decoding did to the deployment's step and TPOT; None: not on."
    )
    prefix_cache: PrefixCacheEffect | None = Field(
        default=None, description="What prefix caching saved (prefill work, KV, concurrency); None: not on."
    )
