"""Aggregated deployments: replicas of one layout, prefill and decode sharing each replica's GPUs."""

from __future__ import annotations

import math
from collections.abc import Callable

from shardplan.bisection import largest_passing
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.targets import within
from shardplan.contracts.workload import Workload
from shardplan.packing import max_workers
from shardplan.tools.cost.memory import memory_report
from shardplan.tools.serving.at_rate import load_for_rate
from shardplan.tools.serving.options import PoolMemory, concurrency_grid, deployment_memory, priced_deployment
from shardplan.tools.serving.steady import ServingPoint, serving_point
from shardplan.tools.serving.steps import StepPricer

__all__ = ["replica_capacity", "aggregated_options"]

_LIGHTEST_LOAD = 1e-3
"""The lightest mean load (sequences in flight) a rate is solved at: a numerical floor for the bisection, not a model
figure. Below it the engine is idle 99.9% of the time and no figure moves by more than that share of a step."""


def replica_capacity(model: ModelSpec, cluster: Cluster, layout: PhaseStrategy, workload: Workload) -> int:
    """Sequences one replica of ``layout`` holds in memory at the workload's lengths and headroom, its prompts
    prefilled as the workload asks (static batching's prefill batch), 0: none."""
    replica = layout.model_copy(update={"dp": 1})
    tokens = workload.isl + workload.osl
    return memory_report(model, cluster.gpu, replica, workload, "shared", tokens, replica).max_batch


