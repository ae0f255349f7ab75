"""The deterministic planner: request to Plan, by search, build, validate and cost.

This is what the ``builtin`` policy's tool calls do, and what ``shardplan plan`` runs. Each step is a
plain function so the agent, the MCP server and the CLI share it.
"""

from __future__ import annotations

from shardplan import __version__
from shardplan.contracts.figures import Figures
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import Alternative, NearTie, Plan, PlanRequest, PlanStatus, PricedDeployment
from shardplan.contracts.reports import CostReport
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.targets import miss_texts
from shardplan.contracts.workload import Workload
from shardplan.errors import InfeasibleError, StrategyError
from shardplan.text import counted
from shardplan.tools.catalogs.drafters import check_drafter
from shardplan.tools.catalogs.gpus import cluster_for
from shardplan.tools.catalogs.models import check_workload_context
from shardplan.tools.catalogs.pools import check_two_pools
from shardplan.tools.catalogs.weight_formats import request_model
from shardplan.tools.planning.deployment import (
    DeploymentEvaluation,
    deployment_problems,
    deployment_section,
    evaluate_deployment,
)
from shardplan.tools.planning.economics import economics_of
from shardplan.tools.planning.explain import explain
from shardplan.tools.planning.rejections import rejection_summary
from shardplan.tools.planning.speculation import speculation_effect
from shardplan.tools.planning.unpriced import unpriced_reason
from shardplan.tools.search.constraint_checks import strategy_violations
from shardplan.tools.search.deployments import SearchResult, search
from shardplan.tools.search.ranking import near_tie, rank_key

__all__ = [
    "resolve_request",
    "infeasible_explanation",
    "infeasible_plan",
    "plan",
    "plan_for_strategy",
    "deployable",
    "review",
    "explain",
    "why_not",
    "alternatives_from",
]


def resolve_request(request: PlanRequest) -> tuple[ModelSpec, Cluster]:
    """The model and cluster a request names.

    Raises:
        InputError: unknown model or GPU, unreadable cluster file, a GPU count that does not fit nodes, a
            prompt plus output longer than the model's context, MTP on a model without MTP layers, two GPU types
            for a request that cannot split (:func:`check_two_pools`).
    """
    model = request_model(request)
    check_workload_context(model, request.workload)
    check_drafter(model, request.workload.speculation)
    cluster = cluster_for(request.gpu, request.gpus, request.gpus_per_node, request.cluster, request.decode_gpu,
                          request.decode_gpus)
    check_two_pools(model, cluster, request.workload, request.constraints)
    return model, cluster


def infeasible_explanation(exc: InfeasibleError) -> str:
    """The explanation of an infeasible plan: the reason, citing the memory rule when memory is the reason."""
    text = str(exc)
    return text + ("." if "constraint" in text and exc.min_gpus is None else " (MEM-1).")


def infeasible_plan(request: PlanRequest, exc: InfeasibleError) -> Plan:
    """The plan of a request that nothing fits: no strategy; the fewest GPUs and the changes that would fit."""
    return Plan(
        shardplan_version=__version__,
        request=request,
        status="infeasible",
        strategy=None,
        min_gpus=exc.min_gpus,
        hints=exc.hints,
        explanation=infeasible_explanation(exc),
        messages=[str(exc)],
    )


def why_not(candidate: PricedDeployment, chosen: PricedDeployment, objective: str) -> str:
    """One line saying why ``candidate`` lost to ``chosen`` under ``objective``."""
    mine, theirs = candidate.figures, chosen.figures
    if candidate.misses and not chosen.misses:
        return "misses " + "; ".join(miss_texts(candidate.misses))
    reasons = []
    if objective in ("throughput", "goodput") and mine.tokens_per_s_per_gpu < theirs.tokens_per_s_per_gpu:
        drop = 1 - mine.tokens_per_s_per_gpu / max(theirs.tokens_per_s_per_gpu, 1e-9)
        reasons.append(
            f"{drop:.{0 if drop >= 0.1 else 1}%} fewer tokens/s/GPU "
            f"({mine.tokens_per_s_per_gpu:.1f} vs {theirs.tokens_per_s_per_gpu:.1f})"
        )
    fewer_gpus = mine.gpus_used < theirs.gpus_used and mine.tokens_per_s < theirs.tokens_per_s
    if objective in ("throughput", "goodput") and fewer_gpus:
        # Throughput ranks the tokens the whole budget serves: fewer GPUs used can lose despite more per GPU.
        drop = 1 - mine.tokens_per_s / max(theirs.tokens_per_s, 1e-9)
        reasons.append(f"{drop:.{0 if drop >= 0.1 else 1}%} fewer tokens/s in all, on {mine.gpus_used} "
                       f"GPUs vs {theirs.gpus_used}")
    if objective == "rate" and mine.gpus_used > theirs.gpus_used:
        reasons.append(f"{counted(mine.gpus_used, 'GPU')} vs {theirs.gpus_used}")
    if mine.tpot_ms > theirs.tpot_ms * 1.005:
        reasons.append(f"TPOT {mine.tpot_ms:.2f} ms vs {theirs.tpot_ms:.2f} ms")
    if mine.ttft_ms > theirs.ttft_ms * 1.005:
        reasons.append(f"TTFT {mine.ttft_ms:.1f} ms vs {theirs.ttft_ms:.1f} ms")
    if (
        candidate.strategy.disaggregated
        and not chosen.strategy.disaggregated
        and not candidate.misses
        and mine.tokens_per_s > theirs.tokens_per_s
    ):
        lead = 1 - theirs.tokens_per_s / mine.tokens_per_s
        reasons = [
            f"split, leads by {lead:.1%} in tokens/s, inside the model's stated error: the aggregated deployment "
            f"is preferred (no KV-cache transfer, no pool ratio to keep matched)"
        ]
    if not reasons:
        reasons.append("equal within the model's error; ranked lower on the tie-breaker")
    return "; ".join(reasons)


