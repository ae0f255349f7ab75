"""Mutation operators for the structural checks: layer-to-layer data flow, facts derived from the graph
instead of labels, KV-cache commit and ownership, MoE under SP, and what crosses a link.

Each operator is written from a sentence of the seeds (shared/seeds/) and registers, through
:func:`mutations.mutation`, the rule it breaks. ``mutations`` imports this module once its helpers exist,
so the operators join :data:`mutations.MUTATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable

from mutations import (
    AnyNode,
    _add_edges,
    _dag,
    _data_preds,
    _data_succs,
    _drop_edges,
    _find,
    _is,
    _remove,
    _update,
    mutation,
)

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, Edge, StateNode

__all__: list[str] = []


def _op(node: AnyNode) -> str | None:
    return getattr(node, "op", None)


def _by_id(dag: DAG) -> dict[str, AnyNode]:
    return {n.id: n for n in dag.nodes}


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


def _drop_edge(dag: DAG, src: str, dst: str) -> DAG:
    """``dag`` without the edges from ``src`` to ``dst``."""
    return _drop_edges(dag, lambda e: e.src == src and e.dst == dst)


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


# -- KV cache commit and ownership (KV-3, KV-4, DEC-5; seeds 003 and 004) ---------------------------
@mutation("KV-3")
def prefill_write_uncommitted(dag: DAG) -> DAG | None:
    """Decode may start before one prefill KV write completed."""
    write = _find(dag, lambda n: _is(n, "kv_write", "prefill"))
    if write is None:
        return None
    return _drop_edges(dag, lambda e: e.src == write.id and e.kind == "state")


@mutation("KV-3", "disaggregated serving")
def transfer_before_prefill_ends(dag: DAG) -> DAG | None:
    """Move the KV cache to the decode pool as soon as prefill starts."""
    transfers = {n.id for n in dag.nodes if n.kind == "kv_transfer"}
    start = _find(dag, lambda n: _is(n, "step_boundary", "prefill") and getattr(n, "boundary", None) == "step_start")
    if not transfers or start is None:
        return None
    edges = [Edge(src=start.id, dst=e.dst, kind=e.kind) if e.dst in transfers else e for e in dag.edges]
    return _dag(dag, edges=edges)


@mutation("DEC-5")
def attend_before_write(dag: DAG) -> DAG | None:
    """Decode attention runs before the new token's K/V is stored (the order the old doc 11 drew)."""
    write = _find(dag, lambda n: _is(n, "kv_write", "decode"))
    if write is None:
        return None
    nodes = _by_id(dag)
    targets = [
        e.dst for e in dag.edges if e.src == write.id and e.kind == "state" and nodes[e.dst].kind == "attention"
    ]
    if not targets:
        return None
    mutant = _drop_edges(dag, lambda e: e.src == write.id and e.dst in targets)
    return _add_edges(mutant, *[(t, write.id, "state") for t in targets])


def _share_cache(dag: DAG, phase: str) -> DAG | None:
    writes = [n for n in dag.nodes if _is(n, "kv_write", phase) and isinstance(n, StateNode)]
    for a in writes:
        for b in writes:
            if a.layer == b.layer and a.microbatch == b.microbatch and set(a.ranks).isdisjoint(b.ranks):
                reads = {
                    n.id for n in dag.nodes if _is(n, "kv_read", phase) and getattr(n, "kv_state", None) == b.kv_state
                }
                mutant = _update(dag, b.id, kv_state=a.kv_state)
                for read in reads:
                    mutant = _update(mutant, read, kv_state=a.kv_state)
                return mutant
    return None


@mutation("KV-4", "adp > 1 in decode")
def groups_share_decode_cache(dag: DAG) -> DAG | None:
    """Two attention-DP groups read and write one cache (seed 004: no sharing across sequences)."""
    return _share_cache(dag, "decode")


@mutation("KV-4", "sp or adp > 1 in prefill")
def shards_share_prefill_cache(dag: DAG) -> DAG | None:
    """Two prefill sequence shards or groups fill the same cache."""
    return _share_cache(dag, "prefill")


@mutation("KV-4")
def write_without_producer(dag: DAG) -> DAG | None:
    """A KV write fed by nothing its layer computed."""
    write = _find(dag, lambda n: _is(n, "kv_write", "decode"))
    if write is None:
        return None
    return _drop_edges(dag, lambda e: e.dst == write.id)


@mutation("KV-4", "adp > 1 in decode")
def read_cache_on_other_group(dag: DAG) -> DAG | None:
    """A decode KV read runs on another attention group's GPUs than its cache's write."""
    reads = [n for n in dag.nodes if _is(n, "kv_read", "decode")]
    for read in reads:
        other = next((r for r in reads if r.layer == read.layer and set(r.ranks).isdisjoint(read.ranks)), None)
        if other is not None:
            return _update(dag, read.id, ranks=list(other.ranks))
    return None


# -- MoE under SP and attention DP (EP-5, SP-2; seed 002 "SP synchronization ... after combine") --------
def _skip_combine(dag: DAG, phase: str) -> DAG | None:
    nodes = _by_id(dag)
    for comm in dag.nodes:
        if comm.phase != phase or getattr(comm, "purpose", None) not in ("ep_combine", "adp_scatter"):
            continue
        adds = [d for d in _data_succs(dag, comm.id) if _op(nodes[d]) == "ffn.residual_add"]
        if len(adds) > 1:
            return _drop_edge(dag, comm.id, adds[-1])
    return None


