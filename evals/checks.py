"""The checks a golden case can ask for: one plain function per kind, ``(run, expected) -> (passed, message)``.

A :class:`CaseRun` is what the runner learned from one case under one policy: the plan (or why there
is none), the exhaustive search's best strategy, the reference strategy's evaluation. Each check reads
only that, so checks are pure and tested directly. :data:`CHECKS` maps a check's name in the case YAML
to its function.

Scores compare strategies on the request's objective (:func:`relative_gap`): end-to-end latency
(TTFT + (osl - 1) x TPOT, lower is better) for ``latency``; tokens/s per GPU (higher is better) for
``throughput`` and ``goodput``. Under every objective a strategy that misses targets another one meets
is 100 % worse, as the search ranks target misses first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.targets import miss_texts
from shardplan.contracts.workload import Workload
from shardplan.evals.cases import Case
from shardplan.text import counted
from shardplan.tools.api.results import StrategyCheck

__all__ = ["CHECKS", "CaseRun", "CheckResult", "Score", "relative_gap", "run_checks", "plan_score", "reference_score",
           "GAP_SLACK"]

GAP_SLACK = 1e-4
"""Slack on every gap tolerance: tool results round figures, so equal strategies can differ in the 5th digit."""


@dataclass(frozen=True)
class Score:
    """The figures that rank a strategy for a request."""

    strategy: str
    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_gpu: float
    meets_targets: bool

    def value(self, workload: Workload) -> float:
        """The objective's figure: end-to-end ms for latency, tokens/s/GPU otherwise."""
        if workload.objective == "latency":
            return self.ttft_ms + (workload.osl - 1) * self.tpot_ms
        return self.tokens_per_s_per_gpu


def relative_gap(score: Score, best: Score, workload: Workload) -> float:
    """How much worse ``score`` is than ``best`` on the objective, as a fraction (negative: better).

    >>> w = Workload(isl=1, osl=11)
    >>> round(relative_gap(Score("a", 10, 2, 5, True), Score("b", 10, 1, 5, True), w), 3)
    0.5
    """
    if best.meets_targets and not score.meets_targets:
        return 1.0
    mine, theirs = score.value(workload), best.value(workload)
    if workload.objective == "latency":
        return mine / theirs - 1 if theirs > 0 else 0.0
    return 1 - mine / theirs if theirs > 0 else 0.0


def plan_score(plan: Plan | None) -> Score | None:
    """The plan's figures, or None when it has no strategy or cost."""
    if plan is None or plan.strategy is None or plan.figures is None:
        return None
    f = plan.figures
    return Score(plan.strategy.to_spec(), f.ttft_ms, f.tpot_ms, f.tokens_per_s_per_gpu, not plan.misses)


@dataclass
class CaseRun:
    """What one case under one policy produced, as the checks see it."""

    case: Case
    plan: Plan | None = None
    request: PlanRequest | None = None
    """The request planned: the case's, or the one read from its prompt."""
    gpus_per_node: int | None = None
    """GPUs per node of the resolved cluster."""
    contradictions: list[str] = field(default_factory=list)
    """What the prompt said both ways (plain-language cases)."""
    best: Score | None = None
    """The exhaustive search's best strategy; None when nothing fits or the search failed."""
    reference: StrategyCheck | None = None
    """The reference strategy's StrategyCheck (built, validated, priced), when the case has one."""
    reference_error: str | None = None
    error: str | None = None
    """Why the policy produced no plan (an exception's text)."""

    @property
    def score(self) -> Score | None:
        """The plan's figures."""
        return plan_score(self.plan)

    @property
    def cost_gap(self) -> float | None:
        """Relative gap of the plan to the search's best on the objective; None without both."""
        if self.score is None or self.best is None or self.request is None:
            return None
        return relative_gap(self.score, self.best, self.request.workload)

    def why_no_plan(self) -> str:
        """A short reason the plan has no strategy."""
        if self.error:
            return f"the run failed: {self.error}"
        if self.contradictions:
            return "the prompt contradicts itself; the runner asked back instead of planning"
        if self.plan is not None and self.plan.strategy is None:
            return f"the plan is {self.plan.status}"
        return "no plan"


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check."""

    kind: str
    expected: Any
    passed: bool
    message: str


Verdict = tuple[bool, str]


def _compare(name: str, expected: Any, actual: Any) -> Verdict:
    passed = actual == expected
    return passed, f"{name}: expected {_text(expected)}, got {_text(actual)}"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def check_valid(run: CaseRun, expected: bool) -> Verdict:
    """The plan's DAG passes every mandatory rule."""
    report = run.plan.validation if run.plan is not None else None
    if report is None:
        return (not expected), f"valid: expected {_text(expected)}, {run.why_no_plan()}"
    passed, message = _compare("valid", expected, report.valid)
    errors = sorted({v.rule for v in report.violations if v.severity == "error"})
    return passed, message + (f" (violations: {', '.join(errors)})" if errors else "")


def check_fits(run: CaseRun, expected: bool) -> Verdict:
    """The plan fits in GPU memory."""
    if run.plan is None or run.plan.figures is None:
        return (not expected), f"fits: expected {_text(expected)}, {run.why_no_plan()}"
    return _compare("fits", expected, run.plan.figures.fits)


