"""One phase walked from embedding to sampler: each layer assembled from the blocks (attention, then a dense or
MoE feed-forward, then the residual add), pipeline hops between stages, the head on the last stage."""

from __future__ import annotations

from shardplan.tools.builder import ops
from shardplan.tools.builder.blocks import attention_block, dense_ffn, moe_ffn
from shardplan.tools.builder.phase import PhaseBuilder, Site, Unit

__all__ = ["emit_layer", "emit_phase"]


def emit_layer(b: PhaseBuilder, mb: int, layer: int, stage: int, inputs: dict[Unit, str]) -> dict[Unit, str]:
    """One transformer layer of microbatch ``mb`` on ``stage``: its output per unit (the residual add)."""
    site = Site(mb, layer, stage)
    attn = attention_block(b, site, inputs)
    ffn_parts: dict[Unit, list[str]]
    if b.m.is_moe_layer(layer):
        ffn_parts = moe_ffn(b, site, {u: attn[u][1] for u in b.units()})
    else:
        ffn_parts = {u: [dense_ffn(b, site.at(u), attn[u][1])] for u in b.units()}
    outs = {}
    for unit in b.units():
        work = ops.memory_op(b.shard_tokens(), b.m.hidden_size, b.ab, reads=1 + len(ffn_parts[unit]))
        add = b.compute(site.at(unit), "ffn.residual_add", "elementwise", work)
        b.g.edges_from(ffn_parts[unit], add)
        b.g.edge(attn[unit][0], add)
        outs[unit] = add
    return outs


def emit_phase(
    b: PhaseBuilder, boundary_in: str, *, microbatches: int | None = None, only_layers: set[int] | None = None
) -> None:
    """Emit the phase after ``boundary_in``. ``microbatches`` and ``only_layers`` restrict it to a sample, for fast
    estimates."""
    b.boundary_in = boundary_in
    for mb in range(b.s.mb if microbatches is None else microbatches):
        current = b.embedding(mb)
        for stage, layers in enumerate(b.stages):
            for layer in layers:
                if only_layers is None or layer in only_layers:
                    current = emit_layer(b, mb, layer, stage, current)
            if stage + 1 < len(b.stages):
                current = b.pipeline_hop(mb, layers[-1], stage, current)
        b.head(mb, current)
