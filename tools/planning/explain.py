"""The plan's explanation, computed from its own placement and figures, never templated.

Every claim is read off the plan: which nodes each TP, expert and pipeline group's ranks sit on (from
the DAG's collectives and the cluster they were placed on), how many of each group's collectives per
decode step cross the network, the deployment's replicas, GPUs and concurrency, and the priced figures.
"""

from __future__ import annotations

from collections import Counter

from shardplan.contracts.dag import DAG, CommNode
from shardplan.contracts.feature_effects import PrefixCacheEffect, SpeculationEffect
from shardplan.contracts.figures import Figures
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import Alternative, Deployment
from shardplan.contracts.strategy import Strategy
from shardplan.text import agreeing, counted
from shardplan.tools.planning.prefix_cache import prefix_cache_sentence
from shardplan.tools.planning.speculation import speculation_sentence

__all__ = ["explain", "collectives_by_group"]

_GROUPS = {
    "tp_reduce": "tp",
    "shared_expert_reduce": "tp",
    "vocab_gather": "tp",
    "ep_dispatch": "ep",
    "ep_combine": "ep",
    "pp_activation": "pp",
    "adp_gather": "adp",
    "adp_scatter": "adp",
}


def collectives_by_group(dag: DAG, phase: str = "decode") -> dict[str, tuple[int, int]]:
    """Per parallel group (tp, ep, pp, adp): (collectives in one step of ``phase``, how many cross nodes).

    Send and receive of one pipeline hop count once (the send).
    """
    total: Counter[str] = Counter()
    across: Counter[str] = Counter()
    for node in dag.nodes:
        if not isinstance(node, CommNode) or node.phase != phase or node.kind == "recv":
            continue
        group = _GROUPS.get(node.purpose)
        if group is None:
            continue
        total[group] += 1
        if node.scope == "inter_node":
            across[group] += 1
    return {group: (total[group], across[group]) for group in total}


def _deployment_sentence(model: ModelSpec, cluster: Cluster, strategy: Strategy, deployment: Deployment) -> str:
    d = deployment
    used = f"{d.gpus_used} of {d.gpu_budget} {cluster.gpu.name} GPUs"
    if strategy.disaggregated:
        prefill, decode = d.pools[0], d.pools[-1]
        if prefill.gpu and decode.gpu:
            used = (f"{d.gpus_used} of {counted(d.gpu_budget, 'GPU')} ({prefill.workers * prefill.gpus_per_worker} "
                    f"{prefill.gpu} "
                    f"for prefill, {decode.workers * decode.gpus_per_worker} {decode.gpu} for decode)")
        text = (
            f"{model.name}: {counted(d.prefill_workers, 'prefill worker')} of {prefill.layout} and "
            f"{counted(d.decode_workers, 'decode worker')} of {decode.layout} (disaggregated, KV moved between pools "
            f"in {d.kv_transfer_ms:.2f} ms per "
            f"request) on {used}, {counted(d.concurrency, 'sequence')} in flight"
        )
    else:
        pool = d.pools[0]
        text = (
            f"{model.name}: {counted(d.replicas, 'replica')} of {pool.layout} ({counted(pool.gpus_per_worker, 'GPU')} "
            f"each) on {used}, {counted(d.concurrency, 'sequence')} in "
            f"flight "
            f"({pool.concurrency_per_worker} per replica, {d.batching} batching)"
        )
    if d.idle_gpus:
        text += f"; {counted(d.idle_gpus, 'GPU')} {agreeing(d.idle_gpus, 'stays', 'stay')} idle because {d.idle_reason}"
    return text + "."


def _group_sentence(name: str, degree: int, counts: tuple[int, int] | None, spans: int, rules: str) -> str:
    total, across = counts or (0, 0)
    where = "stay inside one node" if spans <= 1 else f"cross nodes (each spans {counted(spans, 'node')})"
    tail = (
        f"; {across} of its {total} collectives per decode step cross the network"
        if across
        else f"; none of its {total} collectives per decode step leaves the node"
    )
    return f"{name}={counted(degree, 'group')} {where} ({rules}){tail if total else ''}."


def _span(cluster: Cluster, ranks: list[int]) -> int:
    return len({cluster.node_of(r) for r in ranks})


def explain(
    model: ModelSpec,
    strategy: Strategy,
    figures: Figures,
    dag: DAG | None,
    deployment: Deployment | None,
    runner_up: Alternative | None,
    reviewing: bool = False,
    *,
    speculation: SpeculationEffect | None = None,
    prefix_cache: PrefixCacheEffect | None = None,
) -> str:
    """A few sentences on the deployment and why its layout suits the request, each from the plan itself.

    With ``reviewing``, ``runner_up`` is the best strategy that beats the reviewed one, and its ``why_not`` what
    the reviewed strategy has against it."""
    cluster = dag.meta.cluster if dag is not None else None
    parts: list[str] = []
    if deployment is not None and cluster is not None:
        parts.append(_deployment_sentence(model, cluster, strategy, deployment))
    d = strategy.decode
    groups = collectives_by_group(dag) if dag is not None else {}
    if cluster is not None and dag is not None:
        spans = _group_spans(dag, cluster)
        if d.tp > 1:
            parts.append(
                _group_sentence("TP", d.tp, groups.get("tp"), spans.get("tp", 1), "TP-5")
                + " Each all-reduce after a row-parallel projection blocks the residual add (TP-2, TP-6)."
            )
        if model.is_moe and d.ep > 1:
            parts.append(
                _group_sentence("EP", d.ep, groups.get("ep"), spans.get("ep", 1), "EP-1")
                + " Every MoE layer routes, dispatches, computes and combines through explicit all-to-alls."
            )
        if d.pp > 1:
            total, across = groups.get("pp", (0, 0))
            parts.append(
                f"PP={d.pp} passes activations between stages with send/recv only (PP-3): {total} hops per decode "
                f"step, {across} across nodes; stages run one after another within a step (PP-5), and continuous "
                "batching keeps one batch per stage in flight."
            )
    if strategy.prefill.sp > 1:
        parts.append(f"SP={strategy.prefill.sp} shards the prompt in prefill only (SP-1, SP-2).")
    parts.append(
        f"Predicted TTFT {figures.ttft_ms:.1f} ms, TPOT {figures.tpot_ms:.2f} ms, {figures.tokens_per_s_per_gpu:.1f} "
        f"tokens/s/GPU, {figures.memory_per_gpu_gb:.1f} GB per GPU."
    )
    if speculation is not None:
        parts.append(speculation_sentence(speculation))
    if prefix_cache is not None:
        parts.append(prefix_cache_sentence(prefix_cache, strategy, figures.ttft_ms))
    if runner_up is not None and reviewing:
        parts.append(f"Beaten by {runner_up.strategy} (against it, the reviewed strategy: {runner_up.why_not}).")
    elif runner_up is not None:
        parts.append(f"Runner-up {runner_up.strategy}: {runner_up.why_not}.")
    return " ".join(parts)


def _group_spans(dag: DAG, cluster: Cluster) -> dict[str, int]:
    """The most nodes any one TP or EP group of the decode phase spans, read from its collectives' ranks."""
    spans: dict[str, int] = {}
    for node in dag.nodes:
        if isinstance(node, CommNode) and node.phase == "decode":
            group = _GROUPS.get(node.purpose)
            if group in ("tp", "ep"):
                spans[group] = max(spans.get(group, 1), _span(cluster, node.ranks))
    return spans