def check_meets_targets(run: CaseRun, expected: bool) -> Verdict:
    """The plan meets the TTFT and TPOT targets."""
    if run.plan is None or run.plan.figures is None:
        return (not expected), f"meets_targets: expected {_text(expected)}, {run.why_no_plan()}"
    misses = miss_texts(run.plan.misses)
    passed, message = _compare("meets_targets", expected, not misses)
    return passed, message + (f" ({'; '.join(misses)})" if misses and not passed else "")


def check_simulated(run: CaseRun, expected: bool) -> Verdict:
    """The plan's figures come from simulating its deployment under the traffic (percentile targets, or
    traffic the steady state cannot speak for), not from the steady state alone."""
    if run.plan is None or run.plan.figures is None:
        return (not expected), f"simulated: expected {_text(expected)}, {run.why_no_plan()}"
    source = run.plan.figures.source
    passed, message = _compare("simulated", expected, run.plan.simulation is not None and source == "simulation")
    return passed, message + f" (figures from {source})"


def check_min_goodput(run: CaseRun, expected: float) -> Verdict:
    """At least ``expected`` of the simulated requests meet both targets."""
    simulation = run.plan.simulation if run.plan is not None else None
    if simulation is None:
        why = run.why_no_plan() if run.plan is None else "no traffic to replay"
        return False, f"min_goodput: the plan was not simulated ({why})"
    return simulation.goodput >= expected, f"min_goodput: {simulation.goodput:.1%} (at least {expected:.1%})"


def check_status(run: CaseRun, expected: str) -> Verdict:
    """The plan's status: ok, targets_missed or infeasible."""
    if run.plan is None:
        return False, f"status: expected {expected}, {run.why_no_plan()}"
    return _compare("status", expected, run.plan.status)


def check_min_gpus_at_least(run: CaseRun, expected: int) -> Verdict:
    """An infeasible plan names at least ``expected`` GPUs as the fewest that fit."""
    found = run.plan.min_gpus if run.plan is not None else None
    if found is None:
        return False, f"min_gpus_at_least: expected >= {expected}, the plan names no minimum ({run.why_no_plan()})"
    return found >= expected, f"min_gpus_at_least: expected >= {expected}, got {found}"


def _strategy(run: CaseRun, name: str) -> tuple[Any, str]:
    strategy = run.plan.strategy if run.plan is not None else None
    return strategy, ("" if strategy is not None else f"{name}: {run.why_no_plan()}")


def check_decode_sp(run: CaseRun, expected: int) -> Verdict:
    """The decode phase's sequence-parallel degree."""
    strategy, why = _strategy(run, "decode_sp")
    if strategy is None:
        return False, why
    return _compare("decode_sp", expected, strategy.decode.sp)


def check_no_sp_in_decode(run: CaseRun, expected: bool) -> Verdict:
    """Decode keeps sp == 1 (SP exists only in prefill)."""
    strategy, why = _strategy(run, "no_sp_in_decode")
    if strategy is None:
        return False, why
    return _compare("no_sp_in_decode", expected, strategy.decode.sp == 1)


def check_tp_within_node(run: CaseRun, expected: bool) -> Verdict:
    """Every phase's TP group fits inside one node."""
    strategy, why = _strategy(run, "tp_within_node")
    if strategy is None:
        return False, why
    if run.gpus_per_node is None:
        return False, "tp_within_node: the cluster's GPUs per node are unknown"
    widest = max(strategy.prefill.tp, strategy.decode.tp)
    passed, message = _compare("tp_within_node", expected, widest <= run.gpus_per_node)
    return passed, message + f" (tp={widest}, {counted(run.gpus_per_node, 'GPU')} per node)"


def check_pp_over_tp(run: CaseRun, expected: bool) -> Verdict:
    """Decode pipelines across GPUs (pp > 1) with no tensor split (tp == 1)."""
    strategy, why = _strategy(run, "pp_over_tp")
    if strategy is None:
        return False, why
    d = strategy.decode
    passed, message = _compare("pp_over_tp", expected, d.pp > 1 and d.tp == 1)
    return passed, message + f" (decode {d.to_spec()})"


def _uses(strategy: Any, dimension: str) -> bool:
    if dimension == "disagg":
        return bool(strategy.disaggregated)
    return any(getattr(phase, dimension) > 1 for phase in (strategy.prefill, strategy.decode))


def check_strategy_uses(run: CaseRun, expected: list[str]) -> Verdict:
    """The plan uses each listed dimension (degree above 1) in at least one phase."""
    strategy, why = _strategy(run, "strategy_uses")
    if strategy is None:
        return False, why
    unused = [d for d in expected if not _uses(strategy, d)]
    if unused:
        return False, f"strategy_uses: {', '.join(unused)} unused in {strategy.to_spec()}"
    return True, f"strategy_uses: {', '.join(expected)} all used in {strategy.to_spec()}"


