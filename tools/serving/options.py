"""A priced deployment option: one layout, how many workers of it, how many sequences in flight, its figures."""

from __future__ import annotations

from typing import NamedTuple

from shardplan.contracts.figures import make_figures
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.targets import misses
from shardplan.contracts.workload import Workload
from shardplan.tools.cost.memory import pool_peaks
from shardplan.tools.serving.placement import replica_strategy

__all__ = ["PoolMemory", "deployment_memory", "priced_deployment", "concurrency_grid"]


class PoolMemory(NamedTuple):
    """The worst GPU of a replica (or of a prefill and decode worker pair) at its load."""

    used_gb: float
    fits: bool
    capacity_gb: float
    """That GPU's memory: with two GPU types, the GPU of the pool nearest its capacity."""


def deployment_memory(
    model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload, worker_concurrency: int,
    prefill_prompts: int = 0,
) -> PoolMemory:
    """The worst GPU's memory (GB) of one replica (or one prefill and one decode worker) at its own load, and
    whether it fits: what every option of that replica and load shares, whatever the number of workers. On two
    GPU types each pool is accounted on its own GPU, and the worst is the pool nearest its capacity."""
    sized = workload.at_concurrency(worker_concurrency, prefill_prompts if strategy.disaggregated
                                    else workload.static_prefill(worker_concurrency))
    decode_gpu = cluster.gpu_of("decode") if cluster.mixed else None
    peaks = pool_peaks(model, cluster.gpu, replica_strategy(strategy), sized, decode_gpu=decode_gpu)
    used, capacity, _ = max(peaks, key=lambda peak: peak[0] / peak[1])
    return PoolMemory(used, all(peak[2] for peak in peaks), capacity)


def priced_deployment(
    strategy: Strategy,
    workload: Workload,
    cluster: Cluster,
    *,
    budget: int,
    concurrency: int,
    worker_concurrency: int,
    ttft_ms: float,
    tpot_ms: float,
    requests_per_s: float,
    memory: PoolMemory | tuple[float, bool],
    prefill_prompts: int = 0,
    kv_transfer_ms: float = 0.0,
    running_cap: int | None = None,
) -> PricedDeployment:
    """A deployment priced by the serving model in steady state, judged against the workload's targets.

    ``memory`` is :func:`deployment_memory` of its replica at ``worker_concurrency`` (or its GB and fit alone, on
    the cluster's GPU); ``strategy.gpus`` are the GPUs it uses, of ``budget``.
    """
    figures = make_figures(
        "steady_state",
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        osl=workload.osl,
        tokens_per_s=requests_per_s * workload.osl,
        requests_per_s=requests_per_s,
        memory_per_gpu_gb=memory[0],
        gpu_memory_gb=memory.capacity_gb if isinstance(memory, PoolMemory) else cluster.gpu.memory_gb,
        fits=memory[1],
        gpus_used=strategy.gpus,
        gpu_budget=budget,
    )
    return PricedDeployment(
        strategy=strategy,
        concurrency=concurrency,
        worker_concurrency=worker_concurrency,
        prefill_prompts=prefill_prompts,
        kv_transfer_ms=kv_transfer_ms,
        running_cap=running_cap,
        figures=figures,
        misses=misses(figures, workload.targets),
    )


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