def deployable(
    model: ModelSpec,
    cluster: Cluster,
    strategy: Strategy,
    workload: Workload,
    chosen: PricedDeployment | None = None,
) -> DeploymentEvaluation:
    """The evaluation of a deployment that can run on the cluster (``chosen``: its priced option, when known).

    Raises:
        StrategyError: the replica cannot be built, or the deployment exceeds the budget or splits nodes.
    """
    problems = deployment_problems(model, cluster, strategy, workload)
    if problems:
        reasons = "; ".join(f"{p.message} [{p.rule}]" for p in problems)
        raise StrategyError(
            f"strategy {strategy.to_spec()} cannot be deployed: {reasons}", field="strategy", fix=problems[0].fix
        )
    return evaluate_deployment(model, cluster, strategy, workload, chosen)


def plan_for_strategy(
    request: PlanRequest,
    model: ModelSpec,
    cluster: Cluster,
    strategy: Strategy,
    alternatives: list[Alternative] | None = None,
    messages: list[str] | None = None,
    frontier: list[PricedDeployment] | None = None,
    reviewing: bool = False,
    evaluated: DeploymentEvaluation | None = None,
    chosen: PricedDeployment | None = None,
) -> Plan:
    """A Plan for a given deployment (``dp`` = replicas, or each pool's workers): its best concurrency and its
    figures, the DAG of one replica, validated and priced, and the explanation. ``evaluated`` is the deployment's
    evaluation when the caller already has it, ``chosen`` its priced option (the search's pick, simulated where
    the workload asks for it).

    Raises:
        StrategyError: the replica cannot be built, or the deployment exceeds the budget or splits nodes.
    """
    evaluated = evaluated or deployable(model, cluster, strategy, request.workload, chosen)
    option, dag, validation = evaluated.option, evaluated.evaluation.dag, evaluated.evaluation.validation
    alternatives = alternatives or []
    status: PlanStatus = "ok" if option is not None and option.meets_targets and validation.valid else "targets_missed"
    if option is None or not option.figures.fits:
        status = "infeasible"
    deployment = deployment_section(cluster, strategy, request.workload, evaluated, frontier)
    figures = option.figures if option is not None else None
    dag_cost = _with_effects(evaluated)
    if option is not None and request.workload.speculation is not None:
        effect = speculation_effect(model, cluster, option, request.workload)
        dag_cost = dag_cost.model_copy(update={"speculation": effect})
    found = option.misses if option is not None else []
    return Plan(
        shardplan_version=__version__,
        request=request,
        status=status,
        deployment=deployment,
        strategy=strategy,
        figures=figures,
        misses=found,
        simulation=option.simulation if option is not None else None,
        dag=dag,
        validation=validation,
        dag_cost=dag_cost,
        alternatives=alternatives,
        near_tie=_near_tie(request.workload, figures, evaluated.evaluation.cost, alternatives, reviewing),
        explanation=explain(model, strategy, figures, dag, deployment, alternatives[0] if alternatives else None,
                            reviewing, speculation=dag_cost.speculation, prefix_cache=evaluated.prefix_cache)
        if figures is not None
        else unpriced_reason(strategy, request.workload, evaluated.evaluation.cost.memory),
        messages=list(messages or []) + evaluated.notes + miss_texts(found),
        economics=economics_of(cluster.gpu, request.workload, figures, deployment, evaluated.evaluation.cost,
                               request.price, decode_gpu=cluster.gpu_of("decode") if cluster.mixed else None,
                               decode_price=request.decode_price) if status != "infeasible" else None,
    )


