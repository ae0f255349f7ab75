"""Workload: what the deployment must serve and how well."""

from __future__ import annotations

from pydantic import Field

from .common import Contract, Objective

__all__ = ["Workload"]


class Workload(Contract):
    """Sequence lengths, concurrency and service-level targets."""

    isl: int = Field(ge=1, description="Input (prompt) length in tokens.")
    osl: int = Field(ge=1, description="Output length in tokens.")
    batch: int = Field(
        default=1, ge=1, description="Concurrent sequences per model replica step (batch or concurrency)."
    )
    ttft_ms: float | None = Field(default=None, gt=0, description="Target time to first token, ms; None for no target.")
    tpot_ms: float | None = Field(
        default=None, gt=0, description="Target time per output token, ms; None for no target."
    )
    objective: Objective = Field(
        default="latency", description="latency, throughput, or goodput (throughput under the targets)."
    )
