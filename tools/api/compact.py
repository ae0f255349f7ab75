"""Compact views of the large results: a plan or a cost report reduced to what an LLM reads first.

A DeepSeek-V3 plan is about 150 KB of JSON, nearly all of it the critical paths of the two phases; its
compact summary keeps the strategy, the deployment, the headline figures, the validators' verdict with the
failing rules, the first runners-up and the explanation, a few KB. The whole plan rides along only when
asked for (``detail=true``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from shardplan.contracts.choice import Choice
from shardplan.contracts.economics import Economics
from shardplan.contracts.figures import Figures
from shardplan.contracts.plan import Alternative, Deployment, FitHint, NearTie, Plan, PlanRequest, PlanStatus
from shardplan.contracts.reports import CostReport, ValidationReport
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.targets import Miss
from shardplan.tools.api.results import CostSummary, MemoryBrief, PhaseBrief, Result, ViolationBrief
from shardplan.tools.api.shared import _brief_violations, _r, rounded

__all__ = ["PlanSummary", "ValidationBrief", "plan_summary", "cost_summary", "MAX_ALTERNATIVES", "MAX_FRONTIER"]

MAX_ALTERNATIVES = 3
"""Runners-up listed in a compact plan; the rest are counted."""
MAX_FRONTIER = 6
"""Frontier points listed in a compact plan's deployment (the chosen one always among them)."""


class ValidationBrief(Result):
    """The validators' verdict, briefly: which rules fail and the first violations."""

    valid: bool = Field(description="True when no error-severity violation was found.")
    failing_rules: list[str] = Field(description="IDs of the rules broken at error severity, each once.")
    violations: list[ViolationBrief] = Field(description="First violations, errors first.")
    violations_total: int = Field(description="All violations found.")
    rules_checked_total: int = Field(description="Rules that ran.")
    nodes: int = Field(description="Nodes checked.")
    edges: int = Field(description="Edges checked.")


class PlanSummary(Result):
    """A plan, compact: strategy, deployment, headline figures, verdict, first runners-up and why.

    The whole plan (critical paths, every rule checked, every runner-up) is under ``plan`` when the call
    asked for detail.
    """

    DETAIL_FIELD: ClassVar[str | None] = "plan"

    shardplan_version: str = Field(description="Version that wrote the plan.")
    status: PlanStatus = Field(description="ok; targets_missed (best effort shown); infeasible (nothing fits).")
    feasible: bool = Field(description="True only when status is ok.")
    request: PlanRequest = Field(description="The request, as read (its assumptions are listed once, under "
                                             "assumptions).")
    strategy: str | None = Field(description="Chosen strategy's SPEC (dp counts replicas or pool workers); None "
                                             "when infeasible.")
    deployment: Deployment | None = Field(
        description=f"Replicas or pools, concurrency and GPUs used, as in the plan, with at most {MAX_FRONTIER} "
        "frontier points (the chosen one among them); None when infeasible."
    )
    figures: Figures | None = Field(description="What the deployment delivers (rounded): its steady state, or a "
                                                "simulation's means where ``simulation`` is set; None when infeasible.")
    simulation: SimulationSummary | None = Field(
        default=None, description="Set when percentile targets or traffic made the planner simulate the deployment: "
        "percentiles of TTFT, TPOT and end-to-end, goodput, queueing, preemptions (rounded)."
    )
    misses: list[Miss] = Field(default_factory=list, description="The targets the figures miss, with the gaps.")
    dag_cost: CostSummary | None = Field(description="One batch of the DAG: figures, per-phase schedule and memory, "
                                                     "without the critical paths; None when infeasible.")
    validation: ValidationBrief | None = Field(description="The validators' verdict; None when infeasible.")
    alternatives: list[Alternative] = Field(description=f"The first {MAX_ALTERNATIVES} runners-up, best first, "
                                                        "each with why it lost.")
    alternatives_total: int = Field(description="Runners-up in the whole plan.")
    explanation: str = Field(description="Why this strategy, in a few sentences, citing rule IDs.")
    min_gpus: int | None = Field(description="When infeasible for memory: the fewest GPUs that would fit.")
    hints: list[FitHint] = Field(
        default_factory=list, description="When infeasible for memory: each single change that would make it fit."
    )
    near_tie: NearTie | None = Field(
        default=None, description="Set when the leading deployments are within the model's stated error of each other."
    )
    economics: Economics | None = Field(
        default=None, description="Dollars per hour and per million tokens (with the price's source), power and "
        "joules per token (an upper bound at board power); None when infeasible."
    )
    gpu_choice: Choice | None = Field(
        default=None, description="When gpu named several types: each type's deployment and price, and why it lost."
    )
    engine_choice: Choice | None = Field(
        default=None, description="When engine named several (auto or a list): each engine's deployment and price, "
        "whether measured tables or the roofline priced it, and why it lost."
    )
    messages: list[str] = Field(description="What the planner noticed along the way.")
    assumptions: list[str] = Field(description="Every value that was defaulted or guessed rather than given.")
    plan: Plan | None = Field(
        default=None, description="The whole plan, as `shardplan plan -o` writes it (its DAG only with include_dag); "
        "only with detail=true."
    )


