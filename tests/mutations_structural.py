"""Mutation operators for the structural checks: layer-to-layer data flow, facts derived from the graph
instead of labels (KV-cache ownership, MoE under SP and links are in :mod:`mutations_kv_links`).

Each operator is written from a sentence of the seeds (shared/seeds/) and registers, through
:func:`mutation_registry.mutation`, the rule it breaks. :mod:`mutations` imports this module,
so the operators join :data:`mutation_registry.MUTATIONS`.
"""

from __future__ import annotations

from mutation_registry import (
    AnyNode,
    _by_id,
    _dag,
    _data_preds,
    _data_succs,
    _find,
    _is,
    _op,
    _remove,
    _update,
    mutation,
)

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, Edge, StateNode

__all__: list[str] = []


def _sibling(dag: DAG, node: AnyNode, op: str) -> AnyNode | None:
    """The node of operation ``op`` in the same phase, microbatch, layer and unit (same ranks) as ``node``."""
    return _find(
        dag,
        lambda n: _op(n) == op
        and n.phase == node.phase
        and n.microbatch == node.microbatch
        and n.layer == node.layer
        and n.ranks == node.ranks,
    )


def _redirect(dag: DAG, old_src: str, new_src: str, dst: str) -> DAG:
    """``dag`` with the data edge ``old_src -> dst`` replaced by ``new_src -> dst``."""
    edges = [
        Edge(src=new_src, dst=dst, kind="data") if e.src == old_src and e.dst == dst and e.kind == "data" else e
        for e in dag.edges
    ]
    return _dag(dag, edges=edges)


def _layer_has_collective(dag: DAG, node: AnyNode) -> bool:
    return any(
        isinstance(n, CommNode)
        and n.kind in ("all_reduce", "reduce_scatter", "all_to_all", "all_gather")
        and (n.phase, n.microbatch, n.layer) == (node.phase, node.microbatch, node.layer)
        for n in dag.nodes
    )


# -- layer to layer (FLOW-1, FLOW-2; seed 001 "Option 1", seed 003 "Layer Dependency") ------------------
def _skip_ffn(dag: DAG, phase: str) -> DAG | None:
    """Feed a next layer's input norm from the attention residual add, skipping the FFN and its reduction."""
    for norm in dag.nodes:
        if _op(norm) != "input_norm" or norm.phase != phase or not norm.layer:
            continue
        for src in _data_preds(dag, norm.id):
            ffn_out = _by_id(dag)[src]
            if _op(ffn_out) != "ffn.residual_add" or not _layer_has_collective(dag, ffn_out):
                continue
            attn_out = _sibling(dag, ffn_out, "attn.residual_add")
            if attn_out is not None:
                return _redirect(dag, src, attn_out.id, norm.id)
    return None


@mutation("FLOW-1", "a layer with a collective, followed by another layer on the same stage")
def next_layer_skips_ffn_decode(dag: DAG) -> DAG | None:
    """Decode: layer l+1's QKV reads layer l's attention residual, before the FFN all-reduce (seed 001)."""
    return _skip_ffn(dag, "decode")


@mutation("FLOW-1", "a layer with a collective, followed by another layer on the same stage")
def next_layer_skips_ffn_prefill(dag: DAG) -> DAG | None:
    """Prefill: the same shortcut around the FFN and its reduction."""
    return _skip_ffn(dag, "prefill")


@mutation("FLOW-1", "pp > 1")
def send_before_ffn(dag: DAG) -> DAG | None:
    """Send the attention residual to the next stage instead of the layer's output."""
    send = _find(dag, lambda n: n.kind == "send")
    if send is None:
        return None
    for src in _data_preds(dag, send.id):
        ffn_out = _by_id(dag)[src]
        attn_out = _sibling(dag, ffn_out, "attn.residual_add")
        if _op(ffn_out) == "ffn.residual_add" and attn_out is not None and _layer_has_collective(dag, ffn_out):
            return _redirect(dag, src, attn_out.id, send.id)
    return None


@mutation("FLOW-2", "two layers on one stage after the first")
def skip_a_layer(dag: DAG) -> DAG | None:
    """Prefill: layer l+1 reads layer l-1's output, so layer l's output is left unused."""
    nodes = _by_id(dag)
    for norm in dag.nodes:
        if _op(norm) != "input_norm" or norm.phase != "prefill" or not norm.layer or norm.layer < 2:
            continue
        for src in _data_preds(dag, norm.id):
            out = nodes[src]
            if _op(out) != "ffn.residual_add":
                continue
            before = _find(
                dag,
                lambda n, out=out: _op(n) == "ffn.residual_add"  # type: ignore[misc]
                and n.phase == out.phase
                and n.microbatch == out.microbatch
                and n.layer == (out.layer or 0) - 1
                and n.ranks == out.ranks,
            )
            if before is None:
                continue
            readers = [d for d in _data_succs(dag, out.id) if nodes[d].layer == norm.layer]
            mutant = dag
            for reader in readers:
                mutant = _redirect(mutant, out.id, before.id, reader)
            return mutant
    return None


