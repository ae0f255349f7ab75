"""Whether a strategy can be built for a model, cluster and workload: one list of problems.

The builder refuses a strategy with these problems; the validators report the same problems on a
DAG that claims such a strategy. Each problem names the knowledge rule it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Workload
from shardplan.text import counted

__all__ = ["Problem", "phase_problems", "strategy_problems", "split_layers", "idle_decode_groups", "sequences_needed",
           "needed_sequences_text"]


@dataclass(frozen=True)
class Problem:
    """One reason a strategy cannot be built."""

    rule: str
    message: str
    fix: str


def split_layers(num_layers: int, pp: int, given: list[int] | None = None) -> list[list[int]]:
    """Consecutive layers per pipeline stage: ``given`` counts, or an even split with the remainder
    on the earliest stages (the last stage also runs the LM head).

    >>> split_layers(5, 2)
    [[0, 1, 2], [3, 4]]
    """
    counts = given or [num_layers // pp + (1 if stage < num_layers % pp else 0) for stage in range(pp)]
    stages, start = [], 0
    for count in counts:
        stages.append(list(range(start, start + count)))
        start += count
    return stages


def phase_problems(
    name: str, phase: PhaseStrategy, model: ModelSpec, workload: Workload, *, idle_groups: bool = False
) -> list[Problem]:
    """Why one phase's layout cannot be built (the per-phase half of :func:`strategy_problems`).

    With ``idle_groups`` the attention-DP groups may outnumber the sequences (those without one idle);
    replicas and microbatches still need a sequence each.
    """
    problems: list[Problem] = []
    add = problems.append
    heads, kv_heads = model.num_attention_heads, model.num_kv_heads
    if name == "decode" and phase.sp > 1:
        add(
            Problem(
                "SP-1",
                f"sp={phase.sp} in decode: sequence parallelism exists only in prefill",
                "set decode sp=1 and use those GPUs as adp (attention data parallel) or dp",
            )
        )
    if heads % phase.tp:
        add(
            Problem(
                "TP-3",
                f"{name}: tp={phase.tp} does not divide num_attention_heads={heads}",
                f"choose tp among the divisors of {heads}",
            )
        )
    if model.mla is None and kv_heads % phase.tp and phase.tp % kv_heads:
        add(
            Problem(
                "TP-3",
                f"{name}: tp={phase.tp} neither divides nor is a multiple of num_kv_heads={kv_heads}",
                "choose tp that divides the KV heads or is a multiple of them (heads are replicated)",
            )
        )
    dense_layers = model.num_layers if model.moe is None else model.moe.first_dense_layers
    if dense_layers and model.intermediate_size % phase.tp:
        add(
            Problem(
                "TP-3",
                f"{name}: tp={phase.tp} does not divide intermediate_size={model.intermediate_size}",
                "choose a tp that divides the FFN width",
            )
        )
    if model.moe is None:
        if phase.ep > 1:
            add(
                Problem(
                    "EP-3",
                    f"{name}: ep={phase.ep} on a dense model ({model.name} has no experts)",
                    "set ep=1; expert parallelism needs a mixture-of-experts model",
                )
            )
    else:
        moe = model.moe
        if moe.num_experts % phase.ep:
            add(
                Problem(
                    "EP-3",
                    f"{name}: ep={phase.ep} does not divide num_experts={moe.num_experts}",
                    f"choose ep among the divisors of {moe.num_experts}",
                )
            )
        if phase.stage_gpus % phase.ep:
            add(
                Problem(
                    "HIER-1",
                    f"{name}: ep={phase.ep} does not divide the stage's adp*sp*tp={counted(phase.stage_gpus, 'GPU')}",
                    "EP regroups a stage's GPUs: choose ep dividing adp*sp*tp, or leave adp out of the spec "
                    "(ep=N then runs attention as N/(sp*tp) data-parallel groups, e.g. ep=2 is adp=2,ep=2)",
                )
            )
        elif moe.expert_intermediate_size % phase.etp:
            add(
                Problem(
                    "TP-3",
                    f"{name}: expert tp={phase.etp} does not divide the expert width {moe.expert_intermediate_size}",
                    "raise ep so that each expert is split less",
                )
            )
        if moe.num_shared_experts and moe.shared_expert_intermediate_size % phase.tp:
            add(
                Problem(
                    "TP-3",
                    f"{name}: tp={phase.tp} does not divide the shared expert width "
                    f"{moe.shared_expert_intermediate_size}",
                    "choose a tp that divides it",
                )
            )
    if phase.pp > model.num_layers:
        add(
            Problem(
                "PP-4",
                f"{name}: pp={phase.pp} exceeds num_layers={model.num_layers}",
                f"use at most {counted(model.num_layers, 'stage')}",
            )
        )
    if phase.layer_split is not None:
        split = phase.layer_split
        if len(split) != phase.pp or sum(split) != model.num_layers or min(split) < 1:
            add(
                Problem(
                    "PP-1",
                    f"{name}: layer split {split} is not {phase.pp} positive counts summing to "
                    f"num_layers={model.num_layers}",
                    "give one count per stage, each at least 1",
                )
            )
    if name == "prefill" and phase.sp > workload.isl:
        add(
            Problem(
                "SP-5",
                f"prefill: sp={phase.sp} exceeds the prompt length isl={workload.isl}",
                "use fewer sequence shards than prompt tokens",
            )
        )
    groups = phase.dp * phase.mb * (1 if idle_groups else phase.adp)
    batch = workload.phase_batch(name)
    if groups > batch:
        add(
            Problem(
                "MB-3",
                f"{name}: batch={batch} cannot feed dp*adp*mb={groups} "
                f"(dp={phase.dp}, adp={phase.adp}, mb={phase.mb}) with a sequence each",
                f"raise the batch to at least {groups} or lower dp, adp or mb",
            )
        )
    return problems


def strategy_problems(
    model: ModelSpec, strategy: Strategy, workload: Workload, gpus: int, per_node: int | None = None, *,
    apart: bool = False,
) -> list[Problem]:
    """Every reason ``strategy`` cannot run ``model`` on ``gpus`` GPUs for ``workload``; empty when it can.

    ``per_node`` GPUs per node: split pools are drawn on node boundaries (see ``Strategy.span``), so a
    4-GPU prefill worker and an 8-GPU decode worker span 16 GPUs of 8-GPU nodes; ``apart``: the pools run on two
    GPU types, each worker on nodes of its own type.

    >>> from shardplan.tools.catalogs.models import load_model
    >>> from shardplan.contracts.strategy import parse_strategy
    >>> from shardplan.contracts.workload import Workload
    >>> llama = load_model("llama-3.1-8b")
    >>> [p.rule for p in strategy_problems(llama, parse_strategy("tp=3"), Workload(isl=8, osl=8), 3)]
    ['TP-3', 'TP-3', 'TP-3']
    """
    p, d = strategy.prefill, strategy.decode
    problems = phase_problems("prefill", p, model, workload)
    # Colocated SP prefill of fewer prompts than decode's attention groups (one long prompt, SP's purpose)
    # is legal: the groups without a sequence idle in decode (SP-6).
    problems += phase_problems("decode", d, model, workload, idle_groups=not strategy.disaggregated and p.sp > 1)
    if apart and not strategy.disaggregated:
        problems.append(
            Problem(
                "KV-5",
                "prefill and decode share GPUs, but the cluster has two GPU types (prefill on one, decode on the "
                "other)",
                "give a split strategy (prefill:...;decode:...;disagg), or one GPU type",
            )
        )
    if strategy.disaggregated:
        span = strategy.span(per_node, apart=apart)
        if span != gpus:
            gap = ""
            if span > p.gpus + d.gpus:
                gap = f" (the decode pool starts on a new node: {counted(span, 'GPU')} from first to last)"
            problems.append(
                Problem(
                    "HIER-2",
                    f"prefill pool {p.gpus} + decode pool {counted(d.gpus, 'GPU')}{gap} != {counted(gpus, 'GPU')}",
                    "size the two pools to add up to the GPU count",
                )
            )
    else:
        for name, phase in (("prefill", p), ("decode", d)):
            if phase.gpus != gpus:
                problems.append(
                    Problem(
                        "HIER-2",
                        f"{name}: dp*pp*adp*sp*tp = {phase.dp}*{phase.pp}*{phase.adp}*{phase.sp}*{phase.tp}"
                        f" = {counted(phase.gpus, 'GPU')}, but the cluster has {gpus}",
                        f"choose degrees whose product is {gpus}",
                    )
                )
        moe = model.moe is not None

        def sharding(x: PhaseStrategy) -> str:
            return f"pp={x.pp}, tp={x.tp}" + (f", ep={x.ep}, etp={x.etp}" if moe else "")

        same = (p.pp, p.tp, p.layer_split) == (d.pp, d.tp, d.layer_split) and (
            not moe or (p.ep, p.etp) == (d.ep, d.etp)
        )
        if not same:
            problems.append(
                Problem(
                    "HIER-2",
                    f"prefill ({sharding(p)}) and decode ({sharding(d)}) shard the weights differently on shared GPUs",
                    "keep pp, tp, the layer split"
                    + (", ep and expert TP (adp*sp*tp/ep)" if moe else "")
                    + " equal across phases, or serve disaggregated (;disagg)",
                )
            )
    return problems


def idle_decode_groups(strategy: Strategy, workload: Workload) -> int:
    """Attention-DP groups per decode replica that hold no sequence (0 when the batch fills them all).

    >>> from shardplan.contracts.strategy import parse_strategy
    >>> from shardplan.contracts.workload import Workload
    >>> idle_decode_groups(parse_strategy("sp=4"), Workload(isl=8192, osl=64, batch=1))
    3
    """
    d = strategy.decode
    per_replica_mb = -(-workload.sequences // (d.dp * d.mb))  # sequences in one microbatch of one replica
    return max(0, d.adp - per_replica_mb)


def sequences_needed(strategy: Strategy) -> int:
    """The fewest sequences a deployment is priced with: one per attention data-parallel group and microbatch of
    each replica (or decode worker), and of one prefill worker when the pools are split.

    >>> from shardplan.contracts.strategy import parse_strategy
    >>> sequences_needed(parse_strategy("adp=8,ep=8")), sequences_needed(parse_strategy("dp=2,tp=4"))
    (8, 2)
    """
    decode = strategy.decode.dp * strategy.decode.adp * strategy.decode.mb
    prefill = strategy.prefill.adp * strategy.prefill.mb
    return max(decode, prefill) if strategy.disaggregated else decode


def needed_sequences_text(needed: int) -> str:
    """What :func:`sequences_needed` counts, in words: ``at least N sequences, one for each ...``."""
    return (f"at least {counted(needed, 'sequence')}, one for each replica, attention data-parallel group and "
            f"microbatch "
            "(dp x adp x mb)")
