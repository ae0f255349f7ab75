"""What several capabilities share: one memoised evaluation per strategy, one memoised search per request."""

from __future__ import annotations

import functools
from typing import Any

from shardplan.contracts.plan import Alternative, PlanRequest
from shardplan.contracts.reports import CostReport, ValidationReport
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InfeasibleError
from shardplan.tools.api.guards import MAX_VIOLATIONS, SEARCH_DEPTH
from shardplan.tools.api.results import CostBrief, StrategyCheck, ViolationBrief
from shardplan.tools.planning.deployment import deployment_problems, evaluate_deployment
from shardplan.tools.planning.planner import alternatives_from, resolve_request
from shardplan.tools.search.constraint_checks import strategy_violations
from shardplan.tools.search.deployments import Candidate, SearchResult, search


def _r(value: float) -> float:
    return round(float(value), 3)


def _brief_violations(report: ValidationReport) -> list[ViolationBrief]:
    return [
        ViolationBrief(rule=v.rule, severity=v.severity, message=v.message, fix=v.fix, nodes=v.nodes[:3])
        for v in report.violations[:MAX_VIOLATIONS]
    ]


def _brief_cost(cost: CostReport) -> CostBrief:
    return CostBrief(
        ttft_ms=_r(cost.ttft_ms),
        tpot_ms=_r(cost.tpot_ms),
        tokens_per_s=_r(cost.tokens_per_s),
        tokens_per_s_per_gpu=_r(cost.tokens_per_s_per_gpu),
        tokens_per_s_per_user=_r(cost.tokens_per_s_per_user),
        memory_per_gpu_gb=_r(cost.memory_per_gpu_gb),
        fits=cost.fits,
    )


def _misses(cost: CostReport) -> list[str]:
    misses = list(cost.target_misses)
    for pool in cost.memory:
        if not pool.fits:
            misses.append(
                f"memory ({pool.pool}): {pool.total_gb:.1f} GB per GPU exceeds {pool.capacity_gb:g} GB (MEM-1)"
            )
    return misses


def _constraint_misses(request: PlanRequest, strategy: Any, gpus_per_node: int) -> list[str]:
    if request.constraints is None:
        return []
    broken = strategy_violations(strategy, request.constraints, gpus_per_node)
    return [f"breaks the constraint {text}" for text in broken]


# -------------------------------------------------------------------------------------- shared evaluation


def _request_key(request: PlanRequest) -> str:
    # What was assumed does not change the answer, so it does not split the caches.
    return request.model_copy(update={"policy": "builtin", "assumptions": []}).model_dump_json()


@functools.lru_cache(maxsize=64)
def _evaluate(request_json: str, spec: str) -> StrategyCheck:
    request = PlanRequest.model_validate_json(request_json)
    strategy = parse_strategy(spec)
    model, cluster = resolve_request(request)
    # dp counts replicas (or pool workers): a deployment may use fewer GPUs than the budget.
    problems = deployment_problems(model, cluster, strategy, request.workload)
    if problems:
        briefs = [ViolationBrief(rule=p.rule, severity="error", message=p.message, fix=p.fix) for p in problems]
        # The given text, not to_spec(): a plain list with sp would read back differently in decode.
        return StrategyCheck(
            strategy=spec,
            gpus_used=strategy.gpus,
            buildable=False,
            valid=False,
            violations=briefs[:MAX_VIOLATIONS],
            violations_total=len(briefs),
        )
    evaluated = evaluate_deployment(model, cluster, strategy, request.workload)
    report, cost = evaluated.evaluation.validation, evaluated.cost
    misses = _misses(cost) + _constraint_misses(request, strategy, cluster.gpus_per_node)
    return StrategyCheck(
        strategy=strategy.to_spec(),
        gpus_used=strategy.gpus,
        buildable=True,
        valid=report.valid,
        violations=_brief_violations(report),
        violations_total=len(report.violations),
        cost=_brief_cost(cost),
        meets_targets=not misses,
        misses=misses,
    )


def evaluate_strategy(request: PlanRequest, strategy: str) -> StrategyCheck:
    """Build, validate and price ``strategy`` for ``request`` (memoised: the agent checks what a tool built).

    Raises:
        InputError: unreadable strategy text, unknown model or GPU.
    """
    return _evaluate(_request_key(request), strategy.strip()).model_copy(deep=True)


@functools.lru_cache(maxsize=8)
def _search(request_json: str) -> Any:
    request = PlanRequest.model_validate_json(request_json)
    model, cluster = resolve_request(request)
    try:
        return search(model, cluster, request.workload, top=SEARCH_DEPTH, constraints=request.constraints)
    except InfeasibleError as exc:
        return exc


def search_request(request: PlanRequest) -> Any:
    """The strategy search for ``request`` (memoised): a SearchResult, or the InfeasibleError it raised."""
    return _search(_request_key(request))


def alternatives_for(request: PlanRequest, chosen: StrategyCheck, limit: int = 4) -> list[Alternative]:
    """The runners-up of the search for ``request`` against ``chosen``, each with why it lost."""

    result = search_request(request)
    if not isinstance(result, SearchResult):
        return []
    match = next((c for c in result.candidates if c.spec == chosen.strategy), None)
    if match is None and chosen.cost is not None:
        c = chosen.cost
        match = Candidate(
            strategy=parse_strategy(chosen.strategy),
            spec=chosen.strategy,
            ttft_ms=c.ttft_ms,
            tpot_ms=c.tpot_ms,
            tokens_per_s=c.tokens_per_s,
            tokens_per_s_per_gpu=c.tokens_per_s_per_gpu,
            tokens_per_s_per_user=c.tokens_per_s_per_user,
            memory_per_gpu_gb=c.memory_per_gpu_gb,
            fits=c.fits,
            meets_targets=chosen.meets_targets,
            target_misses=chosen.misses,
            scored_by="schedule",
        )
    if match is None:
        return []
    return alternatives_from(result, match, request.workload.objective, limit)