@mutation("FLOW-2")
def head_reads_early_layer(dag: DAG) -> DAG | None:
    """Decode: the final norm reads the second-to-last layer, leaving the last layer's output unused."""
    nodes = _by_id(dag)
    final = _find(dag, lambda n: _op(n) == "final_norm" and n.phase == "decode")
    if final is None:
        return None
    for src in _data_preds(dag, final.id):
        out = nodes[src]
        earlier = [
            n for n in dag.nodes
            if _op(n) in ("ffn.residual_add", "pp.recv") and n.phase == "decode" and n.microbatch == out.microbatch
            and n.layer is not None and out.layer is not None and n.layer < out.layer and set(n.ranks) == set(out.ranks)
        ]
        if earlier:
            return _redirect(dag, src, earlier[-1].id, final.id)
    return None


# -- labels the graph contradicts (TP-2, DAG-6, SP-1, EP-4) -----------------------------------------
def _hide_reduction(dag: DAG, op: str, parallel: str) -> DAG | None:
    node = _find(dag, lambda n: _op(n) == op and getattr(n, "partial", False))
    if node is None:
        return None
    reductions = {s for s in _data_succs(dag, node.id) if _by_id(dag)[s].kind in ("all_reduce", "reduce_scatter")}
    removed = _remove(dag, reductions, rewire=True)
    return _update(removed, node.id, parallel=parallel, partial=False)


@mutation("TP-2", "tp > 1")
def row_relabelled_column(dag: DAG) -> DAG | None:
    """Drop o_proj's all-reduce and relabel o_proj column-parallel and whole (seed 001: row parallel)."""
    return _hide_reduction(dag, "o_proj", "column")


@mutation("TP-2", "tp > 1")
def down_proj_relabelled_replicated(dag: DAG) -> DAG | None:
    """Drop down_proj's reduction and relabel it replicated."""
    return _hide_reduction(dag, "down_proj", "replicated")


def _disguise_attention(dag: DAG, phase: str) -> DAG | None:
    attention = _find(dag, lambda n: _is(n, "attention", phase))
    if attention is None:
        return None
    return _update(dag, attention.id, kind="linear", op="qkv_proj", parallel="column")


@mutation("DAG-6")
def decode_attention_as_linear(dag: DAG) -> DAG | None:
    """Relabel a decode attention as a linear, which would switch the KV-cache rules off."""
    return _disguise_attention(dag, "decode")


@mutation("DAG-6")
def prefill_attention_as_linear(dag: DAG) -> DAG | None:
    """Relabel a prefill attention as a linear."""
    return _disguise_attention(dag, "prefill")


@mutation("DAG-6", "MoE model")
def router_category_compute(dag: DAG) -> DAG | None:
    """Call routing compute (seed 002 classes it as control/state)."""
    router = _find(dag, lambda n: n.kind == "router")
    return None if router is None else _update(dag, router.id, category="compute")


@mutation("SP-1")
def decode_cache_split_by_sequence(dag: DAG) -> DAG | None:
    """Each decode attention reads half the cached positions; no node says 'sequence' (seed 004: no SP in decode)."""
    read = _find(dag, lambda n: _is(n, "kv_read", "decode"))
    if not isinstance(read, StateNode):
        return None
    attention = [s for s in dag.edges if s.src == read.id and s.kind == "state"]
    mutant = _update(dag, read.id, tokens=read.tokens // 2)
    for edge in attention:
        node = _by_id(mutant)[edge.dst]
        if isinstance(node, ComputeNode):
            mutant = _update(mutant, node.id, shape={**node.shape, "kv_len": read.tokens // 2})
    return mutant


@mutation("EP-4", "MoE model")
def router_scores_half_the_experts(dag: DAG) -> DAG | None:
    """A router labelled replicated whose output covers half the experts (seed 002: routing stays non-TP)."""
    router = _find(dag, lambda n: n.kind == "router")
    if not isinstance(router, ComputeNode) or "n" not in router.shape:
        return None
    return _update(dag, router.id, shape={**router.shape, "n": router.shape["n"] // 2})
