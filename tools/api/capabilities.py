"""The capabilities themselves: plain functions over the shared layer, registered for the wrappers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardplan.contracts.arithmetic.model_math import describe, summary
from shardplan.contracts.dag import DAG
from shardplan.contracts.plan import Plan, PlanRequest, PricedDeployment, dag_part
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InfeasibleError, InputError
from shardplan.knowledge.retriever import search
from shardplan.knowledge.rules import get_rule as lookup
from shardplan.text import counted
from shardplan.tools.api.arguments import (
    BuildArgs,
    CostArgs,
    DagArgs,
    KnowledgeQuery,
    ModelArgs,
    NoArgs,
    PlanArgs,
    RuleArgs,
    SearchArgs,
    StrategyArgs,
)
from shardplan.tools.api.compact import PlanSummary, cost_summary, plan_summary
from shardplan.tools.api.guards import check_path, read_dag_json
from shardplan.tools.api.registry import Capability, capability, parse_args
from shardplan.tools.api.request_args import RequestArgs
from shardplan.tools.api.results import (
    BuildSummary,
    CandidateBrief,
    CostSummary,
    DagCheck,
    SearchDetail,
    SearchSummary,
    StrategyCheck,
)
from shardplan.tools.api.shared import _brief_violations, _r, evaluate_strategy, rounded, search_request
from shardplan.tools.builder.build import build_dag as build
from shardplan.tools.catalogs.bundled import bundled_models
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.estimate import estimate_cost as run_cost
from shardplan.tools.planning.engine_choice import parse_engines, plan_engines, several_engines
from shardplan.tools.planning.evaluation import price_on_budget
from shardplan.tools.planning.gpu_choice import parse_gpu_types, plan_gpu_types, several_gpu_types
from shardplan.tools.planning.planner import plan as run_plan
from shardplan.tools.planning.planner import resolve_request
from shardplan.tools.search.deployments import SearchResult
from shardplan.validators.schema_check import validate_json

# ---------------------------------------------------------------------------------------------- capabilities


@capability(KnowledgeQuery)
def search_knowledge(args: KnowledgeQuery) -> list[dict[str, Any]]:
    """Search the knowledge base of inference-parallelism rules; returns sections with their rule IDs."""

    return [
        {
            "doc": s.doc,
            "heading": s.heading,
            "rule_ids": s.rule_ids,
            "score": _r(s.score),
            "text": s.text if len(s.text) <= 1200 else s.text[:1197] + "...",
        }
        for s in search(args.query, args.k)
    ]


@capability(RuleArgs)
def get_rule(args: RuleArgs) -> dict[str, Any]:
    """One knowledge rule by ID (e.g. DEC-1): its severity, statement and where it is written."""

    try:
        return lookup(args.rule_id).model_dump()
    except KeyError as exc:
        raise InputError(str(exc.args[0]), field="rule_id", fix="use an ID from search_knowledge results") from None


@capability(NoArgs)
def list_models(args: NoArgs) -> list[dict[str, Any]]:
    """The bundled models with architecture, size and whether they are mixture-of-experts."""

    return [summary(load_model(repo)) for repo in bundled_models()]


@capability(NoArgs)
def list_gpus(args: NoArgs) -> list[dict[str, Any]]:
    """The GPU catalog: memory, bandwidths and peak dense TFLOP/s per GPU."""

    return [
        {
            "name": name,
            "full_name": g.full_name,
            "memory_gb": g.memory_gb,
            "memory_bandwidth_gb_per_s": g.memory_bandwidth_gb_per_s,
            "dense_tflops": g.dense_tflops,
            "intra_node_bandwidth_gb_per_s": g.intra_node_bandwidth_gb_per_s,
            "inter_node_bandwidth_gb_per_s": g.inter_node_bandwidth_gb_per_s,
            "gpus_per_node": g.gpus_per_node,
        }
        for name, g in gpu_catalog().items()
    ]


@capability(ModelArgs)
def describe_model(args: ModelArgs) -> dict[str, Any]:
    """A model's architecture and derived sizes: parameters, layers, heads, experts, KV bytes per token."""

    check_path(args.model, "model")
    return describe(load_model(args.model))


