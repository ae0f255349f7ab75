"""How deployments are ranked: target shortfall first, then the objective's figure; the Pareto frontier.

Plain functions over :class:`~shardplan.contracts.figures.Figures`, the one record every priced deployment
carries (search candidates, a plan's own deployment, its alternatives), so the search, the deployment
evaluation and the planner rank alike. Whether figures meet the targets is :mod:`shardplan.contracts.targets`'
one verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeVar

from shardplan.contracts.figures import Figures
from shardplan.contracts.plan import NearTie, PricedDeployment
from shardplan.contracts.targets import shortfall
from shardplan.contracts.workload import Workload
from shardplan.text import counted
from shardplan.tools.cost.estimate import stated_error_pct

__all__ = [
    "rank_key",
    "ranked",
    "pareto_front",
    "leading_within",
    "near_tie",
    "near_tie_note",
    "prefer_aggregated",
]


def rank_key(workload: Workload) -> Callable[[Figures], tuple[float, ...]]:
    """The sort key of the workload's objective over figures: smaller is better (target misses first, then the
    objective's figure: fewest GPUs for a rate, request latency for ``latency``, the tokens/s the budget serves
    otherwise)."""
    targets = workload.targets

    def key(f: Figures) -> tuple[float, ...]:
        miss = shortfall(f, targets)
        gpus = float(f.gpus_used)
        if workload.rate is not None:
            # Among the fewest GPUs, the lightest load that still serves the rate: its operating point.
            return (miss, gpus, f.e2e_ms, -f.tokens_per_s_per_gpu)
        if workload.objective == "latency":
            return (miss, f.e2e_ms, gpus, -f.tokens_per_s_per_gpu)
        # Throughput: the most tokens the budget serves (tokens/s per GPU of the budget, idle ones counting
        # as zero, as AIConfigurator ranks too); among equals the fewest GPUs. Ranking by tokens/s per GPU
        # used would leave GPUs idle for a slightly more efficient but smaller deployment.
        return (miss, -f.tokens_per_s, gpus, f.e2e_ms)

    return key


class _Priced(Protocol):
    @property
    def figures(self) -> Figures: ...


_PricedT = TypeVar("_PricedT", bound=_Priced)


def ranked(items: Sequence[_PricedT], workload: Workload) -> list[_PricedT]:
    """``items`` best first under the workload's objective (a stable sort: ties keep their order)."""
    key = rank_key(workload)
    return sorted(items, key=lambda item: key(item.figures))


def pareto_front(items: Sequence[_PricedT]) -> list[_PricedT]:
    """Items no other beats on both tokens/s per GPU of the budget (what the throughput objective ranks, so the
    best deployment for it is always on the front) and tokens/s/user, by ascending tokens/s/user."""
    ordered = sorted(
        items, key=lambda c: (-c.figures.tokens_per_s_per_user, -c.figures.tokens_per_s_per_budget_gpu)
    )
    front: list[_PricedT] = []
    best = -1.0
    for item in ordered:
        if item.figures.tokens_per_s_per_budget_gpu > best:
            front.append(item)
            best = item.figures.tokens_per_s_per_budget_gpu
    return front[::-1]


def leading_within(values: Sequence[float], error_pct: float, higher_is_better: bool = True) -> tuple[int, float]:
    """How many leading ``values`` (best first) lie within ``error_pct`` percent of the first, and the largest
    of their gaps to it in percent; the run stops at the first value outside.

    >>> leading_within([100.0, 99.0, 97.5, 80.0], 5.0)
    (3, 2.5)
    >>> count, gap = leading_within([10.0, 10.3, 12.0], 5.0, higher_is_better=False)
    >>> count, round(gap, 6)
    (2, 3.0)
    """
    if not values or values[0] <= 0:
        return (min(len(values), 1), 0.0)
    best = values[0]
    count, spread = 1, 0.0
    for value in values[1:]:
        gap = abs(value - best) / best * 100 if higher_is_better else abs(value / best - 1) * 100
        if gap > error_pct:
            break
        count, spread = count + 1, max(spread, gap)
    return count, spread


