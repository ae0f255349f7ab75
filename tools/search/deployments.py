"""Deployment search: layouts x concurrency x replicas x aggregated/disaggregated pools, on up to the GPUs given.

Every replica layout that packs into the cluster's nodes and holds the weights is priced by the serving
model (:mod:`shardplan.tools.serving`) at the concurrencies that fit its memory; each becomes a
deployment with as many replicas as the objective wants. Disaggregated deployments pair the best prefill
and decode workers and size both pools. Objectives (``Workload.objective``, ``Workload.rate``):

* ``latency``: lowest request latency, TTFT + (osl - 1) x TPOT, then the fewest GPUs;
* ``throughput`` / ``goodput``: the most output tokens/s on the budget, then the fewest GPUs;
* a ``rate``: the fewest GPUs that serve that many requests/s, at the lowest concurrency that does;

always among deployments meeting the TTFT/TPOT targets first, then by how little they miss them. Percentile
targets and described traffic are judged by simulating the leaders (:mod:`.simulated`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import Field

from shardplan.contracts.arithmetic.feasibility import needed_sequences_text, sequences_needed
from shardplan.contracts.arithmetic.model_math import weight_bytes
from shardplan.contracts.common import Contract
from shardplan.contracts.constraints import Constraints
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import NearTie, PricedDeployment
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.targets import within
from shardplan.contracts.workload import Workload
from shardplan.errors import InfeasibleError
from shardplan.packing import max_workers
from shardplan.text import agreeing, counted
from shardplan.tools.cost.estimate import stated_error_pct
from shardplan.tools.cost.pricing import pricing_backend
from shardplan.tools.search.constraint_checks import phase_violations, satisfies, unsatisfiable
from shardplan.tools.search.fit_hints import fit_hints
from shardplan.tools.search.fitting import PhaseFilter, any_layout, layout_capacity, min_gpus_to_fit
from shardplan.tools.search.layouts import enumerate_strategies, replica_layouts
from shardplan.tools.search.ranking import near_tie, pareto_front, prefer_aggregated, ranked
from shardplan.tools.search.simulated import SIMULATED_REQUESTS, needs_simulation, simulate_leaders
from shardplan.tools.serving.aggregated import aggregated_options
from shardplan.tools.serving.deployments import serving_rate_or_most, split_deployments
from shardplan.tools.serving.disaggregated import batches_within_tpot, decode_workers, prefill_worker
from shardplan.tools.serving.steps import StepPricer

__all__ = ["SearchResult", "search"]


class SearchResult(Contract):
    """Ranked deployments, best first, and the Pareto frontier of tokens/s/GPU against tokens/s/user."""

    objective: str = Field(description="What was optimised.")
    candidates: list[PricedDeployment] = Field(description="Fitting deployments, best first.")
    frontier: list[PricedDeployment] = Field(
        description="Pareto-optimal deployments (tokens/s per GPU of the budget against tokens/s/user) over every "
        "priced concurrency, among those meeting the targets (all when none does), by tokens/s/user."
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
    simulated: int = Field(
        default=0,
        description="Leading candidates whose figures come from simulating the engine (they are ranked first, by "
        "those figures); 0 where every figure is the steady state's.",
    )
    notes: list[str] = Field(default_factory=list, description="What the search did beyond pricing, one sentence each.")
    simpler_preferred: str | None = Field(
        default=None,
        description="Set when an aggregated deployment is ranked first over a split one that leads it by less "
        "than the model's stated error on tokens/s: the sentence naming both and the gap.",
    )


def _screen(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    rejected: dict[str, int],
    allowed: PhaseFilter = any_layout,
    keep: int = 2,
    prefill_keep: int = 0,
) -> tuple[list[StepPricer], list[StepPricer]]:
    """The replica layouts worth pricing in full, each with its (memoised) step pricer; and those worth pricing as
    prefill workers of split pools.

    Every layout that holds the weights within the engine's share of memory is priced once at a probe
    shape: one decode step of the replica's share of a fixed batch, else of a single sequence for the
    latency objective, else of the concurrency a replica would carry (64 or what fits); per GPU count the
    ``keep`` fastest by that probe go on. A layout that ``allowed`` admits for neither phase is dropped
    before pricing. A decode step says little of a layout's prefill (Mixtral-8x7B on 2 H100: tp=2,ep=2 decodes
    faster than tp=2, which prefills 2,048-token prompts faster), so the prefill workers are those kept, and per
    GPU count the ``prefill_keep`` layouts that prefill the most prompts per second per GPU in a step of one
    prompt per attention group (the step a prefill worker gives a lone request).
    """
    budget = cluster.world_size
    by_size: dict[int, list[tuple[float, StepPricer]]] = {}
    by_prefill: dict[int, list[tuple[float, StepPricer]]] = {}
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
        if prefill_keep and layout.gpus < budget and allowed("prefill", layout):  # a split pool leaves GPUs over
            prompts = layout.adp * layout.mb
            by_prefill.setdefault(layout.gpus, []).append((pricer.prefill_s(prompts) * layout.gpus / prompts, pricer))
    kept = []
    for scored in by_size.values():
        scored.sort(key=lambda item: item[0])
        kept += [pricer for _, pricer in scored[:keep]]
    prefill = list(kept)
    for scored in by_prefill.values():
        scored.sort(key=lambda item: item[0])
        prefill += [pricer for _, pricer in scored[:prefill_keep] if pricer not in prefill]
    return kept, prefill


def _aggregated(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    pricers: list[StepPricer],
    allowed: PhaseFilter = any_layout,
    replica_counts: Callable[[int], bool] | None = None,
) -> list[PricedDeployment]:
    options: list[PricedDeployment] = []
    for pricer in pricers:
        if not (allowed("prefill", pricer.layout) and allowed("decode", pricer.layout)):
            continue  # one pool serves both phases with this layout
        options += aggregated_options(model, cluster, pricer.layout, workload, budget=cluster.world_size, pricer=pricer,
                                      replica_counts=replica_counts)
    return options


def _disaggregated(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    pricers: list[StepPricer],
    allowed: PhaseFilter = any_layout,
    keep: int = 5,
    decode_pricers: list[StepPricer] | None = None,
    prefill_pricers: list[StepPricer] | None = None,
) -> list[PricedDeployment]:
    """Pools of the ``keep`` best prefill workers (requests/s per GPU, within the TTFT target) and the ``keep``
    best decode layouts (requests/s per GPU within the TPOT target), each at every batch within that target,
    every sizing of each pair. On two GPU types ``pricers`` price the prefill pool's GPU and ``decode_pricers``
    the decode pool's; on one, ``pricers`` serve both. ``prefill_pricers``, when given, are the prefill
    workers' layouts instead of ``pricers`` (:func:`_screen`)."""
    budget = cluster.world_size
    prefills = []
    decodes = []
    for pricer in pricers if prefill_pricers is None else prefill_pricers:
        if pricer.layout.gpus >= budget:
            continue
        worker = prefill_worker(model, pricer.cluster, pricer.layout, workload, pricer)
        # At light load a request rides a step of one prompt: the least TTFT the worker can give.
        within_ttft = worker is not None and within("ttft", worker.single_s * 1e3, workload.targets)
        if worker is not None and within_ttft and allowed("prefill", pricer.layout):
            prefills.append(worker)
    for pricer in pricers if decode_pricers is None else decode_pricers:
        if pricer.layout.gpus >= budget:
            continue
        grid = decode_workers(model, pricer.cluster, pricer.layout, workload, pricer)
        meeting = batches_within_tpot(grid, workload)
        if meeting and allowed("decode", pricer.layout):
            # Every batch within the TPOT target, not only the fastest: a pool sizing whose prefill workers
            # cannot feed the largest batch is served by a smaller one (see pool_options and pool_frontier).
            decodes.append((pricer, meeting))
    prefills.sort(key=lambda w: -w.requests_per_s / w.layout.replica_gpus)
    decodes.sort(key=lambda item: -max(w.requests_per_s / w.layout.replica_gpus for w in item[1]))
    options: list[PricedDeployment] = []
    for p in prefills[:keep]:
        for decode_pricer, batches in decodes[:keep]:
            options += split_deployments(model, cluster, p, decode_pricer, batches, workload, budget=budget)
    return options


