"""A deployment option: one layout, how many workers of it, how many sequences in flight, its figures."""

from __future__ import annotations

from dataclasses import dataclass

from shardplan.contracts.strategy import Strategy

__all__ = ["DeploymentOption", "concurrency_grid"]


@dataclass(frozen=True)
class DeploymentOption:
    """One way to serve the workload: ``strategy`` (``dp`` = replicas, or the prefill and decode workers
    when disaggregated), with ``concurrency`` sequences in flight across it, and its steady-state figures."""

    strategy: Strategy
    concurrency: int
    """Sequences in flight across the whole deployment."""
    worker_concurrency: int
    """Sequences in flight on one replica (aggregated) or one decode worker (disaggregated)."""
    gpus_used: int
    ttft_ms: float
    tpot_ms: float
    tokens_per_s: float
    requests_per_s: float
    output_tokens: int
    """Tokens each request produces (osl)."""
    prefill_prompts: int = 0
    """Prompts a prefill worker's step takes together (disaggregated only)."""
    kv_transfer_ms: float = 0.0

    @property
    def replicas(self) -> int:
        """Independent copies serving the traffic (for disaggregated deployments: decode workers)."""
        return self.strategy.decode.dp

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus_used

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1e3 / self.tpot_ms if self.tpot_ms > 0 else 0.0

    @property
    def e2e_ms(self) -> float:
        """Request latency: first token, then one TPOT per further token."""
        return self.ttft_ms + (self.output_tokens - 1) * self.tpot_ms


def concurrency_grid(limit: int, floor: int = 1) -> list[int]:
    """Concurrencies worth pricing from ``floor`` up to ``limit``: 1, 2, 3, 4, 6, 8, 12, 16, ... and ``limit``.

    >>> concurrency_grid(20)
    [1, 2, 3, 4, 6, 8, 12, 16, 20]
    """
    values = {limit}
    power = 1
    while power <= limit:
        values.update(v for v in (power, power * 3 // 2) if v <= limit)
        power *= 2
    return sorted(v for v in values if v >= floor)