def _candidate_brief(c: PricedDeployment) -> CandidateBrief:
    return CandidateBrief(strategy=c.spec, concurrency=c.concurrency, figures=rounded(c.figures),
                          meets_targets=c.meets_targets, misses=c.misses)


def _summarize_search(
    result: SearchResult | InfeasibleError, objective: str, top: int, detail: bool = False
) -> SearchSummary:
    if not isinstance(result, SearchResult):
        return SearchSummary(feasible=False, objective=objective, min_gpus=result.min_gpus, hints=result.hints,
                             message=str(result))
    everything = SearchDetail(
        candidates=[_candidate_brief(c) for c in result.candidates],
        frontier=[_candidate_brief(c) for c in result.frontier],
        seconds=_r(result.seconds),
    )
    return SearchSummary(
        feasible=True,
        objective=result.objective,
        candidates=everything.candidates[:top],
        frontier=[c.spec for c in result.frontier][:10],
        evaluated=result.evaluated,
        rejected=result.rejected,
        message=f"{counted(result.evaluated, 'strategy', 'strategies')} priced; best first",
        detail=everything if detail else None,
    )


@capability(SearchArgs)
def search_strategies(args: SearchArgs) -> SearchSummary:
    """Rank the strategies that fit the request, best first for its objective, with predicted figures.

    When nothing fits, ``feasible`` is false, ``min_gpus`` says how many GPUs would, and ``hints`` name each
    single change (weight or KV format, GPU count, context, sequences in flight) that would make it fit.
    Speculative decoding (spec with spec_accept) and prefix caching (prefix_hit) are priced as in plan.
    """
    request = args.to_request()
    return _summarize_search(search_request(request), request.workload.objective, args.top, args.detail)


@capability(StrategyArgs)
def propose_strategy(args: StrategyArgs) -> StrategyCheck:
    """Check one strategy for the request: build its DAG, validate it against the rules, price it.

    Returns whether it is valid, the violations (rule ID, message, fix hint), the predicted figures and
    the missed targets.
    """
    return evaluate_strategy(args.to_request(), args.strategy)


def _check_dag(source: str | dict[str, Any], *, price: bool, detail: bool = False) -> DagCheck:
    obj = read_dag_json(source)
    report = validate_json(obj)
    dag_obj = dag_part(obj)
    check = DagCheck(
        valid=report.valid,
        nodes=report.nodes,
        edges=report.edges,
        violations=_brief_violations(report),
        violations_total=len(report.violations),
        rules_checked=len(report.rules_checked),
        report=report if detail else None,
    )
    if not report.valid or not isinstance(dag_obj, dict):
        return check
    dag = DAG.model_validate(dag_obj)
    check.strategy = dag.meta.strategy.to_spec()
    if price:
        cost = run_cost(dag)
        check.figures = rounded(cost.figures)
        check.misses = cost.misses
        check.meets_targets = not check.misses
    return check


@capability(DagArgs)
def submit_dag(args: DagArgs) -> DagCheck:
    """Submit a whole DAG (JSON): validate it against every rule and, when valid, price it."""
    return _check_dag(args.dag_json, price=True, detail=args.detail)


@capability(DagArgs)
def validate_dag(args: DagArgs) -> DagCheck:
    """Validate a DAG (or a plan holding one) given as JSON: schema first, then every rule."""
    return _check_dag(args.dag_json, price=False, detail=args.detail)


@capability(CostArgs)
def estimate_cost(args: CostArgs) -> CostSummary:
    """Price a DAG (dag_json) or a strategy for a request: TTFT, TPOT, throughput, memory per GPU. A strategy that
    uses fewer GPUs than ``gpus`` is priced on the GPUs it uses (``gpus`` is a budget, as for ``plan``)."""

    if args.dag_json is not None:
        report = _check_dag(args.dag_json, price=False)
        if not report.valid:  # a DAG that fails validation (a cycle, a dangling edge) has no schedule to price
            first = next((v for v in report.violations if v.severity == "error"), report.violations[0])
            what = "is not a DAG" if first.rule == "SCHEMA" else f"fails validation ({first.rule})"
            raise InputError(f"dag_json {what}: {first.message}", field="dag_json",
                             fix=first.fix or "validate it with validate_dag and send a valid DAG")
        obj = read_dag_json(args.dag_json)
        dag = DAG.model_validate(dag_part(obj))
        cost = run_cost(dag)
    else:
        # Only the arguments given: a default taken as given would hide what the request leaves unsaid, and a
        # default isl would contradict the mean of an isl_dist or workload trace.
        values = args.model_dump(exclude={"dag_json", "strategy", "detail"}, exclude_unset=True)
        request = parse_args(RequestArgs, values).to_request()
        model, cluster = resolve_request(request)
        cost = price_on_budget(model, cluster, parse_strategy(args.strategy or ""), request.workload)
    return cost_summary(cost, detail=args.detail)