def _with_effects(evaluated: DeploymentEvaluation) -> CostReport:
    """The replica's cost report with what the request's engine features did to the deployment (the evaluation's
    own report is shared by every plan of the same replica, so it is copied, not changed)."""
    cost = evaluated.evaluation.cost
    if evaluated.prefix_cache is None:
        return cost
    return cost.model_copy(update={"prefix_cache": evaluated.prefix_cache})


def _near_tie(
    workload: Workload, figures: Figures | None, dag_cost: CostReport, alternatives: list[Alternative], reviewing: bool
) -> NearTie | None:
    """Whether the plan's deployment and its alternatives are within the error the model states for the backend
    that priced them."""
    if not alternatives or figures is None:
        return None
    backend = dag_cost.pricing.backend if dag_cost.pricing is not None else "roofline"
    subject = (
        "the top {top} of the reviewed strategy and those that beat it"
        if reviewing
        else "the chosen deployment and {runners}"
    )
    return near_tie([figures, *(a.figures for a in alternatives)], workload, backend, subject)


def runners_up(result: SearchResult, chosen: PricedDeployment, limit: int = 4) -> list[PricedDeployment]:
    """The best searched deployment of each other layout, best first (at most ``limit``)."""
    seen = {chosen.spec}
    runners = []
    for c in result.candidates:
        if c.spec not in seen:
            seen.add(c.spec)
            runners.append(c)
    return runners[:limit]


def alternative(c: PricedDeployment, why: str) -> Alternative:
    """A searched deployment as a plan's alternative, saying ``why`` it lost (or, in a review, won)."""
    return Alternative(strategy=c.spec, concurrency=c.concurrency, figures=c.figures, why_not=why)


def alternatives_from(
    result: SearchResult, chosen: PricedDeployment, objective: str, limit: int = 4
) -> list[Alternative]:
    """The runners-up of a search (one per layout, its best concurrency), each with why it lost."""
    return [alternative(c, why_not(c, chosen, objective)) for c in runners_up(result, chosen, limit)]


def plan(request: PlanRequest) -> Plan:
    """Search the strategy space for ``request`` and return the best plan, or an infeasible one.

    Raises:
        InputError: the request names an unknown model or GPU, or malformed files.
    """
    model, cluster = resolve_request(request)
    try:
        result = search(model, cluster, request.workload, top=6, constraints=request.constraints)
    except InfeasibleError as exc:
        return infeasible_plan(request, exc)
    best = result.candidates[0]
    messages = [
        f"priced {counted(result.evaluated, 'deployment')} in {result.seconds:.2f} s"
        + (f"; set aside {rejection_summary(result.rejected)}" if result.rejected else "")
    ]
    messages += [result.simpler_preferred] if result.simpler_preferred else []
    messages += result.notes
    return plan_for_strategy(
        request,
        model,
        cluster,
        best.strategy,
        alternatives_from(result, best, result.objective),
        messages,
        result.frontier,
        chosen=best,
    )


def review(request: PlanRequest, strategy: Strategy, limit: int = 4) -> Plan:
    """The plan of a strategy the user already runs or proposes, with the searched strategies that beat it.

    The plan is built, validated and priced like any other; its alternatives are the search's strategies
    that rank above it for the request's objective, each saying by how much.

    Raises:
        InputError: unknown model or GPU. StrategyError: the strategy cannot be built.
    """
    model, cluster = resolve_request(request)
    evaluated = deployable(model, cluster, strategy, request.workload)  # refuses an unbuildable strategy first
    given = evaluated.option
    messages = [f"reviewing the given strategy {strategy.to_spec()}"]
    if request.constraints is not None:
        broken = strategy_violations(strategy, request.constraints, cluster.gpus_per_node)
        messages += [f"the given strategy breaks the constraint {text}" for text in broken]
    better: list[PricedDeployment] = []
    try:
        result = search(model, cluster, request.workload, top=max(limit + 1, 6), constraints=request.constraints)
    except InfeasibleError:
        result = None
    if result is not None:
        key = rank_key(request.workload)
        better = [c for c in result.candidates
                  if given is None or c.spec != given.spec and key(c.figures) < key(given.figures)]
        messages.append(
            f"{len(better)} of the {len(result.candidates)} best searched strategies beat it"
            if better
            else f"no searched strategy beats it ({result.evaluated} priced)"
        )
    # Each reason is what the reviewed strategy has against one that beats it (the table words the preamble once).
    alternatives = [
        alternative(c, why_not(given, c, request.workload.objective) if given else "the reviewed strategy is not "
                    "priced for this request (see the explanation)")
        for c in better[:limit]
    ]
    frontier = result.frontier if result else None
    return plan_for_strategy(request, model, cluster, strategy, alternatives, messages, frontier, reviewing=True,
                             evaluated=evaluated)
