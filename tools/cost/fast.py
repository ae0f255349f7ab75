"""Closed-form phase latency for the search: schedule a sample and scale it.

The sample is one microbatch of the phase with one representative layer per layer kind and stage
(built by the real builder, priced by the real scheduler), so the fast figure and the full schedule
share every formula. Each representative layer's span is multiplied by the layers it stands for;
microbatches add ``(mb - 1)`` times the slowest stage, the pipeline fill of a GPipe-style schedule.

The attention kernels' share is reported beside the makespan (:class:`PhaseTimes`), so the serving model
can price a step's token-proportional work and its context-proportional work apart; so is the MoE layers'
synchronised section, the part of a step that attention data-parallel ranks run together on all their tokens.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.dag import ComputeNode
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder import ops
from shardplan.tools.builder.build import build_phase_sample
from shardplan.tools.builder.graph import GraphBuffer
from shardplan.tools.cost.pricing import Backend, make_pricer
from shardplan.tools.cost.schedule import Schedule, schedule_graph

__all__ = ["PhaseTimes", "phase_times", "gemm_time_s"]


@dataclass(frozen=True)
class PhaseTimes:
    """A phase's makespan and the part of it its attention kernels take."""

    total_s: float
    attention_s: float
    """Sum over layers of the layer's slowest attention kernel (attention groups run side by side), for one
    microbatch: attention sits between the QKV and output projections, on the critical path."""
    moe_s: float = 0.0
    """Sum over layers of the MoE section that spans every attention group of a stage (dispatch or gather, the
    routed experts and their reduction, combine or scatter), first start to last finish, for one microbatch.
    Attention data-parallel ranks meet there: each attends to its own tokens, then all of them wait for the
    dispatch and the experts run on every rank's tokens together."""


def phase_times(
    model: ModelSpec,
    cluster: Cluster,
    phase_name: str,
    phase: PhaseStrategy,
    workload: Workload,
    backend: Backend = "auto",
    qkv_input: int | None = None,
) -> PhaseTimes:
    """Estimated makespan in seconds of one prefill, or one decode step, under ``phase`` (priced by the
    workload's engine tables, or by the roofline alone with ``backend="roofline"``), with its attention share.
    ``qkv_input``: the QKV projections' input width where it is not ``hidden_size`` (an EAGLE-3 head's layer)."""
    graph, picks, stages = build_phase_sample(model, cluster, phase_name, phase, workload, qkv_input)
    pricer = make_pricer(cluster, model, {phase_name: phase}, workload.engine, backend)
    pricer.prepare(graph.nodes)
    sched = schedule_graph(graph.nodes, graph.edges, cluster, record_busy=False, pricer=pricer)
    layer_end: dict[int, float] = defaultdict(float)
    attention: dict[int, float] = defaultdict(float)
    moe_start: dict[int, float] = {}
    moe_end: dict[int, float] = defaultdict(float)
    for node in graph.nodes:
        if node.layer is not None and node.layer in picks:
            layer_end[node.layer] = max(layer_end[node.layer], sched.finish[node.id])
            if node.kind == "attention":
                took = sched.finish[node.id] - sched.start[node.id]
                attention[node.layer] = max(attention[node.layer], took)
            elif node.name in _MOE_SECTION:
                moe_start[node.layer] = min(moe_start.get(node.layer, sched.start[node.id]), sched.start[node.id])
                moe_end[node.layer] = max(moe_end[node.layer], sched.finish[node.id])
    makespan = max(sched.finish.values())
    stage_of = {layer: index for index, layers in enumerate(stages) for layer in layers}
    previous = _embedding_done(graph, sched)
    stage_time: dict[int, float] = defaultdict(float)
    extra = 0.0
    for layer in sorted(picks):
        span = max(layer_end[layer] - previous, 0.0)
        previous = layer_end[layer]
        extra += (picks[layer] - 1) * span
        stage_time[stage_of[layer]] += picks[layer] * span
    one_microbatch = makespan + extra
    total = one_microbatch + (phase.mb - 1) * max(stage_time.values(), default=0.0)
    moe = sum(picks[layer] * (moe_end[layer] - start) for layer, start in moe_start.items())
    return PhaseTimes(total, sum(picks[layer] * took for layer, took in attention.items()), moe)


_MOE_SECTION = frozenset(
    {"moe.dispatch", "moe.all_gather", "experts", "experts.all_reduce", "moe.combine", "moe.reduce_scatter"}
)
"""Names of the nodes of an MoE layer that work on the tokens of every attention group of the stage
(:func:`shardplan.tools.builder.blocks.moe_ffn`); the router and the shared experts work on each group's own."""


def _embedding_done(graph: GraphBuffer, sched: Schedule) -> float:
    """When the sample's token embedding is complete: its lookups, and the all-reduce that completes a
    vocabulary-parallel lookup (a node the lookup feeds that is still outside the layers)."""
    lookups = {n.id for n in graph.nodes if n.kind == "embedding"}
    completing = {e.dst for e in graph.edges if e.src in lookups and e.kind == "data"}
    return max(
        (sched.finish[n.id] for n in graph.nodes if n.id in lookups or (n.id in completing and n.layer is None)),
        default=0.0,
    )


def gemm_time_s(
    model: ModelSpec,
    cluster: Cluster,
    phase: PhaseStrategy,
    tokens: int,
    out_width: int,
    in_width: int,
    workload: Workload,
    backend: Backend = "auto",
) -> float:
    """Seconds of one decode GEMM of ``tokens`` rows through an ``in_width x out_width`` weight held whole on each
    rank (a replicated projection, such as the drafters' fusing projection), priced as the DAG's linear nodes
    are: the measured GEMM table of the workload's engine where it covers the shape, the roofline otherwise."""
    work = ops.gemm(max(1, tokens), out_width, in_width, DTYPE_BYTES[model.weight_dtype],
                    DTYPE_BYTES[model.activation_dtype])
    node = ComputeNode(
        id="decode/gemm", name="gemm", kind="linear", op="fuse_proj", phase="decode", ranks=[0],
        dtype=model.weight_dtype, shape=work.shape, flops=work.flops, bytes_read=work.bytes_read,
        bytes_written=work.bytes_written,
    )
    pricer = make_pricer(cluster, model, {"decode": phase}, workload.engine, backend)
    pricer.prepare([node])
    return pricer.node_time_s(node)
