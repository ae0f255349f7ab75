"""Argument models of the capabilities: unknown keys are errors, sizes and ranges are checked.

The strict base and the request arguments they share are in :mod:`~shardplan.tools.api.request_args`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from shardplan.limits import MAX_GPUS
from shardplan.tools.api.guards import SEARCH_DEPTH
from shardplan.tools.api.request_args import Args, RequestArgs

# RequestArgs is also exported here: callers that build requests (the tests among them) import it with the
# argument models of the tools.
__all__ = [
    "BuildArgs",
    "CostArgs",
    "DagArgs",
    "KnowledgeQuery",
    "ModelArgs",
    "NoArgs",
    "PlanArgs",
    "RequestArgs",
    "RuleArgs",
    "SearchArgs",
    "StrategyArgs",
]


class KnowledgeQuery(Args):
    """Search the knowledge base of inference-parallelism rules."""

    query: str = Field(min_length=1, max_length=400, description="Free text, e.g. 'sequence parallelism in decode'.")
    k: int = Field(default=5, ge=1, le=20, description="How many sections to return.")


class RuleArgs(Args):
    """Look up one knowledge rule."""

    rule_id: str = Field(min_length=1, max_length=20, description="Rule ID such as DEC-1 or TP-3.")


class NoArgs(Args):
    """No arguments."""


class ModelArgs(Args):
    """Name one model."""

    model: str = Field(
        min_length=1, max_length=300, description="Bundled model name (llama-3.1-8b) or config.json path."
    )


class PlanArgs(RequestArgs):
    """Plan a deployment with the deterministic planner."""

    detail: bool = Field(
        default=False,
        description="Also return the whole plan under 'plan' (critical paths of both phases, every rule checked, "
        "every runner-up: about 150 KB for DeepSeek-V3); the compact summary otherwise.",
    )
    include_dag: bool = Field(default=False, description="Return the whole plan with its DAG (large; implies detail).")

    @model_validator(mode="after")
    def _dag_needs_detail(self) -> PlanArgs:
        # The DAG is part of the whole plan, so asking for it asks for the whole plan.
        if self.include_dag:
            self.detail = True
        return self


class SearchArgs(RequestArgs):
    """Search the strategy space."""

    top: int = Field(default=5, ge=1, le=SEARCH_DEPTH, description="How many ranked strategies to return.")
    detail: bool = Field(
        default=False, description="Also return every deployment the search kept and the whole frontier, with "
        "figures, under 'detail'."
    )


class StrategyArgs(RequestArgs):
    """A request and one strategy to check."""

    strategy: str = Field(
        min_length=1,
        max_length=300,
        description=(
            "SPEC: 'tp=4,pp=2' for both phases, or 'prefill:sp=2,tp=4;decode:adp=2,tp=4', "
            "';disagg' for separate pools. "
            "Degrees: dp, pp, adp, sp (prefill only), tp, ep, mb; GPUs used = dp*pp*adp*sp*tp."
        ),
    )


class BuildArgs(StrategyArgs):
    """Build the DAG of a strategy."""

    include_dag: bool = Field(default=False, description="Return the whole DAG JSON too (large).")


class DagArgs(Args):
    """A DAG (or a plan holding one) as JSON text or an object."""

    dag_json: str | dict[str, Any] = Field(
        description="The DAG as JSON text or object, e.g. from build_dag(include_dag=true)."
    )
    detail: bool = Field(
        default=False, description="Also return the whole validation report (every violation, every rule ID) "
        "under 'report'."
    )


class CostArgs(StrategyArgs):
    """Price a DAG, or a strategy for a request."""

    model: str | None = Field(  # type: ignore[assignment]
        default=None, min_length=1, max_length=300, description="Model, when pricing a strategy."
    )
    gpus: int | None = Field(  # type: ignore[assignment]
        default=None, ge=1, le=MAX_GPUS, description="GPUs, when pricing a strategy."
    )
    strategy: str | None = Field(  # type: ignore[assignment]
        default=None, min_length=1, max_length=300, description="SPEC, when pricing a strategy."
    )
    dag_json: str | dict[str, Any] | None = Field(
        default=None, description="A DAG as JSON text or object, instead of a strategy."
    )
    detail: bool = Field(
        default=False, description="Also return the whole cost report (critical paths of both phases, notes) under "
        "'report'."
    )

    @model_validator(mode="after")
    def _one_source(self) -> CostArgs:
        if (self.dag_json is None) == (self.strategy is None):
            raise ValueError("give either dag_json, or model, gpus and strategy")
        if self.strategy is not None and (self.model is None or self.gpus is None):
            raise ValueError("pricing a strategy needs model and gpus")
        return self
