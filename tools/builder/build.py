"""Strategy to parallel strategy DAG: every compute, communication and KV-cache step of prefill and of
one decode step.

Shape of the graph (knowledge docs 09-11):

* Two top-level branches, ``prefill`` and ``decode``; one ``step_boundary`` closes prefill, one opens
  decode step t and one opens step t+1. Disaggregated serving puts ``kv_transfer`` nodes between.
* Per microbatch, per pipeline stage, per layer: input norm, QKV projection (column-parallel), K/V
  all-gather under SP, KV-cache write (and read in decode), attention, output projection
  (row-parallel, partial) and its explicit reduction, residual add and post-attention norm on the
  reduced tensor, then a dense FFN or an MoE block (router, dispatch, expert compute per expert rank,
  shared experts, combine). Send/recv joins stages. The last stage runs final norm, vocabulary-parallel
  LM head with its gather, and the sampler.
* A TP operator is one node on its TP group; SP shards and attention-DP groups are separate nodes;
  one data-parallel replica is drawn.
"""

from __future__ import annotations

import math

from shardplan.contracts.arithmetic.feasibility import split_layers, strategy_problems
from shardplan.contracts.arithmetic.model_math import kv_width
from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.dag import DAG, DAGMeta
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import StrategyError
from shardplan.tools.builder.draft import emit_drafts
from shardplan.tools.builder.graph import GraphBuffer
from shardplan.tools.builder.phase import PhaseBuilder, decode_context
from shardplan.tools.builder.ranks import RankLayout
from shardplan.tools.builder.skeleton import emit_phase
from shardplan.tools.catalogs.drafters import drafter_for

__all__ = ["build_dag", "build_phase_sample", "decode_context", "representative_layers"]