def search(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    *,
    top: int = 5,
    disaggregated: bool = True,
    constraints: Constraints | None = None,
    simulated_requests: int = SIMULATED_REQUESTS,
) -> SearchResult:
    """Find the best deployments of ``model`` on up to the GPUs of ``cluster`` serving ``workload``.

    Only layouts and deployments that respect ``constraints`` are screened and priced. A workload with a
    percentile target or a traffic description has its leading candidates simulated (``simulated_requests``
    requests each) and ranked by the simulated figures (:mod:`.simulated`).

    Raises:
        InfeasibleError: no layout fits in memory (``min_gpus`` says how many GPUs would), or none respects
            the constraints (the message names them).
    """
    began = time.perf_counter()
    rejected: dict[str, int] = {}
    per_node = cluster.gpus_per_node
    _raise_for_unsearched(constraints, workload)
    if constraints is not None and constraints.serving:
        disaggregated = constraints.serving == "disaggregated"

    split_asked = constraints is not None and constraints.serving == "disaggregated"

    # Layouts are screened as one replica's (dp 1); the replica count comes with the deployment, so a bound on dp
    # is checked on the deployment (``satisfies`` in ``price``), not on the layout: "dp=2" ruled out every layout.
    screening = None if constraints is None else constraints.model_copy(
        update={"degrees": [bound for bound in constraints.degrees if bound.dim != "dp"]})

    def allowed(phase: str, layout: PhaseStrategy) -> bool:
        return screening is None or not phase_violations(phase, layout, screening, per_node)

    def replica_counts(count: int) -> bool:
        return constraints is None or all(bound.holds(count) for bound in constraints.degrees if bound.dim == "dp")

    # Two GPU types serve only split pools, each pool's layouts screened on its own GPU.
    split_asked = split_asked or cluster.mixed
    # One request at a time (latency, no rate) gains nothing from split pools; a rate ranks by GPUs, then latency,
    # whatever the objective, and split pools can serve it on fewer GPUs or sooner.
    split = (
        (disaggregated or cluster.mixed)
        and workload.batching == "continuous"
        and (split_asked or (workload.batch is None and (workload.objective != "latency" or workload.rate is not None)))
        and workload.osl > 1
        and cluster.world_size >= 2
    )
    pricers, prefill_pricers = _screen(model, cluster.pool("prefill"), workload, rejected, allowed,
                                       prefill_keep=2 if split else 0)
    decode_pricers = _screen(model, cluster.pool("decode"), workload, rejected, allowed)[0] if cluster.mixed else None

    def price(sized: Workload) -> list[PricedDeployment]:
        options = [] if split_asked else _aggregated(model, cluster, sized, pricers, allowed, replica_counts)
        if split:
            options += _disaggregated(model, cluster, sized, pricers, allowed, decode_pricers=decode_pricers,
                                      prefill_pricers=prefill_pricers)
        if constraints is None:
            return options
        kept = [o for o in options if satisfies(o.strategy, constraints, per_node)]
        if len(kept) < len(options):
            rejected["constraints"] = rejected.get("constraints", 0) + len(options) - len(kept)
        return kept

    # Deployments priced twice (two batches of a grid that a rate loads alike) are kept once.
    options = list({(o.spec, o.concurrency, o.worker_concurrency): o for o in serving_rate_or_most(price, workload)}
                   .values())
    if not options and constraints is not None and any(k.startswith("constraint") for k in rejected):
        _raise_for_constraints(model, cluster, workload, constraints)
    if not options and cluster.mixed:
        _raise_for_two_pools(model, cluster, workload, allowed)
    if not options:
        need = min_gpus_to_fit(model, cluster, workload, allowed)
        weights_gb = weight_bytes(model) / 1e9
        capacity_gb = cluster.world_size * cluster.gpu.memory_gb
        raise InfeasibleError(
            f"{model.name} does not fit on {cluster.world_size} x {cluster.gpu.name}: its weights are "
            f"{weights_gb:.0f} GB ({model.weight_dtype}) and {counted(workload.sequences, 'sequence')} at "
            f"{workload.isl}+{counted(workload.osl, 'token')} {agreeing(workload.sequences, 'adds', 'add')} KV cache, "
            f"against {capacity_gb:.0f} GB of GPU "
            f"memory less "
            f"runtime workspace and the {1 - workload.gpu_memory_utilization:.0%} headroom"
            + (
                f"; the fewest {cluster.gpu.name} GPUs that fit is {need}" if need else "; no GPU count up to 1024 fits"
            ),
            min_gpus=need,
            hints=fit_hints(model, cluster, workload, need, allowed),
        )
    backend = pricing_backend(cluster, workload.engine)
    options, simpler = prefer_aggregated(ranked(options, workload), workload, stated_error_pct(backend, "tokens/s"))
    # The frontier a user can pick from: the deployments meeting the targets (all of them when none does), in
    # steady state, where every concurrency was priced alike.
    meeting = [o for o in options if o.meets_targets]
    frontier = pareto_front(meeting or options)
    evaluated = len(options)
    notes: list[str] = []
    simulated = 0
    if needs_simulation(workload):
        resimulated = simulate_leaders(model, cluster, options, workload, requests=simulated_requests)
        options, simulated, notes = resimulated.candidates, resimulated.simulated, resimulated.notes
    best = options[: max(top, 1)]
    return SearchResult(
        objective="rate" if workload.rate is not None else workload.objective,
        candidates=best,
        frontier=frontier,
        evaluated=evaluated,
        rejected=rejected,
        seconds=time.perf_counter() - began,
        near_tie=near_tie([o.figures for o in best[: simulated or len(best)]], workload, backend),
        simulated=simulated,
        notes=notes,
        simpler_preferred=simpler,
    )