@mutation("EP-5", "MoE with several units (sp or adp) in prefill")
def combine_skips_prefill_unit(dag: DAG) -> DAG | None:
    """The combine returns no tokens to the last sequence shard."""
    return _skip_combine(dag, "prefill")


@mutation("EP-5", "MoE with several attention groups in decode")
def combine_skips_decode_group(dag: DAG) -> DAG | None:
    """The combine returns no tokens to one decode attention group."""
    return _skip_combine(dag, "decode")


@mutation("SP-2", "prefill sp > 1")
def kv_gather_misses_a_shard(dag: DAG) -> DAG | None:
    """The SP K/V all-gather is fed by all shards but one."""
    gather = _find(dag, lambda n: _is(n, "all_gather", "prefill", "sp_kv_gather"))
    if gather is None:
        return None
    preds = _data_preds(dag, gather.id)
    if len(preds) < 2:
        return None
    return _drop_edges(dag, lambda e: e.src == preds[-1] and e.dst == gather.id)


@mutation("SP-2", "prefill sp > 1")
def attention_sees_own_shard(dag: DAG) -> DAG | None:
    """A prefill attention shard attends over its own tokens only."""
    if dag.meta.strategy.prefill.sp < 2:
        return None
    attention = _find(dag, lambda n: _is(n, "attention", "prefill"))
    if not isinstance(attention, ComputeNode):
        return None
    return _update(dag, attention.id, shape={**attention.shape, "kv_len": attention.shape["q_len"]})


# -- what crosses a link (OVL-3; seed 000 "must respect tensor shapes and device mapping") ---------
def _scale_message(dag: DAG, test: Callable[[AnyNode], bool], factor: float) -> DAG | None:
    node = _find(dag, test)
    if not isinstance(node, CommNode):
        return None
    return _update(dag, node.id, message_bytes=node.message_bytes * factor)


@mutation("OVL-3", "tp > 1")
def all_reduce_half_message(dag: DAG) -> DAG | None:
    """The all-reduce after o_proj carries half the projection's output."""
    return _scale_message(
        dag, lambda n: _is(n, "all_reduce", None, "tp_reduce") and n.id.split("/")[-1].startswith("o_proj"), 0.5
    )


@mutation("OVL-3", "prefill sp > 1 and tp > 1")
def reduce_scatter_double_message(dag: DAG) -> DAG | None:
    """An SP reduce-scatter claims twice the tensor its projection produced."""
    return _scale_message(dag, lambda n: _is(n, "reduce_scatter", "prefill", "sp_reduce_scatter"), 2.0)


@mutation("OVL-3", "ep > 1")
def combine_double_message(dag: DAG) -> DAG | None:
    """The combine brings back twice the copies the dispatch sent."""
    return _scale_message(dag, lambda n: _is(n, "all_to_all", None, "ep_combine"), 2.0)


@mutation("OVL-3", "ep > 1")
def dispatch_in_fp4(dag: DAG) -> DAG | None:
    """The dispatch claims FP4 tokens while the routers and experts use another format."""
    node = _find(dag, lambda n: _is(n, "all_to_all", None, "ep_dispatch"))
    return None if node is None else _update(dag, node.id, dtype="fp4")


@mutation("OVL-3", "prefill sp > 1")
def kv_gather_in_fp32(dag: DAG) -> DAG | None:
    """The SP K/V all-gather moves fp32 although the cache is stored in another format."""
    node = _find(dag, lambda n: _is(n, "all_gather", "prefill", "sp_kv_gather"))
    return None if node is None else _update(dag, node.id, dtype="fp32")


@mutation("OVL-3", "tp > 1")
def residual_reads_double(dag: DAG) -> DAG | None:
    """The residual add after an all-reduce reads a tensor twice the size the all-reduce delivers."""
    nodes = _by_id(dag)
    for comm in dag.nodes:
        if not _is(comm, "all_reduce", None, "tp_reduce"):
            continue
        if not any(nodes[p].kind == "linear" for p in _data_preds(dag, comm.id)):
            continue
        for d in _data_succs(dag, comm.id):
            add = nodes[d]
            if isinstance(add, ComputeNode) and add.kind == "elementwise" and "m" in add.shape:
                return _update(dag, add.id, shape={**add.shape, "m": 2 * add.shape["m"]})
    return None


@mutation("OVL-3", "ep > 1 with several units")
def dispatch_misses_a_unit(dag: DAG) -> DAG | None:
    """The dispatch all-to-all spans the stage but one unit's router does not feed it."""
    nodes = _by_id(dag)
    for comm in dag.nodes:
        if _is(comm, "all_to_all", None, "ep_dispatch"):
            routers = [p for p in _data_preds(dag, comm.id) if nodes[p].kind == "router"]
            if len(routers) > 1:
                return _drop_edge(dag, routers[-1], comm.id)
    return None


# -- one long prompt on shared GPUs (SP-6) ----------------------------------------------------------
@mutation("SP-6", "colocated prefill sp > 1")
def one_long_prompt(dag: DAG) -> DAG | None:
    """Serve a single long prompt with colocated SP: decode's extra attention groups have no sequence."""
    strategy = dag.meta.strategy
    if strategy.disaggregated or strategy.prefill.sp < 2:
        return None
    workload = dag.meta.workload.model_copy(update={"batch": 1})
    return _dag(dag, meta=dag.meta.model_copy(update={"workload": workload}))