@capability(BuildArgs)
def build_dag(args: BuildArgs) -> BuildSummary:
    """Build the parallel strategy DAG of a strategy; a summary, or the whole DAG with include_dag."""
    from collections import Counter


    request = args.to_request()
    model, cluster = resolve_request(request)
    dag = build(model, cluster, parse_strategy(args.strategy), request.workload)
    kinds = Counter(node.kind for node in dag.nodes)
    return BuildSummary(
        strategy=dag.meta.strategy.to_spec(),
        nodes=len(dag.nodes),
        edges=len(dag.edges),
        node_kinds=dict(sorted(kinds.items())),
        dag=dag.model_dump(mode="json") if args.include_dag else None,
    )


@capability(PlanArgs)
def plan(args: PlanArgs) -> PlanSummary:
    """Plan a deployment: search, build, validate and price; the best strategy with runners-up and why.

    Speculative decoding: spec ('mtp:K', 'eagle:K', 'eagle:HEAD:K' or 'draft:MODEL:K') with spec_accept, the
    accepted draft tokens per step the engine measured (required: never assumed). Prefix caching: prefix_hit, the
    share of prompt tokens found in the cache. The request echoes both; dag_cost.speculation and
    dag_cost.prefix_cache show their effect.

    Several GPU types (gpu 'H100,H200,B200' or 'any') or engines (engine 'auto' or 'vllm,sglang') plan each and
    answer with the cheapest that meets the targets, the others in gpu_choice / engine_choice with why each lost
    (and, per engine, whether measured tables or the roofline priced it); both at once choose the engine per type.

    Returns a compact summary (strategy, deployment, figures, verdict, first runners-up, explanation); with
    detail=true the whole plan too, under ``plan``.
    """

    engines = parse_engines(args.engine) if several_engines(args.engine) else None
    one = args.model_copy(update={"engine": engines[0]}) if engines else args

    def planner(request: PlanRequest) -> Plan:
        return plan_engines(request, engines) if engines else run_plan(request)

    result = _plan_gpu_types(one, planner) if several_gpu_types(args.gpu) else planner(one.to_request())
    if not args.include_dag:
        result.dag = None
    return plan_summary(result, detail=args.detail)


def _plan_gpu_types(args: PlanArgs, planner: Callable[[PlanRequest], Plan]) -> Plan:
    """The plan of ``args`` on each GPU type its gpu names (a comma list or 'any'), each planned by ``planner``:
    the cheapest that meets the targets, with the others in gpu_choice; each type may use ``gpus`` GPUs.

    Raises:
        InputError: an unknown type, or an option that holds for one type only (cluster, gpu_price).
    """
    for name in ("cluster", "gpu_price"):
        if getattr(args, name) is not None:
            raise InputError(f"{name} with several GPU types in gpu", field=name,
                             fix=f"name one GPU type in gpu to use {name}")
    types = parse_gpu_types(args.gpu)
    request = args.model_copy(update={"gpu": types[0]}).to_request()
    return plan_gpu_types(request, types, budget=args.gpus, gpus_per_node=args.gpus_per_node, planner=planner)


CAPABILITIES: dict[str, Capability] = {
    func.capability.name: func.capability  # type: ignore[attr-defined]
    for func in (
        search_knowledge,
        get_rule,
        list_models,
        list_gpus,
        describe_model,
        search_strategies,
        propose_strategy,
        submit_dag,
        validate_dag,
        estimate_cost,
        build_dag,
        plan,
    )
}
"""Every capability by name, in the order the wrappers list them."""
