"""Deployment search: layouts x concurrency x replicas x aggregated/disaggregated pools, on up to the GPUs given.

Every replica layout that packs into the cluster's nodes and holds the weights is priced by the serving
model (:mod:`shardplan.tools.serving`) at the concurrencies that fit its memory; each becomes a
deployment with as many replicas as the objective wants. Disaggregated deployments pair the best prefill
and decode workers and size both pools. Objectives (``Workload.objective``, ``Workload.rate``):

* ``latency``: lowest request latency, TTFT + (osl - 1) x TPOT, then the fewest GPUs;
* ``throughput`` / ``goodput``: the most output tokens/s on the budget, then the fewest GPUs;
* a ``rate``: the fewest GPUs that serve that many requests/s, at the lowest concurrency that does;

always among deployments meeting the TTFT/TPOT targets first, then by how little they miss them.
"""

from __future__ import annotations

import time
from itertools import takewhile

from pydantic import Field

from shardplan.contracts.common import Contract
from shardplan.contracts.constraints import Constraints
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.model_math import weight_bytes
from shardplan.contracts.plan import NearTie
from shardplan.contracts.reports import CostReport
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Batching, Workload
from shardplan.errors import InfeasibleError
from shardplan.tools.cost.estimate import stated_error_pct, target_misses
from shardplan.tools.cost.memory import memory_reports
from shardplan.tools.cost.pricing import pricing_backend
from shardplan.tools.search.constraint_checks import phase_violations, satisfies, unsatisfiable
from shardplan.tools.search.fit_hints import fit_hints
from shardplan.tools.search.fitting import PhaseFilter, any_layout, layout_capacity, min_gpus_to_fit
from shardplan.tools.search.layouts import enumerate_strategies, replica_layouts
from shardplan.tools.search.ranking import near_tie, pareto_front, prefer_aggregated, rank_key, shortfall
from shardplan.tools.serving.aggregated import aggregated_options
from shardplan.tools.serving.disaggregated import decode_workers, pool_frontier, prefill_worker
from shardplan.tools.serving.options import DeploymentOption
from shardplan.tools.serving.placement import max_workers, replica_strategy
from shardplan.tools.serving.steps import StepPricer

__all__ = [
    "Candidate",
    "SearchResult",
    "search",
    "candidate_from_cost",
    "candidate_from_option",
]


class Candidate(Contract):
    """One deployment with its predicted figures."""

    strategy: Strategy = Field(description="Degrees per phase; dp counts replicas (or the workers of each pool).")
    spec: str = Field(description="SPEC text.")
    ttft_ms: float = Field(description="Predicted TTFT.")
    tpot_ms: float = Field(description="Predicted TPOT.")
    tokens_per_s: float = Field(description="Output tokens/s of the deployment.")
    tokens_per_s_per_gpu: float = Field(description="Output tokens/s per GPU used.")
    tokens_per_s_per_user: float = Field(description="1000 / TPOT.")
    memory_per_gpu_gb: float = Field(description="Worst GPU's memory.")
    fits: bool = Field(description="Memory fits on every GPU.")
    meets_targets: bool = Field(description="TTFT, TPOT and rate targets met.")
    target_misses: list[str] = Field(default_factory=list, description="Missed targets with gaps.")
    scored_by: str = Field(description="'serving' (steady-state serving model) or 'schedule' (full DAG simulation).")
    concurrency: int = Field(default=1, ge=1, description="Sequences in flight across the deployment.")
    replicas: int = Field(default=1, ge=1, description="Replicas (aggregated) or decode workers (disaggregated).")
    gpus_used: int = Field(default=0, ge=0, description="GPUs the deployment uses; 0 when not recorded.")
    idle_gpus: int = Field(default=0, ge=0, description="GPUs of the budget left unused.")
    batching: Batching = Field(default="continuous", description="continuous or static batching.")
    requests_per_s: float = Field(default=0.0, ge=0, description="Requests per second served.")