def _phase_brief(cost: CostReport, name: Literal["prefill", "decode"]) -> PhaseBrief:
    p = cost.prefill if name == "prefill" else cost.decode
    return PhaseBrief(
        latency_ms=_r(p.latency_ms),
        exposed_communication_ms=_r(p.exposed_communication_ms),
        collectives=p.collectives,
        inter_node_collectives=p.inter_node_collectives,
        bubble_fraction=_r(p.bubble_fraction),
    )


def cost_summary(cost: CostReport, *, detail: bool = False) -> CostSummary:
    """``cost`` without its critical paths; the whole report under ``report`` with ``detail``."""
    return CostSummary(
        figures=rounded(cost.figures),
        prefill=_phase_brief(cost, "prefill"),
        decode=_phase_brief(cost, "decode"),
        memory=[
            MemoryBrief(pool=m.pool, weights_gb=_r(m.weights_gb), kv_cache_gb=_r(m.kv_cache_gb),
                        total_gb=_r(m.total_gb), capacity_gb=m.capacity_gb, fits=m.fits)
            for m in cost.memory
        ],
        kv_transfer_ms=_r(cost.kv_transfer_ms),
        meets_targets=not cost.misses,
        misses=cost.misses,
        pricing=cost.pricing,
        speculation=rounded(cost.speculation) if cost.speculation is not None else None,
        prefix_cache=rounded(cost.prefix_cache) if cost.prefix_cache is not None else None,
        report=cost if detail else None,
    )


def validation_brief(report: ValidationReport) -> ValidationBrief:
    """The verdict of ``report``: failing rule IDs, the first violations (errors first) and the counts."""
    rank = {"error": 0, "warning": 1, "info": 2}
    ordered = report.model_copy(update={"violations": sorted(report.violations, key=lambda v: rank[v.severity])})
    return ValidationBrief(
        valid=report.valid,
        failing_rules=list(dict.fromkeys(v.rule for v in report.violations if v.severity == "error")),
        violations=_brief_violations(ordered),
        violations_total=len(report.violations),
        rules_checked_total=len(report.rules_checked),
        nodes=report.nodes,
        edges=report.edges,
    )


def _thin_frontier(deployment: Deployment) -> Deployment:
    """``deployment`` with at most MAX_FRONTIER frontier points, evenly spread, the chosen one kept."""
    points = deployment.frontier
    if len(points) <= MAX_FRONTIER:
        return deployment
    chosen = {i for i, p in enumerate(points) if p.chosen}
    # The ends of the frontier (fastest per user, most per GPU) and evenly spaced points between them.
    room = MAX_FRONTIER - len(chosen)  # one plan has one chosen point, so room is MAX_FRONTIER - 1
    spread = {round(i * (len(points) - 1) / (room - 1)) for i in range(room)}
    keep = sorted(chosen | spread)
    return deployment.model_copy(update={"frontier": [points[i] for i in keep]})


def plan_summary(plan: Plan, *, detail: bool = False) -> PlanSummary:
    """The compact view of ``plan``; the whole plan under ``plan`` with ``detail``."""
    return PlanSummary(
        shardplan_version=plan.shardplan_version,
        status=plan.status,
        feasible=plan.feasible,
        request=plan.request.model_copy(update={"assumptions": []}),
        strategy=plan.strategy.to_spec() if plan.strategy is not None else None,
        deployment=rounded(_thin_frontier(plan.deployment)) if plan.deployment is not None else None,
        figures=rounded(plan.figures) if plan.figures is not None else None,
        misses=plan.misses,
        simulation=rounded(plan.simulation.model_copy(update={"distribution": {}})) if plan.simulation else None,
        dag_cost=cost_summary(plan.dag_cost) if plan.dag_cost is not None else None,
        validation=validation_brief(plan.validation) if plan.validation is not None else None,
        alternatives=[rounded(a) for a in plan.alternatives[:MAX_ALTERNATIVES]],
        alternatives_total=len(plan.alternatives),
        explanation=plan.explanation,
        min_gpus=plan.min_gpus,
        hints=plan.hints,
        near_tie=plan.near_tie,
        economics=rounded(plan.economics) if plan.economics is not None else None,
        gpu_choice=plan.gpu_choice,
        engine_choice=plan.engine_choice,
        messages=plan.messages,
        assumptions=plan.assumptions,
        plan=plan if detail else None,
    )

