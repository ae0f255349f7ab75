"""Whether a model fits in GPU memory: the memory test the search screens layouts with, and the fewest GPUs
on which it passes.

One test serves the search, the minimum GPU count and the hints of an infeasible request
(:mod:`shardplan.tools.search.fit_hints`), so a hint never promises a fit that the search would refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.packing import max_workers
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.cost.memory import weight_bytes_per_gpu
from shardplan.tools.search.layouts import replica_layouts
from shardplan.tools.serving.aggregated import replica_capacity

__all__ = ["PhaseFilter", "any_layout", "Fit", "layout_capacity", "best_fit", "fits", "min_gpus_to_fit"]

PhaseFilter = Callable[[str, PhaseStrategy], bool]
"""Whether a layout may serve a phase (``prefill`` or ``decode``): the request's constraints."""


def any_layout(phase: str, layout: PhaseStrategy) -> bool:
    """The filter of a request without constraints: every layout may serve every phase."""
    return True


@dataclass(frozen=True)
class Fit:
    """The roomiest deployment of one replica layout on a cluster: ``sequences`` in flight over ``replicas``."""

    layout: PhaseStrategy
    replicas: int
    sequences: int
    weights_gb: float


def layout_capacity(model: ModelSpec, cluster: Cluster, layout: PhaseStrategy, workload: Workload) -> int:
    """Sequences one replica of ``layout`` holds at the workload's lengths; 0 when it cannot run at all.

    A replica runs when its weights fit the engine's share of memory (``gpu_memory_utilization``) and it
    holds at least one sequence per attention group and microbatch.
    """
    usable = cluster.gpu.memory_gb * 1e9 * workload.gpu_memory_utilization
    if weight_bytes_per_gpu(model, layout) > usable:
        return 0
    capacity = replica_capacity(model, cluster, layout, workload)
    return capacity if capacity >= layout.adp * layout.mb else 0


def best_fit(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    allowed: PhaseFilter = any_layout,
    *,
    smallest: int = 1,
) -> Fit | None:
    """The replica layout whose replicas hold the most sequences on the whole cluster, or None when none runs.

    Only layouts that ``allowed`` admits for both phases count (one pool serving both), and only replicas of
    at least ``smallest`` GPUs.
    """
    budget = cluster.world_size
    best: Fit | None = None
    for layout in replica_layouts(model, cluster, budget, workload, smallest=smallest):
        if not (allowed("prefill", layout) and allowed("decode", layout)):
            continue
        capacity = layout_capacity(model, cluster, layout, workload)
        if not capacity:
            continue
        replicas = max_workers(budget, cluster.gpus_per_node, layout.gpus)
        if best is None or capacity * replicas > best.sequences:
            best = Fit(layout, replicas, capacity * replicas, weight_bytes_per_gpu(model, layout) / 1e9)
    return best


def fits(fit: Fit | None, workload: Workload) -> bool:
    """Whether ``fit`` holds the workload's sequences in flight (one, when the search chooses the count)."""
    return fit is not None and fit.sequences >= workload.sequences


def min_gpus_to_fit(
    model: ModelSpec, cluster: Cluster, workload: Workload, allowed: PhaseFilter = any_layout, limit: int = 1024
) -> int | None:
    """The fewest GPUs above the cluster's own count, of its kind and node size, on which the model fits;
    None when no count up to ``limit`` does.

    A cluster smaller than one node grows in whole nodes of the GPU's usual size.
    """
    per_node = max(cluster.gpus_per_node, cluster.gpu.gpus_per_node) if cluster.nodes == 1 else cluster.gpus_per_node
    counts = sorted({n for n in (1, 2, 4) if n < per_node} | set(range(per_node, limit + 1, per_node)))
    tried = cluster.world_size  # the search itself found no replica up to this size
    for gpus in counts:
        if gpus <= cluster.world_size:
            continue
        trial = make_cluster(cluster.gpu, gpus, per_node)
        # Without a fixed batch one replica is enough, and replicas up to the last count were tried on it;
        # a fixed batch may need more replicas of a smaller layout.
        smallest = 1 if workload.batch else tried + 1
        if fits(best_fit(model, trial, workload, allowed, smallest=smallest), workload):
            return gpus
        tried = gpus
    return None