class SearchResult(Contract):
    """Ranked deployments, best first, and the Pareto frontier of tokens/s/GPU against tokens/s/user."""

    objective: str = Field(description="What was optimised.")
    candidates: list[Candidate] = Field(description="Fitting deployments, best first.")
    frontier: list[Candidate] = Field(
        description="Pareto-optimal deployments over every priced concurrency, among those meeting the targets "
        "(all when none does)."
    )
    evaluated: int = Field(description="Deployments priced.")
    rejected: dict[str, int] = Field(
        description="Layouts set aside before pricing, counted by reason: a knowledge rule ID ('MEM-1': did not "
        "fit in memory), 'constraints', or 'constraint <text>'; tools.rejections says each in words."
    )
    seconds: float = Field(description="Wall time of the search.")
    near_tie: NearTie | None = Field(
        default=None,
        description="Set when the leading candidates are within the model's stated error of each other (their "
        "order is not meaningful); None otherwise.",
    )
    simpler_preferred: str | None = Field(
        default=None,
        description="Set when an aggregated deployment is ranked first over a split one that leads it by less "
        "than the model's stated error on tokens/s: the sentence naming both and the gap.",
    )


def candidate_from_option(
    model: ModelSpec, cluster: Cluster, option: DeploymentOption, workload: Workload, budget: int
) -> Candidate:
    """The Candidate of a priced deployment, with its memory per GPU at its own concurrency."""
    strategy = option.strategy
    replica = replica_strategy(strategy)
    sized = workload.at_concurrency(
        option.worker_concurrency, option.prefill_prompts if strategy.disaggregated else None
    )
    memory = memory_reports(model, cluster.gpu, replica, sized)
    misses = target_misses(workload, option.ttft_ms, option.tpot_ms, option.requests_per_s)
    return Candidate(
        strategy=strategy,
        spec=strategy.to_spec(),
        ttft_ms=option.ttft_ms,
        tpot_ms=option.tpot_ms,
        tokens_per_s=option.tokens_per_s,
        tokens_per_s_per_gpu=option.tokens_per_s_per_gpu,
        tokens_per_s_per_user=option.tokens_per_s_per_user,
        memory_per_gpu_gb=max(m.total_gb for m in memory),
        fits=all(m.fits for m in memory),
        meets_targets=not misses,
        target_misses=misses,
        scored_by="serving",
        concurrency=option.concurrency,
        replicas=option.replicas,
        gpus_used=option.gpus_used,
        idle_gpus=budget - option.gpus_used,
        batching=workload.batching,
        requests_per_s=option.requests_per_s,
    )


def candidate_from_cost(strategy: Strategy, workload: Workload, cost: CostReport) -> Candidate:
    """A Candidate for a deployment already priced into a cost report."""
    misses = list(cost.target_misses)
    return Candidate(
        strategy=strategy,
        spec=strategy.to_spec(),
        ttft_ms=cost.ttft_ms,
        tpot_ms=cost.tpot_ms,
        tokens_per_s=cost.tokens_per_s,
        tokens_per_s_per_gpu=cost.tokens_per_s_per_gpu,
        tokens_per_s_per_user=cost.tokens_per_s_per_user,
        memory_per_gpu_gb=cost.memory_per_gpu_gb,
        fits=cost.fits,
        meets_targets=not misses,
        target_misses=misses,
        scored_by="serving",
        gpus_used=strategy.gpus,
        requests_per_s=cost.tokens_per_s / workload.osl,
        batching=workload.batching,
    )


