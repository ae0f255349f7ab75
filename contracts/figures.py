"""Figures: what a priced deployment delivers, one record however it was priced.

A DAG's cost report (one static batch), the serving model's steady state and the engine simulator each give
the same record, tagged with its ``source``. Search candidates, alternatives, frontier points, tool results,
the terminal, the report and the agent all read it, so a figure has one name and one meaning everywhere.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from shardplan.contracts.common import Contract

__all__ = ["FiguresSource", "LatencyMetric", "Percentiles", "Figures", "make_figures", "headline"]

FiguresSource = Literal["static_batch", "steady_state", "simulation"]
"""Where figures come from: ``static_batch``, one batch of the DAG scheduled (its prefill, then its decode
steps); ``steady_state``, the analytic serving model of the deployment (continuous batching, or static
batching batch after batch); ``simulation``, a run of the engine over a request trace."""

LatencyMetric = Literal["ttft", "tpot", "e2e"]


class Percentiles(Contract):
    """Percentiles of one latency over the requests of a run."""

    model_config = ConfigDict(frozen=True)

    p50_ms: float = Field(ge=0, description="Median.")
    p90_ms: float = Field(ge=0, description="90th percentile.")
    p95_ms: float = Field(ge=0, description="95th percentile.")
    p99_ms: float = Field(ge=0, description="99th percentile.")


class Figures(Contract):
    """The figures of one priced deployment (means; percentiles where the source measured a distribution)."""

    model_config = ConfigDict(frozen=True)

    source: FiguresSource = Field(description="How the figures were obtained: static_batch, steady_state, simulation.")
    ttft_ms: float = Field(ge=0, description="Time to first token, mean.")
    tpot_ms: float = Field(ge=0, description="Time per output token after the first, mean.")
    e2e_ms: float = Field(ge=0, description="Request latency, TTFT + (osl - 1) x TPOT, mean.")
    tokens_per_s: float = Field(ge=0, description="Output tokens per second of the whole deployment.")
    tokens_per_s_per_gpu: float = Field(ge=0, description="Output tokens per second per GPU the deployment uses.")
    tokens_per_s_per_budget_gpu: float = Field(
        ge=0,
        description="Output tokens per second per GPU of the budget, idle ones counting as zero: what the "
        "throughput objective ranks.",
    )
    tokens_per_s_per_user: float = Field(ge=0, description="Output tokens per second one sequence sees (1000 / TPOT).")
    requests_per_s: float = Field(ge=0, description="Requests per second served.")
    memory_per_gpu_gb: float = Field(ge=0, description="Memory of the worst-loaded GPU.")
    gpu_memory_gb: float = Field(gt=0, description="Memory of one GPU.")
    fits: bool = Field(description="Every GPU's share fits its memory (within the engine's headroom).")
    gpus_used: int = Field(ge=1, description="GPUs the deployment uses.")
    gpu_budget: int = Field(ge=1, description="GPUs the request made available.")
    percentiles: dict[LatencyMetric, Percentiles] = Field(
        default_factory=dict,
        description="Percentiles of TTFT, TPOT and request latency where the source measured a distribution "
        "(simulation); empty for the analytic sources.",
    )


def make_figures(
    source: FiguresSource,
    *,
    ttft_ms: float,
    tpot_ms: float,
    osl: int,
    tokens_per_s: float,
    requests_per_s: float,
    memory_per_gpu_gb: float,
    gpu_memory_gb: float,
    fits: bool,
    gpus_used: int,
    gpu_budget: int,
    e2e_ms: float | None = None,
    percentiles: dict[LatencyMetric, Percentiles] | None = None,
) -> Figures:
    """Figures from the priced quantities; the per-GPU, per-user and request-latency figures are derived here,
    the one place that derives them. A simulation measures the request latency and the percentiles itself
    (``e2e_ms``, ``percentiles``): with lengths that vary, the mean latency is not TTFT + (osl - 1) x TPOT.

    >>> f = make_figures("steady_state", ttft_ms=100, tpot_ms=20, osl=11, tokens_per_s=800, requests_per_s=72.7,
    ...                  memory_per_gpu_gb=60, gpu_memory_gb=80, fits=True, gpus_used=2, gpu_budget=4)
    >>> f.e2e_ms, f.tokens_per_s_per_gpu, f.tokens_per_s_per_budget_gpu, f.tokens_per_s_per_user
    (300.0, 400.0, 200.0, 50.0)
    """
    return Figures(
        source=source,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        e2e_ms=e2e_ms if e2e_ms is not None else ttft_ms + (osl - 1) * tpot_ms,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / gpus_used,
        tokens_per_s_per_budget_gpu=tokens_per_s / max(gpu_budget, gpus_used),
        tokens_per_s_per_user=1e3 / tpot_ms if tpot_ms > 0 else 0.0,
        requests_per_s=requests_per_s,
        memory_per_gpu_gb=memory_per_gpu_gb,
        gpu_memory_gb=gpu_memory_gb,
        fits=fits,
        gpus_used=gpus_used,
        gpu_budget=max(gpu_budget, gpus_used),
        percentiles=percentiles or {},
    )


def headline(figures: Figures) -> str:
    """The figures in one line, as the terminal, the tool results and the agent print them.

    >>> f = make_figures("steady_state", ttft_ms=410, tpot_ms=27.13, osl=256, tokens_per_s=3552, requests_per_s=13.9,
    ...                  memory_per_gpu_gb=100.4, gpu_memory_gb=141, fits=True, gpus_used=14, gpu_budget=16)
    >>> headline(f)
    'TTFT 410.0 ms | TPOT 27.13 ms | 3,552 tok/s (253.7/GPU, 36.9/user) | memory 100.4 of 141 GB per GPU'
    """
    return (
        f"TTFT {figures.ttft_ms:.1f} ms | TPOT {figures.tpot_ms:.2f} ms | {figures.tokens_per_s:,.0f} tok/s "
        f"({figures.tokens_per_s_per_gpu:.1f}/GPU, {figures.tokens_per_s_per_user:.1f}/user) | memory "
        f"{figures.memory_per_gpu_gb:.1f} of {figures.gpu_memory_gb:g} GB per GPU"
        + ("" if figures.fits else " (does not fit)")
    )
