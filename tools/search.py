"""Strategy search: enumerate every buildable strategy, score all with the fast estimate, schedule the best.

Objectives (``Workload.objective``):

* ``latency``: lowest end-to-end request latency, TTFT + (osl - 1) x TPOT;
* ``throughput``: highest output tokens/s per GPU;
* ``goodput``: highest tokens/s per GPU among strategies meeting the TTFT/TPOT targets; when none
  does, the one that misses them by the least.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pydantic import Field

from ..errors import InfeasibleError
from .constraints import allowed_layouts, satisfies, unsatisfiable
from .contracts.common import Contract
from .contracts.constraints import Constraints
from .contracts.hardware import Cluster
from .contracts.model import ModelSpec
from .contracts.reports import CostReport, MemoryReport
from .contracts.strategy import PhaseStrategy, Strategy
from .contracts.workload import Workload
from .cost.estimate import target_misses, throughput
from .cost.fast import phase_latency_s
from .cost.memory import memory_reports, weight_bytes_per_gpu
from .feasibility import phase_problems, strategy_problems
from .model_math import weight_bytes

SP_MIN_PROMPT = 4096
"""Shortest prompt for which the search tries sequence parallelism (its purpose is long-context prefill)."""

__all__ = [
    "Candidate",
    "SearchResult",
    "enumerate_strategies",
    "search",
    "min_gpus_to_fit",
    "pareto_front",
    "rank_key",
    "candidate_from_cost",
]


class Candidate(Contract):
    """One strategy with its predicted figures."""

    strategy: Strategy = Field(description="Degrees per phase.")
    spec: str = Field(description="SPEC text.")
    ttft_ms: float = Field(description="Predicted TTFT.")
    tpot_ms: float = Field(description="Predicted TPOT.")
    tokens_per_s: float = Field(description="Output tokens/s of the deployment.")
    tokens_per_s_per_gpu: float = Field(description="Output tokens/s per GPU.")
    tokens_per_s_per_user: float = Field(description="1000 / TPOT.")
    memory_per_gpu_gb: float = Field(description="Worst GPU's memory.")
    fits: bool = Field(description="Memory fits on every GPU.")
    meets_targets: bool = Field(description="TTFT and TPOT targets met.")
    target_misses: list[str] = Field(default_factory=list, description="Missed targets with gaps.")
    scored_by: str = Field(description="'estimate' (sampled closed form) or 'schedule' (full DAG simulation).")


class SearchResult(Contract):
    """Ranked strategies, best first, and the Pareto frontier of tokens/s/GPU against tokens/s/user."""

    objective: str = Field(description="What was optimised.")
    candidates: list[Candidate] = Field(description="Fitting strategies, best first.")
    frontier: list[Candidate] = Field(description="Pareto-optimal strategies, by tokens/s/user.")
    evaluated: int = Field(description="Strategies priced.")
    rejected: dict[str, int] = Field(description="Strategies pruned, counted by rule ID or 'memory'.")
    seconds: float = Field(description="Wall time of the search.")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _phase_layouts(model: ModelSpec, gpus: int, workload: Workload, *, prefill: bool) -> Iterator[PhaseStrategy]:
    """Every factorisation of ``gpus`` into dp x pp x adp x sp x tp with EP and microbatch choices.

    Pruned where a choice cannot help: attention-DP only for MoE models (for dense ones it equals dp);
    SP only in prefill and for prompts of at least 4k tokens (its purpose, knowledge doc 05);
    microbatches only where they can pipeline (pp > 1) or overlap expert all-to-alls (prefill, ep > 1).
    """
    for tp in _divisors(gpus):
        if model.num_attention_heads % tp:
            continue
        for pp in _divisors(gpus // tp):
            if pp > model.num_layers:
                continue
            rest = gpus // (tp * pp)
            for sp in _divisors(rest) if prefill and workload.isl >= SP_MIN_PROMPT else [1]:
                for adp in _divisors(rest // sp) if model.moe else [1]:
                    dp = rest // (sp * adp)
                    stage = adp * sp * tp
                    eps = [e for e in _divisors(stage) if model.moe and model.moe.num_experts % e == 0] or [1]
                    for ep in eps:
                        if pp > 1:
                            mbs = sorted({1, pp, 2 * pp}) if prefill else sorted({1, pp})
                        else:
                            mbs = [1, 2] if ep > 1 and prefill else [1]
                        for mb in mbs:
                            phase = PhaseStrategy(dp=dp, pp=pp, adp=adp, sp=sp, tp=tp, ep=ep, mb=mb)
                            if not phase_problems("prefill" if prefill else "decode", phase, model, workload):
                                yield phase


def _pool_sizes(gpus: int, per_node: int) -> list[int]:
    step = per_node if gpus > per_node else 1
    return list(range(step, gpus, step))


def _family(phase: PhaseStrategy) -> tuple[int, int, int, int]:
    """What fixes the weight sharding (stages, attention/dense TP, expert EP x TP): phases sharing GPUs
    must agree on it."""
    return (phase.pp, phase.tp, phase.ep, phase.etp)


def enumerate_strategies(
    model: ModelSpec, gpus: int, workload: Workload, *, gpus_per_node: int = 8, disaggregated: bool = True
) -> Iterator[Strategy]:
    """Every strategy shape for ``gpus`` GPUs: shared GPUs with equal weight sharding across phases, and
    (when ``disaggregated``) prefill and decode pools of whole nodes. Each phase layout is buildable on
    its own; the pairing is checked by the caller."""
    decode = list(_phase_layouts(model, gpus, workload, prefill=False))
    prefill = list(_phase_layouts(model, gpus, workload, prefill=True))
    for p in prefill:
        for d in decode:
            if _family(p) == _family(d):
                yield Strategy(prefill=p, decode=d)
    if disaggregated and gpus >= 2:
        for prefill_gpus in _pool_sizes(gpus, gpus_per_node):
            for p in _phase_layouts(model, prefill_gpus, workload, prefill=True):
                for d in _phase_layouts(model, gpus - prefill_gpus, workload, prefill=False):
                    yield Strategy(prefill=p, decode=d, disaggregated=True)


@dataclass
class _Pricer:
    model: ModelSpec
    cluster: Cluster
    workload: Workload

    def __post_init__(self) -> None:
        self._cache: dict[tuple[str, str], float] = {}

    def phase(self, name: str, phase: PhaseStrategy) -> float:
        """Fast latency of one phase layout in ms, memoised: many strategies share a phase layout."""
        key = (name, phase.to_spec())
        if key not in self._cache:
            self._cache[key] = phase_latency_s(self.model, self.cluster, name, phase, self.workload) * 1e3
        return self._cache[key]

    def candidate(self, strategy: Strategy, memory: list[MemoryReport]) -> Candidate:
        ttft = self.phase("prefill", strategy.prefill)
        tpot = self.phase("decode", strategy.decode)
        return _candidate(strategy, self.workload, ttft, tpot, "estimate", memory)


def candidate_from_cost(strategy: Strategy, workload: Workload, cost: CostReport) -> Candidate:
    """A Candidate for a strategy already priced by the full schedule."""
    return _candidate(strategy, workload, cost.ttft_ms, cost.tpot_ms, "schedule", cost.memory)


def _candidate(
    strategy: Strategy, workload: Workload, ttft: float, tpot: float, scored_by: str, memory: list[MemoryReport]
) -> Candidate:
    tokens = throughput(strategy, workload, ttft, tpot)
    misses = target_misses(workload, ttft, tpot)
    return Candidate(
        strategy=strategy,
        spec=strategy.to_spec(),
        ttft_ms=ttft,
        tpot_ms=tpot,
        tokens_per_s=tokens,
        tokens_per_s_per_gpu=tokens / strategy.gpus,
        tokens_per_s_per_user=1e3 / max(tpot, 1e-9),
        memory_per_gpu_gb=max(m.total_gb for m in memory),
        fits=all(m.fits for m in memory),
        meets_targets=not misses,
        target_misses=misses,
        scored_by=scored_by,
    )


def rank_key(objective: str, workload: Workload) -> Callable[[Candidate], tuple[float, ...]]:
    """The sort key of an objective: smaller is better (target misses first, then the objective's metric)."""

    def miss(c: Candidate) -> float:
        gap = 0.0
        if workload.ttft_ms:
            gap += max(0.0, c.ttft_ms / workload.ttft_ms - 1)
        if workload.tpot_ms:
            gap += max(0.0, c.tpot_ms / workload.tpot_ms - 1)
        return gap

    def key(c: Candidate) -> tuple[float, ...]:
        e2e = c.ttft_ms + (workload.osl - 1) * c.tpot_ms
        if objective == "latency":
            return (miss(c), e2e, -c.tokens_per_s_per_gpu)
        if objective == "throughput":
            return (miss(c), -c.tokens_per_s_per_gpu, e2e)
        return (miss(c), -c.tokens_per_s_per_gpu, e2e)

    return key


def pareto_front(candidates: list[Candidate]) -> list[Candidate]:
    """Candidates no other beats on both tokens/s/GPU and tokens/s/user, by ascending tokens/s/user."""
    ordered = sorted(candidates, key=lambda c: (-c.tokens_per_s_per_user, -c.tokens_per_s_per_gpu))
    front: list[Candidate] = []
    best_gpu = -1.0
    for cand in ordered:
        if cand.tokens_per_s_per_gpu > best_gpu:
            front.append(cand)
            best_gpu = cand.tokens_per_s_per_gpu
    return sorted(front, key=lambda c: c.tokens_per_s_per_user)


def search(
    model: ModelSpec,
    cluster: Cluster,
    workload: Workload,
    *,
    top: int = 5,
    scheduled: int = 2,
    disaggregated: bool = True,
    constraints: Constraints | None = None,
) -> SearchResult:
    """Find the best strategies for ``model`` on ``cluster`` serving ``workload``.

    Every enumerated strategy is checked for buildability, ``constraints`` and memory, the survivors are
    priced by the fast estimate, and the best ``scheduled`` are re-priced by building and scheduling their
    full DAG.

    Raises:
        InfeasibleError: no strategy fits in memory (``min_gpus`` says how many GPUs would), or none
            respects the constraints (the message names them).
    """
    began = time.perf_counter()
    pricer = _Pricer(model, cluster, workload)
    rejected: dict[str, int] = {}
    fitting: list[Candidate] = []
    evaluated = 0

    per_node = cluster.gpus_per_node
    if constraints is not None and constraints.serving:
        disaggregated = constraints.serving == "disaggregated"

    def layouts(gpus: int, *, prefill: bool) -> Iterator[PhaseStrategy]:
        phase = "prefill" if prefill else "decode"
        found = _phase_layouts(model, gpus, workload, prefill=prefill)
        return allowed_layouts(found, phase, constraints, per_node, rejected)

    def consider(strategy: Strategy) -> None:
        nonlocal evaluated
        if not satisfies(strategy, constraints, per_node):
            rejected["constraints"] = rejected.get("constraints", 0) + 1
            return
        problems = strategy_problems(model, strategy, workload, cluster.world_size)
        if problems:
            rejected[problems[0].rule] = rejected.get(problems[0].rule, 0) + 1
            return
        memory = memory_reports(model, cluster.gpu, strategy, workload)
        if not all(m.fits for m in memory):
            rejected["MEM-1"] = rejected.get("MEM-1", 0) + 1
            return
        evaluated += 1
        fitting.append(pricer.candidate(strategy, memory))

    gpus = cluster.world_size
    decode_layouts = list(layouts(gpus, prefill=False))
    # Every objective improves as TTFT or TPOT falls, and prefill does not change the decode figures, so
    # each weight-sharding family needs only its fastest prefill layout.
    best_prefill: dict[tuple[int, int, int, int], PhaseStrategy] = {}
    capacity = cluster.gpu.memory_gb * 1e9
    for layout in layouts(gpus, prefill=True):
        if weight_bytes_per_gpu(model, layout) > capacity:
            rejected["MEM-1"] = rejected.get("MEM-1", 0) + 1
            continue
        family = _family(layout)
        if family not in best_prefill or pricer.phase("prefill", layout) < pricer.phase(
            "prefill", best_prefill[family]
        ):
            best_prefill[family] = layout
    for layout in decode_layouts:
        if _family(layout) in best_prefill:
            consider(Strategy(prefill=best_prefill[_family(layout)], decode=layout))
    if disaggregated and gpus >= 2:
        for prefill_gpus in _pool_sizes(gpus, cluster.gpus_per_node):
            pool = [
                p
                for p in layouts(prefill_gpus, prefill=True)
                if memory_reports(model, cluster.gpu, Strategy(prefill=p, decode=p, disaggregated=True), workload)[
                    0
                ].fits
            ]
            if not pool:
                continue
            fastest = min(pool, key=lambda p: pricer.phase("prefill", p))
            for layout in layouts(gpus - prefill_gpus, prefill=False):
                consider(Strategy(prefill=fastest, decode=layout, disaggregated=True))
    if not fitting and constraints is not None and any(k.startswith("constraint") for k in rejected):
        _raise_for_constraints(model, cluster, workload, constraints)
    if not fitting:
        need = min_gpus_to_fit(model, cluster, workload)
        weights_gb = weight_bytes(model) / 1e9
        capacity_gb = cluster.world_size * cluster.gpu.memory_gb
        raise InfeasibleError(
            f"{model.name} does not fit on {cluster.world_size} x {cluster.gpu.name}: its weights are "
            f"{weights_gb:.0f} GB ({model.weight_dtype}) and batch {workload.batch} at {workload.isl}+{workload.osl} "
            f"tokens adds KV cache, against {capacity_gb:.0f} GB of GPU memory less runtime workspace"
            + (
                f"; the fewest {cluster.gpu.name} GPUs that fit is {need}" if need else "; no GPU count up to 1024 fits"
            ),
            min_gpus=need,
        )
    key = rank_key(workload.objective, workload)
    fitting.sort(key=key)
    rescored = []
    for cand in fitting[:scheduled]:
        cost = estimate_cost_for(model, cluster, cand.strategy, workload)
        rescored.append(_candidate(cand.strategy, workload, cost.ttft_ms, cost.tpot_ms, "schedule", cost.memory))
    ranked = sorted(rescored, key=key) + fitting[scheduled:]
    return SearchResult(
        objective=workload.objective,
        candidates=ranked[: max(top, 1)],
        frontier=pareto_front(ranked),
        evaluated=evaluated,
        rejected=rejected,
        seconds=time.perf_counter() - began,
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
        f"do not fit in memory ({model.weight_dtype} weights, batch {workload.batch} at {workload.isl}+{workload.osl} "
        "tokens); relax the constraints or add GPUs"
    )


def estimate_cost_for(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> CostReport:
    """Build the strategy's full DAG and schedule it (memoised, see :mod:`shardplan.tools.evaluation`)."""
    from .evaluation import evaluate

    return evaluate(model, cluster, strategy, workload).cost


def min_gpus_to_fit(model: ModelSpec, cluster: Cluster, workload: Workload, limit: int = 1024) -> int | None:
    """The fewest GPUs of the cluster's kind on which some strategy fits in memory, or None up to ``limit``."""
    from .hardware import make_cluster

    # A request smaller than one node still buys whole nodes of the GPU's usual size when it grows.
    per_node = max(cluster.gpus_per_node, cluster.gpu.gpus_per_node) if cluster.nodes == 1 else cluster.gpus_per_node
    counts = sorted({n for n in (1, 2, 4) if n < per_node} | set(range(per_node, limit + 1, per_node)))
    for gpus in counts:
        if gpus <= cluster.world_size:
            continue
        trial = make_cluster(cluster.gpu, gpus, per_node)
        for phase in _phase_layouts(model, gpus, workload, prefill=False):
            strategy = Strategy(prefill=phase, decode=phase)
            if strategy_problems(model, strategy, workload, trial.world_size):
                continue
            if all(m.fits for m in memory_reports(model, trial.gpu, strategy, workload)):
                return gpus
    return None