def build_dag(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> DAG:
    """The parallel strategy DAG of ``strategy`` for ``model`` on ``cluster`` serving ``workload``.

    Raises:
        StrategyError: the strategy cannot be built (a degree that does not divide, SP in decode, EP on a
            dense model, degrees whose product is not the GPU count); the message gives every reason
            with its rule ID.
    """
    problems = strategy_problems(model, strategy, workload, cluster.world_size, cluster.gpus_per_node,
                                 apart=cluster.mixed)
    if problems:
        reasons = "; ".join(f"{p.message} [{p.rule}]" for p in problems)
        raise StrategyError(
            f"strategy {strategy.to_spec()} cannot be built: {reasons}", field="strategy", fix=problems[0].fix
        )
    g = GraphBuffer(cluster)
    prefill_layout = RankLayout.of(strategy.prefill)
    # On two GPU types the decode worker starts on a node of its own type (KV-5).
    decode_layout = RankLayout.of(
        strategy.decode, offset=strategy.decode_offset(cluster.gpus_per_node, apart=cluster.mixed)
    )

    prefill_start = _boundary(g, "prefill/start", "prefill start", "prefill", "step_start", prefill_layout)
    prefill = PhaseBuilder(g, model, "prefill", strategy.prefill, prefill_layout, workload)
    emit_phase(prefill, prefill_start)
    prefill_end = _boundary(
        g, "prefill/end", "prefill end", "prefill", "step_end", prefill_layout, stage=strategy.prefill.pp - 1
    )
    _close(g, prefill, prefill_end)

    decode_start = _boundary(g, "decode/step_t", "decode step t", "decode", "step_start", decode_layout)
    if strategy.disaggregated:
        _kv_handoff(g, model, strategy, workload, prefill_layout, decode_layout, prefill_end, decode_start)
    else:
        g.edge(prefill_end, decode_start, "sync")
    decode = PhaseBuilder(g, model, "decode", strategy.decode, decode_layout, workload)
    emit_phase(decode, decode_start)
    if workload.speculation is not None:
        # The verify pass above, then the drafter's passes that propose step t+1's drafts (SPEC-1).
        decode.ends += emit_drafts(g, drafter_for(model, workload.speculation), decode, workload)
    # Step t+1 waits for every sampler and every KV-cache write of step t (DEC-1, DEC-5).
    next_step = _boundary(
        g,
        "decode/step_t+1",
        "decode step t+1",
        "decode",
        "step_end",
        decode_layout,
        stage=strategy.decode.pp - 1,
        step=1,
    )
    _close(g, decode, next_step)

    meta = DAGMeta(
        model=model,
        gpu=cluster.gpu.name,
        decode_gpu=cluster.decode_pool.gpu.name if cluster.decode_pool is not None else None,
        gpus=cluster.world_size,
        gpus_per_node=cluster.gpus_per_node,
        cluster=cluster,
        strategy=strategy,
        workload=workload,
        stage_layers={"prefill": prefill.stages, "decode": decode.stages},
        rank_pools={"prefill": prefill_layout.replica_ranks(), "decode": decode_layout.replica_ranks()},
    )
    return DAG.model_construct(schema_version="1", meta=meta, nodes=g.nodes, edges=g.edges)


def _boundary(
    g: GraphBuffer,
    node_id: str,
    name: str,
    phase: str,
    boundary: str,
    layout: RankLayout,
    *,
    stage: int = 0,
    step: int = 0,
) -> str:
    """A step boundary spanning the replica's ranks."""
    return g.state(
        id=node_id,
        name=name,
        kind="step_boundary",
        phase=phase,
        boundary=boundary,
        stage=stage,
        step=step,
        ranks=layout.replica_ranks(),
    )


def _close(g: GraphBuffer, phase: PhaseBuilder, boundary: str) -> None:
    """Make ``boundary`` wait for the phase's KV writes (state edges) and samplers (sync edges)."""
    g.edges_from([n for n in phase.ends if g.kind_of(n) == "kv_write"], boundary, "state")
    g.edges_from([n for n in phase.ends if g.kind_of(n) != "kv_write"], boundary, "sync")


def _kv_handoff(
    g: GraphBuffer,
    model: ModelSpec,
    strategy: Strategy,
    workload: Workload,
    prefill: RankLayout,
    decode: RankLayout,
    prefill_end: str,
    decode_start: str,
) -> None:
    """Disaggregated serving: each decode stage receives the KV cache of its layers from the prefill pool (KV-2)."""
    per_token_layer = kv_width(model) * DTYPE_BYTES[model.kv_dtype]
    prefill_stages = split_layers(model.num_layers, strategy.prefill.pp, strategy.prefill.layer_split)
    # One prefill's prompts move to the decode pool at a time.
    batch_per_replica = math.ceil(workload.prefill_sequences / strategy.decode.dp)
    for stage, layers in enumerate(split_layers(model.num_layers, strategy.decode.pp, strategy.decode.layer_split)):
        sources = sorted(
            {r for s, held in enumerate(prefill_stages) if set(held) & set(layers) for r in prefill.stage_ranks(s)}
        )
        dst = decode.stage_ranks(stage)
        # Only the KV the decode worker lacks moves: its prefix cache holds a cached prefix (as vLLM's NIXL
        # connector asks for the prompt less the tokens its own cache computed).
        size = batch_per_replica * workload.prefill_tokens * per_token_layer * len(layers) / len(dst)
        node = g.comm(
            id=f"handoff/kv_transfer/stage{stage}",
            name="kv_transfer",
            kind="kv_transfer",
            purpose="kv_transfer",
            phase="handoff",
            stage=stage,
            ranks=sources,
            peers=dst,
            message_bytes=size,
            dtype=model.kv_dtype,
        )
        g.edge(prefill_end, node, "state")
        g.edge(node, decode_start, "state")


def representative_layers(model: ModelSpec, stage_layers: list[list[int]]) -> dict[int, int]:
    """One layer per (stage, FFN kind, attention kind), mapped to how many layers of its stage it stands for."""
    picks: dict[int, int] = {}
    for layers in stage_layers:
        first_of: dict[tuple[bool, str], int] = {}
        for layer in layers:
            key = (model.is_moe_layer(layer), model.layer_types[layer])
            if key not in first_of:
                first_of[key] = layer
                picks[layer] = 0
            picks[first_of[key]] += 1
    return picks


def build_phase_sample(
    model: ModelSpec, cluster: Cluster, phase_name: str, phase: PhaseStrategy, workload: Workload,
    qkv_input: int | None = None,
) -> tuple[GraphBuffer, dict[int, int], list[list[int]]]:
    """One microbatch of one phase with only representative layers, for the search's fast estimate.

    ``qkv_input``: the width the QKV projections read when it is not the residual stream's (an EAGLE-3 head's
    layer, priced as a network of its own by the serving model). Returns the graph, the representative layers with
    their multiplicities, and the stage split.
    """
    g = GraphBuffer(cluster)
    layout = RankLayout.of(phase)
    start = _boundary(g, f"{phase_name}/sample_start", "start", phase_name, "step_start", layout)
    builder = PhaseBuilder(g, model, phase_name, phase, layout, workload)
    builder.qkv_input = qkv_input or builder.qkv_input
    picks = representative_layers(model, builder.stages)
    emit_phase(builder, start, microbatches=1, only_layers=set(picks))
    return g, picks, builder.stages
