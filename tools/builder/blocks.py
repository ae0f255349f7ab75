"""The blocks of one transformer layer: attention, a dense FFN, or a mixture-of-experts FFN.

Each is a plain function over a :class:`~shardplan.tools.builder.phase.PhaseBuilder` and writes the nodes
and edges the knowledge prescribes (docs 02, 04, 05, 10, 12): the explicit reduction after every
row-parallel projection (TP-2) before the residual add and the norm read it (TP-4), K/V gathered before
attention under SP (SP-2), explicit KV-cache reads and writes in decode (DEC-2, KV-1), and MoE as route,
dispatch, expert compute per expert rank, combine (EP-1).
"""

from __future__ import annotations

from shardplan.contracts.arithmetic.model_math import kv_width
from shardplan.contracts.common import DTYPE_BYTES
from shardplan.tools.builder import ops
from shardplan.tools.builder.phase import PhaseBuilder, Site, Unit

__all__ = ["attention_block", "dense_ffn", "moe_ffn"]


def _kv_bytes_per_token(b: PhaseBuilder) -> float:
    """KV-cache bytes one token adds to one layer on one rank (MLA latents are not split by TP)."""
    m = b.m
    width = kv_width(m) * DTYPE_BYTES[m.kv_dtype]
    if m.mla is not None:
        return width
    return width * max(1, m.num_kv_heads // b.s.tp) / m.num_kv_heads


def attention_block(b: PhaseBuilder, site: Site, inputs: dict[Unit, str]) -> dict[Unit, tuple[str, str]]:
    """Attention of one layer in every unit; returns each unit's (residual add, post-attention norm)."""
    m, s = b.m, b.s
    kv_rank_bytes = _kv_bytes_per_token(b)
    qkv: dict[Unit, str] = {}
    for unit in b.units():
        here = site.at(unit)
        norm = b.norm(here, "input_norm", inputs[unit])
        gathered = b.sp_regather(here, norm, "input_norm.all_gather")
        qkv[unit] = b.compute(
            here,
            "qkv_proj",
            "linear",
            ops.qkv_projection(m, b.unit_tokens, s.tp, b.qkv_input),
            parallel="column",
            dtype=m.weight_format("attention"),
            src=gathered,
        )
    # Under SP every shard needs the K/V of the whole prompt: one explicit all-gather per attention group.
    kv_gather: dict[int, str] = {}
    if s.sp > 1:
        for group in range(s.adp):
            node_id = b.layer_id(site, "kv.all_gather") + (f"/g{group}" if s.adp > 1 else "")
            node = b.stage_comm(
                site,
                "kv.all_gather",
                "all_gather",
                "sp_kv_gather",
                b.seqs * b.w.isl * kv_rank_bytes,
                ranks=b.lay.sp_group_ranks(site.stage, group),
                dtype=m.kv_dtype,
                node_id=node_id,
            )
            b.g.edges_from([qkv[(group, k)] for k in range(s.sp)], node)
            kv_gather[group] = node
    outs: dict[Unit, tuple[str, str]] = {}
    for unit in b.units():
        here, (g, k) = site.at(unit), unit
        kv_state = (
            f"{b.kv_prefix}kv/L{site.layer}/mb{site.mb}"
            + (f"/g{g}" if s.adp > 1 else "")
            + (f"/s{k}" if s.sp > 1 else "")
        )
        write = b.g.state(
            id=b.node_id(here, "kv_write"),
            name="kv_write",
            kind="kv_write",
            kv_state=kv_state,
            tokens=b.q_len,
            bytes=b.seqs * b.q_len * kv_rank_bytes,
            ranks=b.unit_ranks(here),
            **b.placement(here),
        )
        b.g.edge(qkv[unit], write, "state")
        b.ends.append(write)
        attn_work = ops.attention(m, site.layer or 0, b.seqs, b.q_len, b.kv_len, s.tp, prefill=b.prefill,
                                  cached=b.cached)
        # Nodes are written in dependency order (the cache read before the attention that uses it), so
        # the list itself is a topological order and validation need not sort the graph.
        read = None
        if not b.prefill:
            kv_len = attn_work.shape["kv_len"]
            read = b.g.state(
                id=b.node_id(here, "kv_read"),
                name="kv_read",
                kind="kv_read",
                kv_state=kv_state,
                tokens=kv_len,
                bytes=b.seqs * kv_len * kv_rank_bytes,
                ranks=b.unit_ranks(here),
                **b.placement(here),
            )
            b.g.edge(b.boundary_in, read, "sync")
        attn = b.compute(here, "attention", "attention", attn_work, parallel="column", dtype=m.attention_dtype,
                         src=qkv[unit])
        if s.sp > 1:
            b.g.edge(kv_gather[g], attn)
        if read is not None:
            b.g.edge(read, attn, "state")
            b.g.edge(write, attn, "state")
        v_width = m.mla.v_head_dim if m.mla else m.head_dim
        attention_format = m.weight_format("attention")
        o_work = ops.gemm(b.unit_tokens, m.hidden_size, m.num_attention_heads * v_width // s.tp,
                          DTYPE_BYTES[attention_format], b.ab)
        o_proj = b.compute(
            here, "o_proj", "linear", o_work, parallel="row", partial=s.tp > 1, dtype=attention_format, src=attn
        )
        reduced = b.tp_reduce(here, o_proj, "o_proj", b.unit_tokens)
        add = b.compute(
            here,
            "attn.residual_add",
            "elementwise",
            ops.memory_op(b.shard_tokens(), m.hidden_size, b.ab, reads=2),
            src=reduced,
        )
        b.g.edge(inputs[unit], add)
        outs[unit] = (add, b.norm(here, "post_attn_norm", add))
    return outs


def dense_ffn(b: PhaseBuilder, site: Site, norm: str) -> str:
    """Gate/up (column-parallel), down (row-parallel) and the down projection's reduction."""
    m, tp = b.m, b.s.tp
    gathered = b.sp_regather(site, norm, "post_attn_norm.all_gather")
    width = m.intermediate_size // tp
    dtype = m.weight_format("dense_ffn")
    wb = DTYPE_BYTES[dtype]
    up = b.compute(
        site,
        "gate_up_proj",
        "linear",
        ops.gemm(b.unit_tokens, (2 if m.gated_mlp else 1) * width, m.hidden_size, wb, b.ab),
        parallel="column",
        dtype=dtype,
        src=gathered,
    )
    down = b.compute(
        site,
        "down_proj",
        "linear",
        ops.gemm(b.unit_tokens, m.hidden_size, width, wb, b.ab),
        parallel="row",
        partial=tp > 1,
        dtype=dtype,
        src=up,
    )
    return b.tp_reduce(site, down, "down_proj", b.unit_tokens)


def moe_ffn(b: PhaseBuilder, site: Site, norms: dict[Unit, str]) -> dict[Unit, list[str]]:
    """Router, dispatch, expert compute per expert rank, shared experts, combine (EP-1).

    Returns, per unit, the nodes whose outputs the FFN residual add sums.
    """
    m, s = b.m, b.s
    moe = m.moe
    assert moe is not None
    h, tp, ep, etp = m.hidden_size, s.tp, s.ep, s.stage_gpus // s.ep
    stage_tokens = b.unit_tokens * s.adp * s.sp
    multi_unit = s.adp * s.sp > 1
    stage_ranks = b.lay.stage_ranks(site.stage)
    routers: dict[Unit, str] = {}
    # The router GEMM is timed in the activations' format unless the request states the router's own (engines
    # run it in bf16: TensorRT-LLM's DeepSeek-R1 "RouterGEMM" takes bf16 weights and inputs).
    router_dtype = m.weight_formats.get("router")
    for unit in b.units():
        gathered = b.sp_regather(site.at(unit), norms[unit], "post_attn_norm.all_gather")
        work = ops.gemm(b.unit_tokens, moe.num_experts, h, DTYPE_BYTES[m.weight_format("router")], b.ab)
        routers[unit] = b.compute(site.at(unit), "router", "router", work, dtype=router_dtype, src=gathered)
    # Each TP rank of a unit dispatches its 1/tp share of the unit's tokens, top-k copies each. Engines serving
    # FP8 experts dispatch FP8 activations (DeepEP) and combine in the activation format.
    per_rank_routed = b.unit_tokens / tp * moe.experts_per_token * h * b.ab
    fp8_dispatch = m.weight_format("experts") == "fp8"
    if ep > 1:
        dispatched = per_rank_routed * (DTYPE_BYTES["fp8"] / b.ab if fp8_dispatch else 1.0)
        entry = b.stage_comm(
            site,
            "moe.dispatch",
            "all_to_all",
            "ep_dispatch",
            dispatched,
            ranks=stage_ranks,
            dtype="fp8" if fp8_dispatch else None,
        )
    elif multi_unit:  # experts split over every unit's ranks: gather all tokens first
        entry = b.stage_comm(
            site, "moe.all_gather", "all_gather", "adp_gather", stage_tokens * h * b.ab, ranks=stage_ranks
        )
    else:
        entry = ""
    if entry:
        b.g.edges_from(list(routers.values()), entry)
    local_experts = moe.num_experts // ep
    routed_pairs = stage_tokens * moe.experts_per_token / ep
    expert_outs = []
    for rank_group in range(ep):
        work = ops.expert_ffn(m, stage_tokens, local_experts, ep, etp)
        ranks = b.lay.expert_ranks(site.stage, rank_group)
        suffix = f"/e{rank_group}" if ep > 1 else ""
        shard = rank_group if ep > 1 else None
        node = b.g.compute(
            id=b.layer_id(site, "experts") + suffix,
            name="experts",
            kind="expert",
            op="routed_experts",
            parallel="expert" if ep > 1 else "column",
            partial=etp > 1,
            ranks=ranks,
            dtype=m.weight_format("experts"),
            shape=work.shape,
            flops=work.flops,
            bytes_read=work.bytes_read,
            bytes_written=work.bytes_written,
            **{**b.placement(site, per_unit=False), "shard": shard},
        )
        if entry:
            b.g.edge(entry, node)
        else:
            b.g.edges_from(list(routers.values()), node)
        out = node
        if etp > 1 and (ep > 1 or not multi_unit):
            out = b.stage_comm(
                site,
                "experts.all_reduce",
                "all_reduce",
                "tp_reduce",
                # Without EP the fused MoE kernel sums each token's top-k expert outputs before the
                # reduction, so the all-reduce carries the layer's output, not its routed copies.
                (routed_pairs if ep > 1 else stage_tokens) * h * b.ab,
                ranks=ranks,
                shard=shard,
                node_id=b.layer_id(site, "experts.all_reduce") + suffix,
            )
            b.g.edge(node, out)
        expert_outs.append(out)
    if ep > 1:
        exit_node = b.stage_comm(site, "moe.combine", "all_to_all", "ep_combine", per_rank_routed, ranks=stage_ranks)
    elif multi_unit:
        exit_node = b.stage_comm(
            site, "moe.reduce_scatter", "reduce_scatter", "adp_scatter", stage_tokens * h * b.ab, ranks=stage_ranks
        )
    else:
        exit_node = ""
    if exit_node:
        b.g.edges_from(expert_outs, exit_node)
    outs: dict[Unit, list[str]] = {}
    for unit in b.units():
        parts = [exit_node] if exit_node else list(expert_outs)
        if moe.num_shared_experts:
            here = site.at(unit)
            width = moe.num_shared_experts * moe.shared_expert_intermediate_size // tp
            shared_format = m.weight_format("shared_experts")
            shared = b.compute(
                here,
                "shared_experts",
                "expert",
                ops.gemm(b.unit_tokens, 3 * width, h, DTYPE_BYTES[shared_format], b.ab),
                parallel="column",
                partial=tp > 1,
                dtype=shared_format,
            )
            b.g.edge(routers[unit], shared, "sync")
            regathered = s.sp > 1 and tp > 1
            b.g.edge(b.node_id(here, "post_attn_norm.all_gather") if regathered else norms[unit], shared)
            parts.append(b.tp_reduce(here, shared, "shared_experts", b.unit_tokens, purpose="shared_expert_reduce"))
        outs[unit] = parts
    return outs