def _raise_for_unsearched(constraints: Constraints | None, workload: Workload) -> None:
    """Raise the InfeasibleError of constraints that ask for what the search never screens, so that an emptied search
    does not read as a model that fits on no GPU count (or strategies that do not fit in memory): sequence
    parallelism (layouts are screened by their decode step, which has none, so no prefill worker is sharded by
    sequence) and, under continuous batching, microbatches (engines keep one batch per pipeline stage in flight,
    which the serving model prices instead)."""
    bounds = constraints.degrees if constraints else []
    demanded = [b.to_text() for b in bounds if b.dim == "sp" and not b.holds(1)]
    if demanded:
        raise InfeasibleError(
            f"the search prices no prefill worker with sequence parallelism, so the constraint "
            f"{', '.join(demanded)} leaves no deployment to search; give the deployment itself to price it (for "
            f"example -s 'prefill:sp=2,tp=2;decode:tp=2;disagg'), or drop the constraint"
        )
    demanded = [b.to_text() for b in bounds if b.dim == "mb" and not b.holds(1)]
    if demanded and workload.batching == "continuous":
        raise InfeasibleError(
            f"continuous batching runs one microbatch, the engines keeping a batch per pipeline stage in flight, so "
            f"the constraint {', '.join(demanded)} leaves no deployment to search; microbatches are searched under "
            f"static batching (--batching static), or drop the constraint"
        )


