"""The choice among several GPU types: each type's plan in one row, the cheapest that meets the targets chosen.

A plan asked for several GPU types (``--gpu H100,H200,B200`` or ``any``) answers with the plan of the winning type
and this record beside it: for every type its status, deployment and price, and the reason it lost. Types are
compared by dollars per million output tokens (prompts included), the figure that makes GPUs of different prices
comparable; a type without a price cannot be compared in dollars and says so.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shardplan.contracts.common import Contract

__all__ = ["GpuOptionStatus", "GpuOption", "GpuChoice", "cost_rank"]

GpuOptionStatus = Literal["chosen", "costlier", "misses_targets", "infeasible", "no_price"]


def cost_rank(usd_per_million_output_tokens: float | None, gpus_used: int | None) -> tuple[float, float]:
    """The order of deployments that meet the same targets: the fewest dollars per million output tokens, then
    the fewest GPUs (the only order where no price is known). One rule for the sweep's best rows and the GPU choice.

    >>> sorted([(2.0, 8), (1.5, 16), (None, 4)], key=lambda r: cost_rank(*r))
    [(1.5, 16), (2.0, 8), (None, 4)]
    """
    price = usd_per_million_output_tokens if usd_per_million_output_tokens is not None else float("inf")
    return price, gpus_used if gpus_used is not None else float("inf")


class GpuOption(Contract):
    """One GPU type's answer to the request: its deployment and price, or why it has none."""

    gpu: str = Field(min_length=1, description="GPU catalog name.")
    status: GpuOptionStatus = Field(
        description="chosen (the winner); costlier (meets the targets at a higher price); misses_targets; "
        "infeasible (nothing fits); no_price (cannot be compared in dollars)."
    )
    gpu_budget: int | None = Field(default=None, ge=1, description="GPUs this type was allowed.")
    gpus_used: int | None = Field(default=None, ge=1, description="GPUs its deployment uses.")
    deployment: str | None = Field(default=None, description="Its strategy spec (layout and replicas).")
    usd_per_hour: float | None = Field(default=None, ge=0, description="What its deployment costs an hour.")
    usd_per_million_output_tokens: float | None = Field(
        default=None, ge=0, description="Its dollars per million output tokens, prompts included."
    )
    tokens_per_s_per_gpu: float | None = Field(default=None, ge=0, description="Output tokens/s per GPU used.")
    reason: str = Field(description="Why it won or lost, in one line with the numbers.")


class GpuChoice(Contract):
    """Every GPU type asked for, the winner first, and the rule that chose it."""

    chosen: str | None = Field(
        description="The cheapest type that meets the targets; None when none does (the plan is then the cheapest "
        "best effort, or the first type's)."
    )
    basis: str = Field(description="The rule that chose, in one sentence.")
    budget: str = Field(description="The GPUs each type was allowed, and where that number comes from.")
    options: list[GpuOption] = Field(description="One row per GPU type: the chosen first, then by price.")
