"""One deployment, evaluated: its best concurrency for a given strategy, the DAG of one replica, its figures.

A strategy's ``dp`` counts replicas (or, disaggregated, each pool's workers). The serving model prices
the deployment in steady state (:mod:`shardplan.tools.serving.deployments`): the plan's ``figures``. The DAG
is built, validated and scheduled for one replica (or one prefill and one decode worker) on the GPUs it
occupies, at its own share of the concurrency: the plan's ``dag_cost``, one static batch, a record of its
own beside the deployment's figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardplan.contracts.arithmetic.feasibility import Problem, strategy_problems
from shardplan.contracts.feature_effects import PrefixCacheEffect
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import Deployment, FrontierPoint, PricedDeployment, WorkerPool
from shardplan.contracts.reports import MemoryReport
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.packing import max_workers, packs
from shardplan.text import agreeing, counted
from shardplan.tools.planning.evaluation import Evaluation, evaluate
from shardplan.tools.planning.prefix_cache import prefix_cache_effect
from shardplan.tools.search.ranking import ranked
from shardplan.tools.search.simulated import needs_simulation, simulate_option
from shardplan.tools.serving.deployments import given_deployment
from shardplan.tools.serving.placement import occupied_cluster, replica_strategy, split_pools_fit

__all__ = [
    "DeploymentEvaluation",
    "deployment_problems",
    "best_option",
    "evaluate_deployment",
    "simulated_figures_note",
    "two_pool_note",
    "deployment_section",
]


def deployment_problems(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> list[Problem]:
    """Every reason the deployment cannot run: its replica cannot be built, its workers do not pack into
    the cluster's nodes, or it needs more GPUs than the budget."""
    replica = replica_strategy(strategy)
    roomy = workload.at_concurrency(max(workload.sequences, 1 << 16))
    per_node, budget = cluster.gpus_per_node, cluster.world_size
    apart = cluster.mixed
    problems = strategy_problems(model, replica, roomy, replica.span(per_node, apart=apart), per_node, apart=apart)

    if strategy.gpus > budget:
        problems.append(
            Problem(
                "HIER-2",
                f"the deployment uses {counted(strategy.gpus, 'GPU')} but the budget is {budget}",
                f"use fewer replicas (dp) or a smaller layout: at most {counted(budget, 'GPU')}",
            )
        )
    sizes = [replica.prefill.gpus, replica.decode.gpus] if strategy.disaggregated else [replica.decode.gpus]
    for size in sizes:
        if not packs(size, per_node):
            problems.append(
                Problem(
                    "HIER-2",
                    f"a worker of {counted(size, 'GPU')} would split a node of {counted(per_node, 'GPU')} unevenly",
                    f"give each worker at most {counted(per_node, 'GPU')} or a multiple of {per_node}",
                )
            )
    prefill, decode = (strategy.prefill.dp, replica.prefill.gpus), (strategy.decode.dp, replica.decode.gpus)
    if strategy.disaggregated and strategy.gpus <= budget and not split_pools_fit(cluster, prefill, decode, budget):
        problems.append(
            Problem(
                "HIER-2",
                f"{counted(strategy.prefill.dp, 'prefill worker')} of {replica.prefill.gpus} and "
                f"{counted(strategy.decode.dp, 'decode worker')} of {counted(replica.decode.gpus, 'GPU')} cannot all "
                f"be placed on {counted(budget, 'GPU')} "
                f"in nodes of {per_node} without splitting a worker across nodes",
                f"use fewer workers, or worker sizes that fill nodes of {per_node} together",
            )
        )
    return problems