def check_degrees(run: CaseRun, expected: dict[str, dict[str, int]]) -> Verdict:
    """Exact degrees per phase, e.g. ``{decode: {tp: 8}}``."""
    strategy, why = _strategy(run, "degrees")
    if strategy is None:
        return False, why
    wrong = [f"{phase}.{key}={getattr(getattr(strategy, phase), key)} (expected {value})"
             for phase, wanted in expected.items() for key, value in wanted.items()
             if getattr(getattr(strategy, phase), key) != value]
    if wrong:
        return False, f"degrees: {', '.join(wrong)} in {strategy.to_spec()}"
    return True, f"degrees: as expected in {strategy.to_spec()}"


def check_disaggregated(run: CaseRun, expected: bool) -> Verdict:
    """Prefill and decode run on separate GPU pools."""
    strategy, why = _strategy(run, "disaggregated")
    if strategy is None:
        return False, why
    return _compare("disaggregated", expected, strategy.disaggregated)


def check_max_cost_gap(run: CaseRun, expected: float) -> Verdict:
    """The plan is within ``expected`` (a fraction) of the exhaustive search's best on the objective."""
    gap = run.cost_gap
    if gap is None:
        what = run.why_no_plan() if run.score is None else "the exhaustive search found no strategy"
        return False, f"max_cost_gap: no gap to measure: {what}"
    best = run.best.strategy if run.best else "?"
    message = f"max_cost_gap: gap {gap:+.1%} to the search's best {best} (allowed {expected:.0%})"
    return gap <= expected + GAP_SLACK, message


def _reference_ok(run: CaseRun) -> tuple[bool, str]:
    ref = run.reference
    if ref is None:
        return False, run.reference_error or "not evaluated"
    if not ref.buildable:
        rules = ", ".join(sorted({v.rule for v in ref.violations})) or "?"
        return False, f"{ref.strategy} cannot be built ({rules})"
    if not ref.valid:
        rules = ", ".join(sorted({v.rule for v in ref.violations if v.severity == "error"})) or "?"
        return False, f"{ref.strategy} breaks {rules}"
    if ref.figures is None or not ref.figures.fits:
        return False, f"{ref.strategy} does not fit in memory"
    return True, f"{ref.strategy} builds, validates and fits"


def check_reference_valid(run: CaseRun, expected: bool) -> Verdict:
    """The case's reference strategy builds, passes every mandatory rule and fits in memory."""
    ok, why = _reference_ok(run)
    return ok == expected, f"reference_valid: expected {_text(expected)}: {why}"


def reference_score(run: CaseRun) -> Score | None:
    """The reference strategy's figures, when it was priced."""
    ref = run.reference
    if ref is None or ref.figures is None:
        return None
    f = ref.figures
    return Score(ref.strategy, f.ttft_ms, f.tpot_ms, f.tokens_per_s_per_gpu, bool(ref.meets_targets and f.fits))


def check_within_reference(run: CaseRun, expected: float) -> Verdict:
    """The plan is predicted no worse than the reference strategy by more than ``expected`` (a fraction)."""
    mine, theirs = run.score, reference_score(run)
    if mine is None:
        return False, f"within_reference: {run.why_no_plan()}"
    if theirs is None or run.request is None:
        return False, f"within_reference: the reference was not priced ({run.reference_error or 'not buildable'})"
    gap = relative_gap(mine, theirs, run.request.workload)
    return gap <= expected + GAP_SLACK, (f"within_reference: {mine.strategy} is {gap:+.1%} against the reference "
                                    f"{theirs.strategy} (allowed {expected:.0%})")


def check_contradiction_detected(run: CaseRun, expected: bool) -> Verdict:
    """The prompt's contradictions were noticed (and the runner asked back instead of planning)."""
    found = bool(run.contradictions)
    detail = f" ({run.contradictions[0]})" if found else ""
    return found == expected, f"contradiction_detected: expected {_text(expected)}, got {_text(found)}{detail}"


CHECKS: dict[str, Callable[[CaseRun, Any], Verdict]] = {
    "valid": check_valid,
    "fits": check_fits,
    "meets_targets": check_meets_targets,
    "status": check_status,
    "simulated": check_simulated,
    "min_goodput": check_min_goodput,
    "min_gpus_at_least": check_min_gpus_at_least,
    "decode_sp": check_decode_sp,
    "no_sp_in_decode": check_no_sp_in_decode,
    "tp_within_node": check_tp_within_node,
    "pp_over_tp": check_pp_over_tp,
    "strategy_uses": check_strategy_uses,
    "degrees": check_degrees,
    "disaggregated": check_disaggregated,
    "max_cost_gap": check_max_cost_gap,
    "reference_valid": check_reference_valid,
    "within_reference": check_within_reference,
    "contradiction_detected": check_contradiction_detected,
}
"""Check name (as written in a case's ``expect``) to its function."""


def run_checks(run: CaseRun) -> list[CheckResult]:
    """Every check of ``run.case``, in the order written."""
    results = []
    for expectation in run.case.expect:
        passed, message = CHECKS[expectation.kind](run, expectation.value)
        results.append(CheckResult(expectation.kind, expectation.value, passed, message))
    return results