def aggregated_options(
    model: ModelSpec,
    cluster: Cluster,
    layout: PhaseStrategy,
    workload: Workload,
    *,
    budget: int,
    replicas: int | None = None,
    pricer: StepPricer | None = None,
    replica_counts: Callable[[int], bool] | None = None,
) -> list[PricedDeployment]:
    """The deployments worth pricing with replicas of ``layout`` on up to ``budget`` GPUs.

    With a fixed ``workload.batch``, each replica count shares it; with a ``workload.rate``, each replica count
    that serves the rate does so at the load the rate puts on it (figures at the rate itself); otherwise the
    latency objective serves one sequence on one replica and the others fill the budget with replicas at every
    concurrency that fits. ``replicas`` fixes the replica count (a given strategy's ``dp``); ``replica_counts``
    admits only the counts it accepts (a request's bound on ``dp``): the latency objective then takes the fewest
    of them, the others the most.
    """
    replica = layout.model_copy(update={"dp": 1})
    most = max_workers(budget, cluster.gpus_per_node, replica.gpus)
    if replicas is not None:
        most = min(most, replicas) if replicas * replica.gpus <= budget else 0
    capacity = replica_capacity(model, cluster, replica, workload)
    floor = replica.adp * replica.mb  # every attention group and microbatch needs a sequence
    if most < 1 or capacity < floor:
        return []
    pricer = pricer or StepPricer.for_workload(model, cluster, replica, workload)
    # Each running sequence takes one token of a step's budget, or its K + 1 verified positions under speculation;
    # every attention data-parallel rank schedules with a budget of its own (vLLM's DP ranks, SGLang's and
    # TensorRT-LLM's attention-DP ranks), as :func:`~.steady.continuous_point` prices them.
    step_room = replica.adp * ((workload.max_batched_tokens - 1) // pricer.verify_tokens)
    limit = min(capacity, step_room) if workload.batching == "continuous" else capacity
    counts = [replicas] if replicas is not None else [
        count for count in range(1, most + 1) if replica_counts is None or replica_counts(count)
    ]
    if not counts:
        return []
    if workload.rate is not None and workload.batch is None:
        return _at_rate(model, cluster, replica, workload, pricer, counts, limit, budget)
    plans: list[tuple[int, int]] = []  # (replicas, concurrency per replica)
    if workload.batch is not None:
        plans = [(r, math.ceil(workload.batch / r)) for r in counts if r <= workload.batch]
    elif workload.objective == "latency":
        plans = [(counts[0], max(1, floor))]
    else:
        plans = [(counts[-1], c) for c in concurrency_grid(limit, floor)]
    options: list[PricedDeployment] = []
    priced: dict[int, tuple[ServingPoint, PoolMemory] | None] = {}

    def price(count: int, per_replica: int) -> PricedDeployment | None:
        # Past what the KV cache (or the step budget) holds, a continuous-batching engine runs the most it can
        # and queues the rest (a fixed concurrency is a closed loop); static batching has no such queue.
        running = min(per_replica, limit) if workload.batching == "continuous" else per_replica
        if not floor <= running <= limit:
            return None
        if running not in priced:
            point = serving_point(pricer, running, workload)
            shared = Strategy(prefill=replica, decode=replica)
            priced[running] = None if point is None else (
                point, deployment_memory(model, cluster, shared, workload, running)
            )
        entry = priced[running]
        if entry is None:
            return None
        point, memory = entry
        ttft_s = point.ttft_s
        if running < per_replica:
            # Little's law over the whole closed loop: per_replica = rate x (wait + TTFT + (osl - 1) TPOT).
            ttft_s = max(ttft_s, per_replica / point.requests_per_s - (workload.osl - 1) * point.tpot_s)
        deployed = replica.model_copy(update={"dp": count})
        option = priced_deployment(
            Strategy(prefill=deployed, decode=deployed),
            workload,
            cluster,
            budget=budget,
            concurrency=workload.batch or count * per_replica,
            worker_concurrency=per_replica,
            ttft_ms=ttft_s * 1e3,
            tpot_ms=point.tpot_s * 1e3,
            requests_per_s=count * point.requests_per_s,
            memory=memory,
            running_cap=running if running < per_replica else None,
        )
        options.append(option)
        return option

    for count, per_replica in plans:
        price(count, per_replica)
    if workload.batch is None and (workload.ttft_ms or workload.tpot_ms):
        # The load the latency targets allow: the largest concurrency within them, between two grid points.
        count = plans[0][0] if plans else 1
        targets = workload.targets

        def within_latency(per_replica: int) -> bool:
            entry = priced.get(per_replica)
            return entry is not None and within("ttft", entry[0].ttft_s * 1e3, targets) and within(
                "tpot", entry[0].tpot_s * 1e3, targets
            )

        def priced_within_latency(per_replica: int) -> bool:
            price(count, per_replica)
            return within_latency(per_replica)

        met = sorted(c for c in priced if within_latency(c))
        if met:
            above = [c for c in priced if c > met[-1] and priced[c] is not None and not within_latency(c)]
            largest_passing(met[-1], min(above, default=met[-1]), priced_within_latency, relative=1 / 32)
    return options


def _at_rate(
    model: ModelSpec,
    cluster: Cluster,
    replica: PhaseStrategy,
    workload: Workload,
    pricer: StepPricer,
    counts: list[int],
    limit: int,
    budget: int,
) -> list[PricedDeployment]:
    """One deployment per replica count that serves the workload's rate: each replica at the load that rate puts
    on it (:func:`~.at_rate.load_for_rate`), its figures those of that load, its requests/s the rate itself."""
    assert workload.rate is not None
    shared = Strategy(prefill=replica, decode=replica)

    def at(load: float) -> ServingPoint | None:
        # Static batching runs whole batches; continuous batching's mean load need not be a whole number.
        return serving_point(pricer, math.ceil(load) if workload.batching == "static" else load, workload)

    def served(load: float) -> float | None:
        point = at(load)
        return point.requests_per_s if point is not None else None

    # A rate below what one sequence in flight serves leaves the engine idle between requests: continuous batching's
    # mean load goes below one (Little's law), static batching still runs a whole batch of one.
    lightest = 1.0 if workload.batching == "static" else _LIGHTEST_LOAD
    options = []
    for count in counts:
        load = load_for_rate(served, workload.rate / count, lightest, float(limit))
        point = at(load) if load is not None else None
        if load is None or point is None:
            continue  # this many replicas cannot serve the rate
        running = math.ceil(load)
        deployed = replica.model_copy(update={"dp": count})
        options.append(
            priced_deployment(
                Strategy(prefill=deployed, decode=deployed),
                workload,
                cluster,
                budget=budget,
                concurrency=max(1, math.ceil(count * load)),
                worker_concurrency=running,
                ttft_ms=point.ttft_s * 1e3,
                tpot_ms=point.tpot_s * 1e3,
                requests_per_s=workload.rate,
                memory=deployment_memory(model, cluster, shared, workload, running),
            )
        )
    return options