def _raise_for_two_pools(model: ModelSpec, cluster: Cluster, workload: Workload, allowed: PhaseFilter) -> None:
    """Raise the InfeasibleError of split pools on two GPU types that nothing fits: each pool's GPU named, and the
    fewest GPUs of each type on which one worker holds the model (the one-type fit hints do not apply)."""
    needs = {role: min_gpus_to_fit(model, cluster.pool(role), workload, allowed) for role in ("prefill", "decode")}
    words = [f"{needs[role] or 'no count up to 1024 of'} {cluster.gpu_of(role).name} for a {role} worker"
             for role in ("prefill", "decode")]
    weights_gb = weight_bytes(model) / 1e9
    found = [n for n in needs.values() if n is not None]
    raise InfeasibleError(
        f"{model.name} does not fit split pools of {cluster.gpu.name} prefill and {cluster.gpu_of('decode').name} "
        f"decode on {counted(cluster.world_size, 'GPU')}: its weights are {weights_gb:.0f} GB ({model.weight_dtype}) "
        f"and "
        f"{counted(workload.sequences, 'sequence')} at {workload.isl}+{counted(workload.osl, 'token')} "
        f"{agreeing(workload.sequences, 'adds', 'add')} KV cache, "
        f"and each pool's "
        f"workers must hold them within its own GPU's memory; the fewest that fit is about {' and '.join(words)}",
        min_gpus=sum(found) if len(found) == 2 else None,
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
    texts = ", ".join(constraints.to_texts())
    chosen = f"the {counted(len(allowed), 'strategy', 'strategies')} of {where} that satisfy the constraints {texts}"
    batch = workload.batch
    if batch is not None and all(sequences_needed(s) > batch for s in allowed):
        # Not memory: every allowed layout has more attention data-parallel groups and microbatches than sequences.
        fewest = min(sequences_needed(s) for s in allowed)
        raise InfeasibleError(
            f"{chosen} need {needed_sequences_text(fewest)}, and the batch is {batch}; give a batch of {fewest} or "
            "more, or relax the constraints"
        )
    raise InfeasibleError(
        f"{chosen} do not fit in memory ({model.weight_dtype} weights, {counted(workload.sequences, 'sequence')} at "
        f"{workload.isl}+{counted(workload.osl, 'token')}); relax the constraints or add GPUs"
    )