def best_option(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> PricedDeployment | None:
    """The best concurrency for exactly this deployment (its replicas or pool sizes fixed) under the workload's
    objective; None when no concurrency fits its memory."""
    options = ranked(given_deployment(model, cluster, strategy, workload), workload)
    return options[0] if options else None


@dataclass
class DeploymentEvaluation:
    """A deployment's best option (its steady-state figures), the evaluation of its replica DAG (one static batch),
    and what the figures rest on."""

    option: PricedDeployment | None
    evaluation: Evaluation
    cluster: Cluster
    """The GPUs one replica (or one prefill and decode worker pair) occupies."""
    notes: list[str]
    """What the deployment's figures rest on, one sentence each."""
    prefix_cache: PrefixCacheEffect | None = None
    """What prefix caching did to the deployment (the cost report's ``prefix_cache``); None when not on."""


def evaluate_deployment(
    model: ModelSpec,
    cluster: Cluster,
    strategy: Strategy,
    workload: Workload,
    chosen: PricedDeployment | None = None,
) -> DeploymentEvaluation:
    """Price the deployment (in steady state, then by simulation where the workload asks for it), and build,
    validate and price one batch of its replica DAG. ``chosen`` is the deployment's priced option when the
    caller already has it (the search's pick, simulated or not).

    Raises:
        StrategyError: the replica cannot be built.
    """
    option = chosen if chosen is not None and chosen.strategy == strategy else best_option(
        model, cluster, strategy, workload)
    simulation_note = None
    if option is not None and option.simulation is None and needs_simulation(workload):
        try:
            option = simulate_option(model, cluster, option, workload)
        except InputError as exc:
            simulation_note = f"the deployment could not be simulated ({exc}); its figures are the steady state's"
    replica = replica_strategy(strategy)
    # A shared-GPU replica may hold several decode replicas of the priced layout (see replica_strategy).
    groups = 1 if strategy.disaggregated else replica.decode.dp
    floor = max(replica.decode.dp * replica.decode.adp * replica.decode.mb, replica.prefill.adp * replica.prefill.mb)
    running = option.running_cap or option.worker_concurrency if option else workload.sequences
    per_worker = max(running * groups if option else running, floor)
    prompts = (min(option.prefill_prompts, per_worker) if option and strategy.disaggregated
               else workload.static_prefill(per_worker))
    sized = workload.at_concurrency(per_worker, prompts)
    occupied = occupied_cluster(cluster, replica)
    evaluation = evaluate(model, occupied, replica, sized)
    notes = [simulation_note] if simulation_note else []
    if option is not None and option.simulation is not None:
        notes.append(simulated_figures_note(option, option.simulation))
    elif option is not None:
        notes.append(
            f"TTFT, TPOT and throughput are the deployment's steady state under {workload.batching} batching "
            f"at {counted(option.concurrency, 'sequence')} in flight ({per_worker} per "
            f"{'decode worker' if strategy.disaggregated else 'replica'}); dag_cost is one batch of one replica's DAG"
        )
        if option.running_cap is not None:
            notes.append(
                f"{counted(option.worker_concurrency, 'sequence')} per replica are more than its KV cache and step "
                f"budget hold ({option.running_cap}): the engine runs {option.running_cap} and queues the rest, so "
                "TTFT includes their wait (Little's law over the closed loop)"
            )
        asked = math.ceil(workload.batch / strategy.decode.dp) if workload.batch and strategy.disaggregated else 0
        if option.worker_concurrency < asked:
            notes.append(
                f"the {counted(strategy.prefill.dp, 'prefill worker')} cannot feed {counted(asked, 'sequence')} per "
                "decode worker (no steady state: their queue would grow without bound); each decode worker runs the "
                f"largest batch they feed, {option.worker_concurrency}"
            )
    if cluster.mixed and option is not None:
        notes.append(two_pool_note(cluster, option.kv_transfer_ms))
    prefix = prefix_cache_effect(model, cluster, strategy, workload, option)
    return DeploymentEvaluation(option=option, evaluation=evaluation, cluster=occupied, notes=notes,
                                prefix_cache=prefix)


def two_pool_note(cluster: Cluster, kv_transfer_ms: float) -> str:
    """What a deployment on two GPU types rests on: each pool's GPU and the link its KV cache crosses."""
    return (
        f"prefill workers on {cluster.gpu.name}, priced on its tables or roofline and its memory; decode workers on "
        f"{cluster.gpu_of('decode').name}, likewise on its own; each on nodes of its own type (KV-5), so every "
        f"request's KV cache crosses the network between them, assumed {cluster.inter_node_bandwidth_gb_per_s:g} GB/s "
        f"per GPU and {cluster.inter_node_latency_us:g} us (the slower of the two GPUs' NICs, or the cluster file's "
        f"link): {kv_transfer_ms:.2f} ms per request, in TTFT"
    )


def simulated_figures_note(option: PricedDeployment, run: SimulationSummary) -> str:
    """Which of a simulated deployment's figures (``run``) are simulated and which analytic, in one sentence."""
    steady = option.steady_state
    return (
        f"simulated: TTFT, TPOT and request latency (means and P50/P90/P95/P99), the rate served and goodput come "
        f"from replaying {run.workload} through the engine's scheduler (seed {run.seed}); analytic: memory and "
        f"the pools' sizes (the memory model), the steady state it replaced (TTFT {steady.ttft_ms:,.1f} ms, TPOT "
        f"{steady.tpot_ms:.2f} ms, {steady.requests_per_s:.2f} requests/s at "
        f"{counted(option.concurrency, 'sequence')} in flight), the frontier, and dag_cost (one batch of one "
        "replica's DAG)"
    )


def _pool(role: str, workers: int, layout_spec: str, gpus: int, load: int, memory: MemoryReport,
          gpu: str | None = None) -> WorkerPool:
    return WorkerPool.model_validate(
        {
            "gpu": gpu,
            "role": role,
            "workers": workers,
            "layout": layout_spec,
            "gpus_per_worker": gpus,
            "concurrency_per_worker": max(load, 1),
            "max_concurrency_per_worker": memory.max_batch,
            "memory_per_gpu_gb": memory.total_gb,
            "weights_gb": memory.weights_gb,
            "kv_cache_gb": memory.kv_cache_gb,
            "capacity_gb": memory.capacity_gb,
        }
    )


def _idle_reason(cluster: Cluster, strategy: Strategy, workload: Workload, idle: int) -> str:
    if idle == 0:
        return ""
    per_node = cluster.gpus_per_node
    if strategy.disaggregated:
        return (f"the two pools are sized so their rates match; {counted(idle, 'more GPU', 'more GPUs')} would not "
                "balance them better")
    size = replica_strategy(strategy).decode.gpus
    room = max_workers(cluster.world_size, per_node, size)
    if workload.rate is not None:
        return (f"{counted(strategy.decode.dp, 'replica')} already {agreeing(strategy.decode.dp, 'serves', 'serve')} "
                f"{workload.rate:g} requests/s under the targets")
    if strategy.decode.dp < room:
        if workload.batch is not None and strategy.decode.dp >= workload.batch:
            return (f"{counted(workload.batch, 'sequence')} in flight keep at most "
                    f"{counted(workload.batch, 'replica')} busy")
        return f"more replicas would not help the {workload.objective} objective, and a larger layout is slower" + (
            " or would cross nodes" if size * 2 > per_node else ""
        )
    return (f"a replica takes {counted(size, 'GPU')}, and {idle} left over cannot hold another within whole nodes "
            f"of {per_node}")


def deployment_section(
    cluster: Cluster,
    strategy: Strategy,
    workload: Workload,
    evaluated: DeploymentEvaluation,
    frontier: list[PricedDeployment] | None = None,
) -> Deployment:
    """The plan's ``deployment``: replicas or pools, concurrency, GPUs used of the budget, memory per pool, and
    the frontier of the searched deployments with the chosen one marked."""
    option, memory = evaluated.option, evaluated.evaluation.cost.memory
    replica = replica_strategy(strategy)
    concurrency = option.concurrency if option else workload.sequences
    per_worker = option.worker_concurrency if option else workload.sequences
    if strategy.disaggregated:
        prompts = option.prefill_prompts if option else 1
        named = cluster.mixed  # two GPU types: each pool says its own
        pools = [
            _pool("prefill", strategy.prefill.dp, replica.prefill.to_spec(), replica.prefill.gpus, prompts, memory[0],
                  cluster.gpu_of("prefill").name if named else None),
            _pool("decode", strategy.decode.dp, replica.decode.to_spec(), replica.decode.gpus, per_worker, memory[-1],
                  cluster.gpu_of("decode").name if named else None),
        ]
    else:
        pools = [
            _pool("replica", strategy.decode.dp, replica.decode.to_spec(), replica.decode.gpus, per_worker, memory[0])
        ]
    idle = max(cluster.world_size - strategy.gpus, 0)
    chosen = strategy.to_spec()
    points = [
        FrontierPoint(
            strategy=c.spec,
            concurrency=c.concurrency,
            figures=c.figures,
            meets_targets=c.meets_targets,
            chosen=c.spec == chosen and c.concurrency == concurrency,
        )
        for c in frontier or []
    ]
    if option is not None and not any(p.chosen for p in points):
        points.append(
            FrontierPoint(
                strategy=chosen,
                concurrency=max(concurrency, 1),
                figures=option.figures,
                meets_targets=option.meets_targets,
                chosen=True,
            )
        )
        points.sort(key=lambda p: p.figures.tokens_per_s_per_user)
    return Deployment(
        concurrency=max(concurrency, 1),
        replicas=strategy.decode.dp,
        gpus_used=strategy.gpus,
        idle_gpus=idle,
        batching=workload.batching,
        prefill_workers=strategy.prefill.dp if strategy.disaggregated else None,
        decode_workers=strategy.decode.dp if strategy.disaggregated else None,
        gpu_budget=cluster.world_size,
        idle_reason=_idle_reason(cluster, strategy, workload, idle),
        kv_transfer_ms=option.kv_transfer_ms if option else 0.0,
        pools=pools,
        frontier=points,
    )