def near_tie(
    leading: Sequence[Figures],
    workload: Workload,
    backend: Literal["measured", "roofline"],
    subject: str = "the top {top}",
) -> NearTie | None:
    """The leading deployments of a ranking that lie within the model's stated error of the best one, or None
    when fewer than two do.

    The deployments are put in rank order first (:func:`rank_key`); the compared figure is the objective's:
    output tokens/s for throughput and goodput, request latency for latency and, among deployments with the
    fewest GPUs, for a rate. The run stops where a deployment meets the targets and the best does not, or
    the other way round, or where a deployment uses more GPUs than the best (fewer GPUs is the tie-breaker,
    and a GPU count carries no model error), since those differences are not ones of degree. ``subject``
    names them in the note
    (``{top}``: how many; ``{others}``: how many besides the first).
    """
    ordered = sorted(leading, key=rank_key(workload))
    if len(ordered) < 2:
        return None
    latency = workload.objective == "latency" or workload.rate is not None
    figure: Literal["tokens/s", "request latency"] = "request latency" if latency else "tokens/s"
    error = stated_error_pct(backend, figure, workload.osl)
    targets = workload.targets
    meets = shortfall(ordered[0], targets) == 0
    alike = [ordered[0]]
    for c in ordered[1:]:
        # GPU counts are exact, not estimates: more GPUs for a figure within the error is simply worse.
        more_gpus = c.gpus_used != alike[0].gpus_used if workload.rate is not None else c.gpus_used > alike[0].gpus_used
        if (shortfall(c, targets) == 0) != meets or more_gpus:
            break
        alike.append(c)
    values = [c.e2e_ms if latency else c.tokens_per_s for c in alike]
    top, spread = leading_within(values, error, higher_is_better=not latency)
    if top < 2:
        return None
    spread = round(spread, 2)  # the note and the field print the same figure
    return NearTie(
        top=top,
        figure=figure,
        spread_pct=spread,
        model_error_pct=error,
        backend=backend,
        note=near_tie_note(
            subject.format(top=top, others=top - 1, runners=counted(top - 1, "runner-up", "runners-up")),
            spread, error, figure, backend,
        ),
    )


def near_tie_note(subject: str, spread_pct: float, error_pct: float, figure: str, backend: str) -> str:
    """The sentence under a ranking whose leaders (``subject``) are within ``spread_pct`` of each other.

    >>> near_tie_note("the top 5", 1.4, 22.0, "tokens/s", "measured").split(", inside")[0]
    'the top 5 are within 1.4% of each other in tokens/s'
    """
    return (
        f"{subject} are within {spread_pct:.1f}% of each other in {figure}, inside the model's stated error of "
        f"{error_pct:.1f}% ({backend} backend): treat them as equal"
    )


def prefer_aggregated(
    ordered: list[PricedDeployment], workload: Workload, error_pct: float
) -> tuple[list[PricedDeployment], str | None]:
    """``ordered`` (best first) with the best aggregated deployment moved first when the best is a split one
    that leads it by no more than the model's stated error on tokens/s, both meeting the targets; and the
    sentence saying so (None when the order stands).

    The model cannot tell such a pair apart, and the split one costs more to run: two pools whose ratio must
    follow the traffic, a KV-cache transfer per request, a router. Its figures also leave out what only a
    split deployment pays (AIConfigurator's estimator takes 8% off a decode pool's rate and 10% off a
    prefill pool's for it). Only for the throughput objectives without a rate: a rate ranks by GPUs, and
    latency without a rate never splits.
    """
    if not ordered or workload.rate is not None or workload.objective not in ("throughput", "goodput"):
        return ordered, None
    best = ordered[0]
    if not best.strategy.disaggregated or not best.meets_targets:
        return ordered, None
    for index, option in enumerate(ordered):
        if option.strategy.disaggregated or not option.meets_targets:
            continue
        lead = (best.figures.tokens_per_s - option.figures.tokens_per_s) / best.figures.tokens_per_s * 100
        if lead > error_pct:
            return ordered, None
        note = (
            f"the split deployment {best.strategy.to_spec()} leads the aggregated {option.strategy.to_spec()} by "
            f"{lead:.1f}% in tokens/s, inside the model's stated {error_pct:.1f}% error; the aggregated one is "
            f"chosen: no KV-cache transfer, no pool ratio to keep matched"
        )
        return [option, *ordered[:index], *ordered[index + 1 :]], note
    return ordered, None
