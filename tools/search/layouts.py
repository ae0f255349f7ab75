"""Layout enumeration: every buildable way to lay a model over a GPU count, and the replica layouts that
pack into a cluster's nodes within a budget."""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.contracts.arithmetic.feasibility import phase_problems
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Workload
from shardplan.packing import max_workers, packs

__all__ = ["SP_MIN_PROMPT", "phase_layouts", "replica_layouts", "enumerate_strategies"]

SP_MIN_PROMPT = 4096
"""Shortest prompt for which the search tries sequence parallelism (its purpose is long-context prefill)."""


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def phase_layouts(model: ModelSpec, gpus: int, workload: Workload, *, prefill: bool) -> Iterator[PhaseStrategy]:
    """Every factorisation of ``gpus`` into dp x pp x adp x sp x tp with EP and microbatch choices.

    Pruned where a choice cannot help: attention-DP only for MoE models (for dense ones it equals dp);
    SP only in prefill and for prompts of at least 4k tokens (its purpose, knowledge doc 05);
    microbatches only where they can pipeline (pp > 1) or overlap expert all-to-alls (prefill, ep > 1).
    """
    # Buildability must not depend on a concurrency the search has yet to choose.
    roomy = workload.at_concurrency(max(workload.batch or 0, 1 << 16))
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
                            if not phase_problems("prefill" if prefill else "decode", phase, model, roomy):
                                yield phase


def replica_layouts(
    model: ModelSpec, cluster: Cluster, budget: int, workload: Workload, *, prefill: bool = False, smallest: int = 1
) -> Iterator[PhaseStrategy]:
    """Layouts of one replica (dp=1) of every size from ``smallest`` GPUs that packs into the cluster's nodes
    within ``budget``.

    Continuous batching keeps one microbatch: engines pipeline stages by keeping one batch per stage in
    flight, which the serving model prices (see :mod:`shardplan.tools.serving.steps`).
    """
    for gpus in range(max(smallest, 1), budget + 1):
        if not packs(gpus, cluster.gpus_per_node) or max_workers(budget, cluster.gpus_per_node, gpus) < 1:
            continue
        for layout in phase_layouts(model, gpus, workload, prefill=prefill):
            if layout.dp != 1 or (workload.batching == "continuous" and not prefill and layout.mb != 1):
                continue
            yield layout


def enumerate_strategies(
    model: ModelSpec, gpus: int, workload: Workload, *, gpus_per_node: int = 8, disaggregated: bool = True
) -> Iterator[Strategy]:
    """Every strategy shape for exactly ``gpus`` GPUs: shared GPUs with equal weight sharding across phases,
    and (when ``disaggregated``) prefill and decode pools of whole nodes. Each phase layout is buildable on
    its own; the pairing is checked by the caller."""

    def family(phase: PhaseStrategy) -> tuple[int, int, int, int]:
        return (phase.pp, phase.tp, phase.ep, phase.etp)

    decode = list(phase_layouts(model, gpus, workload, prefill=False))
    prefill = list(phase_layouts(model, gpus, workload, prefill=True))
    for p in prefill:
        for d in decode:
            if family(p) == family(d):
                yield Strategy(prefill=p, decode=d)
    if disaggregated and gpus >= 2:
        step = gpus_per_node if gpus > gpus_per_node else 1
        for prefill_gpus in range(step, gpus, step):
            for p in phase_layouts(model, prefill_gpus, workload, prefill=True):
                for d in phase_layouts(model, gpus - prefill_gpus, workload, prefill=False):
                    yield Strategy(prefill=p, decode=d, disaggregated=True)