def _screen(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    rejected: dict[str, int],
    allowed: PhaseFilter = any_layout,
    keep: int = 2,
) -> list[StepPricer]:
    """The replica layouts worth pricing in full, each with its (memoised) step pricer.

    Every layout that holds the weights within the engine's share of memory is priced once at a probe
    shape: one decode step of the replica's share of a fixed batch, else of a single sequence for the
    latency objective, else of the concurrency a replica would carry (64 or what fits); per GPU count the
    ``keep`` fastest by that probe go on. A layout that ``allowed`` admits for neither phase is dropped
    before pricing.
    """
    budget = cluster.world_size
    by_size: dict[int, list[tuple[float, StepPricer]]] = {}
    for layout in replica_layouts(model, cluster, budget, workload):
        if not (allowed("prefill", layout) or allowed("decode", layout)):
            rejected["constraints"] = rejected.get("constraints", 0) + 1
            continue
        capacity = layout_capacity(model, cluster, layout, workload)
        if not capacity:
            rejected["MEM-1"] = rejected.get("MEM-1", 0) + 1
            continue
        pricer = StepPricer.for_workload(model, cluster, layout, workload)
        if workload.batch is not None:  # a fixed concurrency is what every objective is served at
            probe = -(-workload.batch // max_workers(budget, cluster.gpus_per_node, layout.gpus))
        elif workload.objective == "latency" and workload.rate is None:
            probe = 1
        else:
            probe = 64
        probe = max(1, min(probe, capacity))
        seconds = pricer.decode_sample_s(probe)
        score = seconds if probe == 1 else -probe / (seconds * layout.gpus)
        by_size.setdefault(layout.gpus, []).append((score, pricer))
    kept = []
    for scored in by_size.values():
        scored.sort(key=lambda item: item[0])
        kept += [pricer for _, pricer in scored[:keep]]
    return kept


def _aggregated(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    pricers: list[StepPricer],
    allowed: PhaseFilter = any_layout,
) -> list[DeploymentOption]:
    options: list[DeploymentOption] = []
    for pricer in pricers:
        if not (allowed("prefill", pricer.layout) and allowed("decode", pricer.layout)):
            continue  # one pool serves both phases with this layout
        options += aggregated_options(model, cluster, pricer.layout, workload, budget=cluster.world_size, pricer=pricer)
    return options


def _disaggregated(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    pricers: list[StepPricer],
    allowed: PhaseFilter = any_layout,
    keep: int = 5,
) -> list[DeploymentOption]:
    """Pools of the ``keep`` best prefill workers (requests/s per GPU, within the TTFT target) and the ``keep``
    best decode layouts (requests/s per GPU within the TPOT target), each at every batch within that target,
    every sizing of each pair."""
    budget = cluster.world_size
    prefills = []
    decodes = []
    for pricer in pricers:
        if pricer.layout.gpus >= budget:
            continue
        worker = prefill_worker(model, cluster, pricer.layout, workload, pricer)
        # At light load a request rides a step of one prompt: the least TTFT the worker can give.
        within_ttft = worker is not None and (workload.ttft_ms is None or worker.single_s * 1e3 <= workload.ttft_ms)
        if worker is not None and within_ttft and allowed("prefill", pricer.layout):
            prefills.append(worker)
        grid = decode_workers(model, cluster, pricer.layout, workload, pricer)
        # The step grows with the batch: the batches within the TPOT target are the grid's first ones.
        meeting = list(takewhile(lambda w: workload.tpot_ms is None or w.step_s * 1e3 <= workload.tpot_ms, grid))
        if meeting and allowed("decode", pricer.layout):
            # Every batch within the TPOT target, not only the fastest: a pool sizing whose prefill workers
            # cannot feed the largest batch is served by a smaller one (see pool_options and pool_frontier).
            decodes.append((pricer, meeting))
    prefills.sort(key=lambda w: -w.requests_per_s / w.layout.replica_gpus)
    decodes.sort(key=lambda item: -max(w.requests_per_s / w.layout.replica_gpus for w in item[1]))
    options: list[DeploymentOption] = []
    for p in prefills[:keep]:
        for decode_pricer, batches in decodes[:keep]:
            options += pool_frontier(model, cluster, p, batches, workload, budget=budget, pricer=decode_pricer)
    return options


def search(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    *,
    top: int = 5,
    disaggregated: bool = True,
    constraints: Constraints | None = None,
) -> SearchResult:
    """Find the best deployments of ``model`` on up to the GPUs of ``cluster`` serving ``workload``.

    Only layouts and deployments that respect ``constraints`` are screened and priced.

    Raises:
        InfeasibleError: no layout fits in memory (``min_gpus`` says how many GPUs would), or none respects
            the constraints (the message names them).
    """
    began = time.perf_counter()
    rejected: dict[str, int] = {}
    per_node = cluster.gpus_per_node
    if constraints is not None and constraints.serving:
        disaggregated = constraints.serving == "disaggregated"

    split_asked = constraints is not None and constraints.serving == "disaggregated"

    def allowed(phase: str, layout: PhaseStrategy) -> bool:
        return constraints is None or not phase_violations(phase, layout, constraints, per_node)

    pricers = _screen(model, cluster, workload, rejected, allowed)
    options = [] if split_asked else _aggregated(model, cluster, workload, pricers, allowed)
    split = (
        disaggregated
        and workload.batching == "continuous"
        and (split_asked or (workload.batch is None and workload.objective != "latency"))
        and workload.osl > 1
        and cluster.world_size >= 2
    )
    if split:
        options += _disaggregated(model, cluster, workload, pricers, allowed)
    if constraints is not None:
        kept = [o for o in options if satisfies(o.strategy, constraints, per_node)]
        if len(kept) < len(options):
            rejected["constraints"] = rejected.get("constraints", 0) + len(options) - len(kept)
        options = kept
    if not options and workload.rate is not None:
        # Nothing serves the rate within the budget: show the most the budget serves, and the shortfall.
        options = _aggregated(model, cluster, workload.model_copy(update={"rate": None}), pricers, allowed)
    if not options and constraints is not None and any(k.startswith("constraint") for k in rejected):
        _raise_for_constraints(model, cluster, workload, constraints)
    if not options:
        need = min_gpus_to_fit(model, cluster, workload, allowed)
        weights_gb = weight_bytes(model) / 1e9
        capacity_gb = cluster.world_size * cluster.gpu.memory_gb
        raise InfeasibleError(
            f"{model.name} does not fit on {cluster.world_size} x {cluster.gpu.name}: its weights are "
            f"{weights_gb:.0f} GB ({model.weight_dtype}) and {workload.sequences} sequence(s) at "
            f"{workload.isl}+{workload.osl} tokens add KV cache, against {capacity_gb:.0f} GB of GPU memory less "
            f"runtime workspace and the {1 - workload.gpu_memory_utilization:.0%} headroom"
            + (
                f"; the fewest {cluster.gpu.name} GPUs that fit is {need}" if need else "; no GPU count up to 1024 fits"
            ),
            min_gpus=need,
            hints=fit_hints(model, cluster, workload, need, allowed),
        )
    key = rank_key(workload.objective, workload)
    options.sort(key=key)
    backend = pricing_backend(cluster, workload.engine)
    options, simpler = prefer_aggregated(options, workload, stated_error_pct(backend, "tokens/s"))
    budget = cluster.world_size
    ranked = [candidate_from_option(model, cluster, o, workload, budget) for o in options[: max(top, 1)]]
    # The frontier a user can pick from: the deployments meeting the targets (all of them when none does).
    meeting = [o for o in options if shortfall(workload, o) == 0]
    frontier_options = pareto_front(meeting or options)
    return SearchResult(
        objective="rate" if workload.rate is not None else workload.objective,
        candidates=ranked,
        frontier=[candidate_from_option(model, cluster, o, workload, budget) for o in frontier_options],
        evaluated=len(options),
        rejected=rejected,
        seconds=time.perf_counter() - began,
        near_tie=near_tie(ranked, workload, backend),
        simpler_preferred=simpler,
    )


def _raise_for_constraints(model: ModelSpec, cluster: Cluster, workload: Workload, constraints: Constraints) -> None:
    """Raise the InfeasibleError of a search the constraints emptied, naming the constraints to blame."""
    per_node = cluster.gpus_per_node
    pool = list(enumerate_strategies(model, cluster.world_size, workload, gpus_per_node=per_node))
    allowed = [s for s in pool if satisfies(s, constraints, per_node)]
    where = f"{model.name} on {cluster.world_size} x {cluster.gpu.name} ({per_node} per node)"
    if not allowed:
        blamed = unsatisfiable(pool, constraints, per_node)
        raise InfeasibleError(
            f"no deployment of {where} satisfies the constraint{'s' if len(blamed) > 1 else ''} "
            f"{', '.join(blamed)}; relax {'them' if len(blamed) > 1 else 'it'} or change the GPU count"
        )
    raise InfeasibleError(
        f"the {len(allowed)} strategies of {where} that satisfy the constraints {', '.join(constraints.to_texts())} "
        f"do not fit in memory ({model.weight_dtype} weights, {workload.sequences} sequence(s) at "
        f"{workload.isl}+{workload.osl} tokens); relax the constraints or add GPUs"
    )
