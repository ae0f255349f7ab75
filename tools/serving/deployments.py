"""Pricing deployments, one way for the search and for a given deployment alike.

The search prices every layout it screens through :func:`split_deployments` (and the aggregated options of
:mod:`.aggregated`); a plan for a given deployment (``-s SPEC``, a proposal, a review) prices exactly that
deployment through :func:`given_deployment`, which assembles the same prefill worker, decode workers and pool
frontier with its worker counts fixed. When nothing meets the targets at a requested rate, both also price the
deployments at full load and judge them against the rate (:func:`serving_rate_or_most`): the most they serve,
and the shortfall.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.serving.aggregated import aggregated_options
from shardplan.tools.serving.disaggregated import (
    DecodeWorker,
    PrefillWorker,
    batches_within_tpot,
    decode_worker,
    decode_workers,
    pool_frontier,
    pool_options,
    prefill_worker,
)
from shardplan.tools.serving.placement import replica_strategy
from shardplan.tools.serving.steps import StepPricer

__all__ = ["serving_rate_or_most", "split_deployments", "given_deployment"]


def serving_rate_or_most(
    price: Callable[[Workload], list[PricedDeployment]], workload: Workload
) -> list[PricedDeployment]:
    """``price(workload)``; when none of those meets every target of a workload with a rate, the deployments priced
    at full load (no rate) too, judged against the rate: the most they serve, and the shortfall, so that the
    ranking weighs a rate missed by a little against a latency missed by a little. Full load is every concurrency
    up to what the deployment holds, whatever the objective: under ``latency`` without a rate only one sequence
    would be priced, and the shortfall stated would be that of one sequence in flight."""
    options = price(workload)
    if workload.rate is None or any(o.meets_targets for o in options):
        return options
    full = workload.model_copy(update={"rate": None, "objective": "throughput"})
    return options + [o.judged(workload.targets) for o in price(full)]


def split_deployments(
    model: ModelSpec,
    cluster: Cluster,
    prefill: PrefillWorker,
    pricer: StepPricer,
    batches: list[DecodeWorker],
    workload: Workload,
    *,
    budget: int,
    counts: tuple[int, int] | None = None,
    fallbacks: Sequence[DecodeWorker] = (),
) -> list[PricedDeployment]:
    """The pools of ``prefill`` workers and decode workers of ``pricer``'s layout at each of ``batches``
    (:func:`~.disaggregated.pool_frontier`); ``counts`` fixes the workers (x, y). When none of ``batches``
    has a steady state (the prefill pool cannot feed them), the largest of ``fallbacks`` that has one."""
    options = pool_frontier(model, cluster, prefill, batches, workload, budget=budget, pricer=pricer, counts=counts)
    for decode in sorted(fallbacks, key=lambda d: -d.sequences) if not options else []:
        options = pool_options(model, cluster, prefill, decode, workload, budget=budget, counts=counts, pricer=pricer)
        if options:
            break
    return options


def given_deployment(
    model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload
) -> list[PricedDeployment]:
    """Every concurrency worth pricing for exactly this deployment (its replicas or pool sizes fixed); empty when
    none fits its memory. A given deployment is priced on the GPUs it uses when they exceed the cluster."""
    budget = max(cluster.world_size, strategy.gpus)
    if not strategy.disaggregated:
        layout, replicas = strategy.decode, strategy.decode.dp
        return serving_rate_or_most(
            lambda sized: aggregated_options(model, cluster, layout, sized, budget=budget, replicas=replicas), workload
        )
    replica = replica_strategy(strategy)
    x, y = strategy.prefill.dp, strategy.decode.dp
    # Each pool on its own GPU (one and the same on a one-type cluster).
    pricer = StepPricer.for_workload(model, cluster.pool("decode"), replica.decode, workload)
    prefill = prefill_worker(model, cluster.pool("prefill"), replica.prefill, workload)
    if prefill is None:
        return []
    grid = decode_workers(model, cluster.pool("decode"), replica.decode, workload, pricer)
    if workload.batch is not None:
        # The batch asked for first; when the prefill pool cannot feed it, the largest smaller one it can. A decode
        # worker is priced with a sequence in every attention group and microbatch, as a replica is.
        fixed = math.ceil(workload.batch / y)
        if fixed < replica.decode.adp * replica.decode.mb:
            return []
        batches, fallbacks = [decode_worker(pricer, fixed, workload)], [d for d in grid if d.sequences < fixed]
    else:
        batches, fallbacks = grid, []

    def price(sized: Workload) -> list[PricedDeployment]:
        # At a rate a decode worker takes the load the rate puts on it, up to its batch: as in the search, only up
        # to the largest grid batch within the TPOT target (when one is), or the worker would be pushed between
        # grid points to the last millisecond of the target, which full load (pool_frontier) never does, and
        # ``plan -s`` would serve rates the search says the same pools cannot.
        at_rate = batches_within_tpot(batches, sized) if sized.rate is not None and sized.batch is None else []
        return split_deployments(
            model, cluster, prefill, pricer, at_rate or batches, sized, budget=budget, counts=(x, y),
            fallbacks=fallbacks,
        )

    return serving_rate_or_most(price, workload)
