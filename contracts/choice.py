"""The choice along one dimension of a request (GPU type or serving engine): each value's plan in one row, the
cheapest that meets the targets chosen.

A plan asked for several GPU types (``--gpu H100,H200,B200`` or ``any``) or several engines (``--engine auto`` or
``vllm,sglang``) answers with the plan of the winning value and this record beside it: for every value its
status, deployment and price, and the reason it lost. Values are compared by dollars per million output tokens
(prompts included), the figure that makes GPUs of different prices comparable; where no price is known, by
output tokens per second per GPU, which orders the same way on one GPU type. Both dimensions asked at once choose
the engine per GPU type first, then the type: ``gpu_choice`` rows then name each type's best engine.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shardplan.contracts.common import Contract

__all__ = ["ChoiceDimension", "OptionStatus", "ChoiceOption", "Choice", "cost_rank"]

ChoiceDimension = Literal["gpu", "engine"]
"""What the options differ in: the GPU type, or the serving engine (on one GPU type)."""

OptionStatus = Literal["chosen", "costlier", "slower", "tied", "misses_targets", "infeasible", "no_price"]


def cost_rank(usd_per_million_output_tokens: float | None, gpus_used: int | None,
              tokens_per_s_per_gpu: float | None = None,
              request_latency_ms: float | None = None) -> tuple[float, float, float, float]:
    """The order of deployments that meet the same targets: the fewest dollars per million output tokens, then
    the most output tokens/s per GPU (the order where no price is known: on one GPU type it is the dollars'
    order, and at a fixed rate it is the fewest GPUs), then the fewest GPUs, then the shortest request latency
    (TTFT + (osl - 1) x TPOT: at the same cost, the faster answer; the planner's own order among deployments of
    one GPU count at a rate). One rule for the sweep's best rows, the GPU choice and the engine choice.

    >>> sorted([(2.0, 8), (1.5, 16), (None, 4)], key=lambda r: cost_rank(*r))
    [(1.5, 16), (2.0, 8), (None, 4)]
    >>> sorted([(None, 8, 300.0, 900.0), (None, 8, 320.0, 990.0), (None, 8, 320.0, 950.0)],
    ...        key=lambda r: cost_rank(*r))
    [(None, 8, 320.0, 950.0), (None, 8, 320.0, 990.0), (None, 8, 300.0, 900.0)]
    """
    def missing_last(value: float | None, sign: float = 1.0) -> float:
        return sign * value if value is not None else float("inf")

    return (missing_last(usd_per_million_output_tokens), missing_last(tokens_per_s_per_gpu, -1.0),
            missing_last(gpus_used), missing_last(request_latency_ms))


class ChoiceOption(Contract):
    """One value's answer to the request (a GPU type, or an engine on it): its deployment and price, or why it
    has none, and what priced it."""

    gpu: str = Field(min_length=1, description="GPU catalog name.")
    engine: str | None = Field(default=None, description="Serving engine its plan was priced for (for a GPU type "
                               "under several engines: its best engine).")
    status: OptionStatus = Field(
        description="chosen (the winner); costlier (meets the targets at a higher price, or fewer tokens per GPU); "
        "slower (the same cost, a longer request latency); tied (meets them with the winner's very figures; the first "
        "listed wins a tie); misses_targets; "
        "infeasible (nothing fits); no_price (a GPU type that cannot be compared in dollars)."
    )
    pricing: Literal["measured", "roofline"] | None = Field(
        default=None, description="What priced its figures: NVIDIA's measured kernel tables for this GPU and "
        "engine (aiconfigurator-core), or the roofline where there are none; None: not planned.",
    )
    pricing_data: str | None = Field(
        default=None, description="The measured tables used (package, system, engine and its version), or why "
        "the roofline priced it.",
    )
    gpu_budget: int | None = Field(default=None, ge=1, description="GPUs this option was allowed.")
    gpus_used: int | None = Field(default=None, ge=1, description="GPUs its deployment uses.")
    deployment: str | None = Field(default=None, description="Its strategy spec (layout and replicas).")
    usd_per_hour: float | None = Field(default=None, ge=0, description="What its deployment costs an hour.")
    usd_per_million_output_tokens: float | None = Field(
        default=None, ge=0, description="Its dollars per million output tokens, prompts included."
    )
    tokens_per_s_per_gpu: float | None = Field(default=None, ge=0, description="Output tokens/s per GPU used.")
    e2e_ms: float | None = Field(default=None, ge=0, description="Its request latency, TTFT + (osl - 1) x TPOT, "
                                 "mean: what breaks a tie in price.")
    reason: str = Field(description="Why it won or lost, in one line with the numbers.")


class Choice(Contract):
    """Every value asked for along one dimension, the winner first, and the rule that chose it."""

    dimension: ChoiceDimension = Field(default="gpu", description="What the options differ in: gpu (GPU types) or "
                                       "engine (serving engines on one GPU type).")
    chosen: str | None = Field(
        description="The winning value (a GPU type or an engine): the cheapest that meets the targets; None when "
        "none does (the plan is then the cheapest best effort, or the first value's)."
    )
    basis: str = Field(description="The rule that chose, in one sentence.")
    budget: str = Field(description="The GPUs each option was allowed, and where that number comes from.")
    options: list[ChoiceOption] = Field(description="One row per value: the chosen first, then by price.")
