"""Mutation operators for KV-cache commit and ownership, MoE under SP and attention DP, what crosses a link,
and one long prompt on shared GPUs.

Each operator is written from a sentence of the seeds (shared/seeds/) and registers, through
:func:`mutation_registry.mutation`, the rule it breaks; :mod:`mutations` imports this module so the operators
join :data:`mutation_registry.MUTATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable

from mutation_registry import (
    AnyNode,
    _add_edges,
    _by_id,
    _dag,
    _data_preds,
    _data_succs,
    _drop_edge,
    _drop_edges,
    _find,
    _is,
    _op,
    _update,
    mutation,
)

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, Edge, StateNode

__all__: list[str] = []


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
