"""Workload: what the deployment must serve and how well."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from .common import Contract, Objective, ServingEngine

__all__ = ["Workload"]


class Workload(Contract):
    """Sequence lengths, concurrency and service-level targets."""

    isl: int = Field(ge=1, description="Input (prompt) length in tokens.")
    osl: int = Field(ge=1, description="Output length in tokens.")
    batch: int = Field(
        default=1, ge=1, description="Concurrent sequences of the whole deployment (all replicas together)."
    )
    prefill_batch: int | None = Field(
        default=None,
        ge=1,
        description="Prompts prefilled together. None: the whole batch at once (static batching, the worst "
        "case for TTFT); a small number models continuous batching, which admits a few prompts at a time.",
    )
    ttft_ms: float | None = Field(default=None, gt=0, description="Target time to first token, ms; None for no target.")
    tpot_ms: float | None = Field(
        default=None, gt=0, description="Target time per output token, ms; None for no target."
    )
    objective: Objective = Field(
        default="latency", description="latency, throughput, or goodput (throughput under the targets)."
    )
    engine: ServingEngine = Field(
        default="vllm",
        description="Serving engine that runs the deployment: it selects the measured kernel tables and the "
        "collective implementation the cost model prices (vllm, sglang, trtllm).",
    )

    @field_validator("prefill_batch")
    @classmethod
    def _prefill_within_batch(cls, value: int | None, info: ValidationInfo) -> int | None:
        batch = info.data.get("batch")
        if value is not None and batch is not None and value > batch:
            raise ValueError(f"prefill_batch={value} exceeds batch={batch}")
        return value

    @property
    def prefill_sequences(self) -> int:
        """Prompts one prefill processes together."""
        return self.prefill_batch or self.batch

    def phase_batch(self, phase: str) -> int:
        """Sequences one step of ``phase`` serves: the prefill batch in prefill, the whole batch in decode."""
        return self.prefill_sequences if phase == "prefill" else self.batch
