"""Closed vocabularies shared by every contract."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["DType", "AttentionDType", "Phase", "Objective", "ServingEngine", "Contract", "DTYPE_BYTES"]

DType = Literal["fp32", "bf16", "fp16", "fp8", "int8", "fp4"]
"""Numeric formats for weights, activations and the KV cache."""

AttentionDType = Literal["bf16", "fp8"]
"""Formats attention's matrix products run in: bf16, or fp8 on FP8 tensor cores over an FP8 KV cache."""

Phase = Literal["prefill", "decode", "handoff"]
"""Top-level branch of the DAG. ``handoff`` holds only the KV transfer of disaggregated serving."""

Objective = Literal["latency", "throughput", "goodput"]
ServingEngine = Literal["vllm", "sglang", "trtllm"]
"""What a search optimises: lowest latency, highest throughput, or highest throughput under targets."""

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    # MXFP4: 4-bit elements plus one 8-bit scale per block of 32 (gpt-oss's 65 GB checkpoint checks out).
    "fp4": 0.5 + 1 / 32,
}
"""Bytes per element, block scales included."""


class Contract(BaseModel):
    """Base of every contract: unknown keys are an error, values are checked on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False, frozen=False)
