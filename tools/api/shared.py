"""What several capabilities share: one memoised evaluation per strategy, one memoised search per request, and
the rounding of compact results."""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from pydantic import BaseModel

from shardplan.contracts.arithmetic.feasibility import sequences_needed
from shardplan.contracts.plan import Alternative, PlanRequest, PricedDeployment
from shardplan.contracts.reports import ValidationReport
from shardplan.contracts.strategy import Strategy, parse_strategy
from shardplan.errors import InfeasibleError
from shardplan.tools.api.guards import MAX_VIOLATIONS, SEARCH_DEPTH
from shardplan.tools.api.results import StrategyCheck, ViolationBrief
from shardplan.tools.planning.deployment import DeploymentEvaluation, deployment_problems, evaluate_deployment
from shardplan.tools.planning.planner import alternatives_from, resolve_request
from shardplan.tools.planning.unpriced import batch_fix, unpriced_reason
from shardplan.tools.search.constraint_checks import strategy_violations
from shardplan.tools.search.deployments import SearchResult, search
from shardplan.tools.search.simulated import needs_simulation

M = TypeVar("M", bound=BaseModel)


def _r(value: float) -> float:
    return round(float(value), 3)


def _round_floats(value: Any) -> Any:
    if isinstance(value, float):
        return _r(value)
    if isinstance(value, dict):
        return {k: _round_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round_floats(v) for v in value]
    return value


def rounded(model: M) -> M:
    """``model`` with every float to three decimals, as compact results show figures: 168.939, not 168.93871657."""
    return type(model).model_validate(_round_floats(model.model_dump()))


def _brief_violations(report: ValidationReport) -> list[ViolationBrief]:
    return [
        ViolationBrief(rule=v.rule, severity=v.severity, message=v.message, fix=v.fix, nodes=v.nodes[:3])
        for v in report.violations[:MAX_VIOLATIONS]
    ]


# -------------------------------------------------------------------------------------- shared evaluation


def _request_key(request: PlanRequest) -> str:
    # What was assumed does not change the answer, so it does not split the caches.
    return request.model_copy(update={"policy": "builtin", "assumptions": []}).model_dump_json()


@functools.lru_cache(maxsize=64)
def _evaluate(request_json: str, spec: str) -> tuple[StrategyCheck, DeploymentEvaluation | None]:
    request = PlanRequest.model_validate_json(request_json)
    strategy = parse_strategy(spec)
    model, cluster = resolve_request(request)
    # dp counts replicas (or pool workers): a deployment may use fewer GPUs than the budget.
    problems = deployment_problems(model, cluster, strategy, request.workload)
    if problems:
        briefs = [ViolationBrief(rule=p.rule, severity="error", message=p.message, fix=p.fix) for p in problems]
        # The given text, not to_spec(): a plain list with sp would read back differently in decode.
        unbuildable = StrategyCheck(
            strategy=spec,
            gpus_used=strategy.gpus,
            buildable=False,
            valid=False,
            violations=briefs[:MAX_VIOLATIONS],
            violations_total=len(briefs),
        )
        return unbuildable, None
    evaluated = evaluate_deployment(model, cluster, strategy, request.workload, _simulated_pick(request, strategy))
    report, option = evaluated.evaluation.validation, evaluated.option
    needed, batch = sequences_needed(strategy), request.workload.batch
    if option is None and batch is not None and batch < needed:
        # Its DAG was drawn at the fewest sequences it is priced with, not at the batch asked for: no figures.
        reason = unpriced_reason(strategy, request.workload, evaluated.evaluation.cost.memory)
        briefs = [ViolationBrief(rule="MB-3", severity="error", message=reason, fix=batch_fix(needed))]
        return StrategyCheck(strategy=strategy.to_spec(), gpus_used=strategy.gpus, buildable=True, valid=False,
                             violations=briefs, violations_total=1), evaluated
    # With no concurrency that fits, the one batch of its DAG says by how much (its figures name their source).
    figures = option.figures if option is not None else evaluated.evaluation.cost.figures
    misses = option.misses if option is not None else evaluated.evaluation.cost.misses
    breaks = (
        [f"breaks the constraint {text}" for text in strategy_violations(strategy, request.constraints,
                                                                         cluster.gpus_per_node)]
        if request.constraints is not None
        else []
    )
    check = StrategyCheck(
        strategy=strategy.to_spec(),
        gpus_used=strategy.gpus,
        buildable=True,
        valid=report.valid,
        violations=_brief_violations(report),
        violations_total=len(report.violations),
        concurrency=option.concurrency if option is not None else None,
        figures=rounded(figures),
        meets_targets=option is not None and not misses and not breaks,
        misses=misses,
        constraint_breaks=breaks,
    )
    return check, evaluated


def _simulated_pick(request: PlanRequest, strategy: Strategy) -> PricedDeployment | None:
    """The search's simulated deployment of ``strategy`` for a request judged by simulation, so that a proposal
    of the search's pick is evaluated at the same concurrency with the same run (None otherwise)."""
    if not needs_simulation(request.workload):
        return None
    searched = search_request(request)
    if isinstance(searched, InfeasibleError):
        return None
    return next((c for c in searched.candidates if c.simulation is not None and c.strategy == strategy), None)


def evaluate_strategy(request: PlanRequest, strategy: str) -> StrategyCheck:
    """Build, validate and price ``strategy`` for ``request`` (memoised: the agent checks what a tool built).

    Raises:
        InputError: unreadable strategy text, unknown model or GPU.
    """
    return _evaluate(_request_key(request), strategy.strip())[0].model_copy(deep=True)


def evaluated_strategy(request: PlanRequest, strategy: str) -> DeploymentEvaluation | None:
    """The evaluation behind :func:`evaluate_strategy` (the same memo): the deployment's priced option, its DAG
    and report; None when the strategy cannot be deployed. Callers treat it as read-only.

    Raises:
        InputError: unreadable strategy text, unknown model or GPU.
    """
    return _evaluate(_request_key(request), strategy.strip())[1]


@functools.lru_cache(maxsize=8)
def _search(request_json: str) -> SearchResult | InfeasibleError:
    request = PlanRequest.model_validate_json(request_json)
    model, cluster = resolve_request(request)
    try:
        return search(model, cluster, request.workload, top=SEARCH_DEPTH, constraints=request.constraints)
    except InfeasibleError as exc:
        return exc


def search_request(request: PlanRequest) -> SearchResult | InfeasibleError:
    """The strategy search for ``request`` (memoised): a SearchResult, or the InfeasibleError it raised."""
    return _search(_request_key(request))


def alternatives_for(request: PlanRequest, strategy: str, limit: int = 4) -> list[Alternative]:
    """The runners-up of the search for ``request`` against the deployment of ``strategy``, each with why it lost."""
    result = search_request(request)
    evaluated = evaluated_strategy(request, strategy)
    if not isinstance(result, SearchResult) or evaluated is None or evaluated.option is None:
        return []
    chosen = next((c for c in result.candidates if c.spec == evaluated.option.spec), evaluated.option)
    return alternatives_from(result, chosen, request.workload.objective, limit)
