"""Plan: the one JSON document a planning run produces; everything else is derived from it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .common import Contract, DType
from .constraints import Constraints
from .dag import DAG
from .reports import CostReport, ValidationReport
from .strategy import Strategy
from .workload import Workload

__all__ = ["PlanRequest", "Alternative", "Plan", "PlanStatus"]

PlanStatus = Literal["ok", "targets_missed", "infeasible"]


class PlanRequest(Contract):
    """What was asked: model, hardware and workload."""

    model: str = Field(description="Bundled model name or path to a config.json.")
    gpu: str = Field(description="GPU catalog name.")
    gpus: int = Field(ge=1, description="GPUs available.")
    gpus_per_node: int | None = Field(default=None, ge=1, description="GPUs per node; the GPU's default when None.")
    cluster: str | None = Field(default=None, description="Path of a cluster YAML, when one was given.")
    workload: Workload = Field(description="Lengths, batch, targets and objective.")
    weight_dtype: DType | None = Field(default=None, description="Override of the model's weight format.")
    kv_dtype: DType | None = Field(default=None, description="Override of the KV-cache format.")
    policy: str = Field(default="builtin", description="Planner policy: builtin or openai:MODEL.")
    constraints: Constraints | None = Field(
        default=None, description="What the deployment must respect (degree bounds, placement, serving); None: nothing."
    )
    assumptions: list[str] = Field(
        default_factory=list,
        description="Values the request did not give and that were defaulted or guessed, one line each.",
    )


class Alternative(Contract):
    """A strategy that was considered and not chosen."""

    strategy: str = Field(description="SPEC text.")
    ttft_ms: float = Field(ge=0, description="Predicted TTFT.")
    tpot_ms: float = Field(ge=0, description="Predicted TPOT.")
    tokens_per_s_per_gpu: float = Field(ge=0, description="Predicted throughput per GPU.")
    tokens_per_s_per_user: float = Field(ge=0, description="Predicted per-user speed.")
    why_not: str = Field(description="Why it lost to the chosen one.")


class Plan(Contract):
    """The answer: strategy per phase, its DAG, the validators' verdict and the cost model's figures."""

    shardplan_version: str = Field(description="Version that wrote the plan.")
    request: PlanRequest = Field(description="The request.")
    status: PlanStatus = Field(description="ok; targets_missed (best effort shown); infeasible (nothing fits).")
    feasible: bool = Field(
        default=False,
        description="True only when status is ok: the plan fits and meets its targets (derived from status).",
    )
    strategy: Strategy | None = Field(description="Chosen strategy; None when infeasible.")
    dag: DAG | None = Field(default=None, description="The strategy's DAG.")
    validation: ValidationReport | None = Field(default=None, description="Validators' verdict on the DAG.")
    cost: CostReport | None = Field(default=None, description="Cost model's figures.")
    alternatives: list[Alternative] = Field(default_factory=list, description="Runners-up, best first.")
    explanation: str = Field(default="", description="Why this strategy, in a few sentences, citing rule IDs.")
    min_gpus: int | None = Field(
        default=None, description="When infeasible for memory: the fewest GPUs that would fit."
    )
    messages: list[str] = Field(default_factory=list, description="What the planner noticed along the way.")
    assumptions: list[str] = Field(
        default_factory=list,
        description="Every value that was defaulted or guessed rather than given, one line each (the request's "
        "assumptions first).",
    )

    @model_validator(mode="after")
    def _derive_feasible(self) -> Plan:
        # One source of truth: a plan is feasible exactly when its status is ok.
        self.feasible = self.status == "ok"
        # The request's assumptions always reach the answer, whoever built the plan.
        missing = [line for line in self.request.assumptions if line not in self.assumptions]
        self.assumptions = missing + self.assumptions
        return self
