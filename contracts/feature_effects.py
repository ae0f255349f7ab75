"""What the engine features a request turns on did to its figures: speculative decoding and prefix caching.

A plan records the features in its request (``workload.speculation``, ``workload.prefix_hit``) and their effect
here, in its cost report, so a reader sees both what was assumed and what it bought.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shardplan.contracts.common import Contract

__all__ = ["SpeculationEffect", "PrefixCacheEffect"]


class SpeculationEffect(Contract):
    """Speculative decoding in the chosen deployment: its step, and the same deployment without it."""

    tokens_per_step: float = Field(ge=1, description="Output tokens a verify step emits per sequence (accepted + 1).")
    verify_tokens: int = Field(ge=2, description="Tokens per sequence the target model runs in a verify step (K + 1).")
    step_ms: float = Field(ge=0, description="One decode step with speculation: drafting plus verifying.")
    draft_ms: float = Field(ge=0, description="The drafting part of that step.")
    step_without_ms: float = Field(ge=0, description="One plain decode step of the same deployment and batch.")
    tpot_without_ms: float = Field(ge=0, description="TPOT of the same deployment and batch without speculation.")
    draft_memory_gb: float = Field(
        ge=0, description="Memory per GPU the drafter adds: its weights and its KV cache (MTP layers, EAGLE-3 head or "
        "draft model)."
    )
    notes: list[str] = Field(default_factory=list, description="How the draft and verify work were priced.")


class PrefixCacheEffect(Contract):
    """Prefix caching in the chosen deployment: the hit rate used and what it saved."""

    hit: float = Field(ge=0, le=1, description="Share of prompt tokens found in the cache.")
    source: Literal["request", "trace", "simulation"] = Field(
        description="Where the hit rate comes from: the request's prefix_hit, the trace's prefix groups, or a "
        "simulated run's LRU block cache."
    )
    prefill_tokens_computed: float = Field(ge=0, description="Prompt tokens per request that prefill computes.")
    prefill_work_saved: float = Field(
        ge=0, le=1, description="Share of a prompt's prefill time saved (attention still reads the cached tokens)."
    )
    ttft_without_ms: float = Field(ge=0, description="TTFT of the same deployment without prefix caching.")
    shared_kv_gb: float = Field(ge=0, description="KV cache per GPU held once for the shared prefix blocks.")
    max_concurrency: int | None = Field(
        default=None, ge=0, description="Sequences per replica (or decode worker) that memory holds with the cache."
    )
    max_concurrency_without: int | None = Field(
        default=None, ge=0, description="The same without sharing the prefix blocks."
    )
    prefill_gpus_without: int | None = Field(
        default=None, ge=0, description="Split deployments: prefill GPUs the same rate needs without the cache."
    )
    notes: list[str] = Field(default_factory=list, description="The policy assumed (one shared prefix, routing).")
