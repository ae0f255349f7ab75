"""Mutation operators for the graph's structure and its phases: cycles, dangling edges, prefill and decode
KV writes and reads, the KV transfer between pools, GPU types per node, and the shape of one decode step.

Each registers, through :func:`mutation_registry.mutation`, the rule it breaks; :mod:`mutations` imports this
module so the operators join :data:`mutation_registry.MUTATIONS`.
"""

from __future__ import annotations

from mutation_registry import (
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

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, StateNode

__all__: list[str] = []


# -- structure -------------------------------------------------------------------------------------
@mutation("DAG-1")
def close_cycle(dag: DAG) -> DAG | None:
    """Feed an attention output back into the projection that produced its input."""
    attention = _find(dag, lambda n: n.kind == "attention")
    if attention is None:
        return None
    return _add_edges(dag, *[(attention.id, src, "data") for src in _data_preds(dag, attention.id)[:1]])


@mutation("DAG-2")
def dangling_edge(dag: DAG) -> DAG | None:
    """Add an edge to a node that does not exist."""
    return _add_edges(dag, (dag.nodes[0].id, "ghost/node", "data"))


@mutation("DAG-2")
def duplicate_node(dag: DAG) -> DAG | None:
    """Draw one node twice under the same id."""
    return _dag(dag, nodes=[*dag.nodes, dag.nodes[len(dag.nodes) // 2]])


@mutation("DAG-3")
def cross_phase_edge(dag: DAG) -> DAG | None:
    """Let a decode embedding read a prefill sampler directly."""
    sampler = _find(dag, lambda n: _is(n, "sampler", "prefill"))
    embedding = _find(dag, lambda n: _is(n, "embedding", "decode"))
    if sampler is None or embedding is None:
        return None
    return _add_edges(dag, (sampler.id, embedding.id, "data"))


@mutation("DAG-4")
def rank_outside_world(dag: DAG) -> DAG | None:
    """Run a node on a GPU beyond the world size."""
    node = _find(dag, lambda n: n.kind == "linear")
    return None if node is None else _update(dag, node.id, ranks=[*node.ranks, dag.meta.gpus])


@mutation("DAG-5", "a collective or send/recv joins disjoint GPU sets (EP across groups, PP, ...)")
def bypass_comm(dag: DAG) -> DAG | None:
    """Keep a transfer but add a direct edge around it between disjoint GPU sets."""
    by_id = {n.id: n for n in dag.nodes}
    for comm in dag.nodes:
        if not isinstance(comm, CommNode):
            continue
        chain = [comm.id]
        if comm.kind == "send":
            chain += [e.dst for e in dag.edges if e.src == comm.id and e.kind == "pipeline"]
        for src in _data_preds(dag, chain[0]):
            for dst in _data_succs(dag, chain[-1]):
                a, b = by_id[src], by_id[dst]
                if (
                    not isinstance(a, CommNode)
                    and not isinstance(b, CommNode)
                    and not set(a.ranks) & set(b.ranks)
                ):
                    return _add_edges(dag, (src, dst, "data"))
    return None


# -- phases and decode -----------------------------------------------------------------------------
@mutation("PH-1")
def drop_prefill_kv_write(dag: DAG) -> DAG | None:
    """Prefill forgets to write one layer's KV cache."""
    node = _find(dag, lambda n: _is(n, "kv_write", "prefill"))
    return None if node is None else _remove(dag, {node.id}, rewire=False)


@mutation("PH-1")
def partial_prompt_write(dag: DAG) -> DAG | None:
    """Prefill caches only half the prompt positions of one layer."""
    node = _find(dag, lambda n: _is(n, "kv_write", "prefill"))
    if not isinstance(node, StateNode) or node.tokens < 2:
        return None
    return _update(dag, node.id, tokens=node.tokens // 2)


@mutation("KV-1")
def drop_decode_kv_write(dag: DAG) -> DAG | None:
    """Decode forgets to append one layer's new K/V."""
    node = _find(dag, lambda n: _is(n, "kv_write", "decode"))
    return None if node is None else _remove(dag, {node.id}, rewire=False)


@mutation("KV-2", "disaggregated serving")
def drop_kv_transfer(dag: DAG) -> DAG | None:
    """Join disaggregated prefill and decode boundary to boundary, without moving the cache."""
    if not dag.meta.strategy.disaggregated:
        return None
    transfers = {n.id for n in dag.nodes if n.kind == "kv_transfer"}
    return _add_edges(_remove(dag, transfers, rewire=False), ("prefill/end", "decode/step_t", "state"))


@mutation("KV-5", "disaggregated serving with both pools drawn on one node")
def two_gpu_types_on_one_node(dag: DAG) -> DAG | None:
    """Claim the decode pool is another GPU type while the pools share a node."""
    meta = dag.meta
    if not meta.strategy.disaggregated or meta.decode_gpu is not None:
        return None
    per_node = meta.gpus_per_node
    if not {r // per_node for r in meta.rank_pools["prefill"]} & {r // per_node for r in meta.rank_pools["decode"]}:
        return None
    return _dag(dag, meta=meta.model_copy(update={"decode_gpu": "L40S"}))


@mutation("KV-5", "two GPU types (prefill on one, decode on the other)")
def prefill_on_decode_gpus(dag: DAG) -> DAG | None:
    """Run one prefill projection on the decode pool's GPUs, of the other type."""
    if dag.meta.decode_gpu is None:
        return None
    node = _find(dag, lambda n: _is(n, "linear", "prefill"))
    if node is None:
        return None
    decode = dag.meta.rank_pools["decode"]
    return _update(dag, node.id, ranks=decode[: len(node.ranks)])


@mutation("DEC-1")
def drop_sampler_sync(dag: DAG) -> DAG | None:
    """Let step t+1 start without waiting for a sampler (the last one drawn: under speculative decoding the verify
    pass's samplers reach step t+1 through the draft passes they feed anyway)."""
    sampler = next((n for n in reversed(dag.nodes) if _is(n, "sampler", "decode")), None)
    if sampler is None:
        return None
    return _drop_edges(dag, lambda e: e.src == sampler.id and e.dst == "decode/step_t+1")


@mutation("DEC-2")
def drop_kv_read(dag: DAG) -> DAG | None:
    """Decode attention without the read of the cached K/V."""
    node = _find(dag, lambda n: _is(n, "kv_read", "decode"))
    return None if node is None else _remove(dag, {node.id}, rewire=False)


@mutation("DEC-2", "two or more decode layers")
def read_other_layer_cache(dag: DAG) -> DAG | None:
    """Decode attention reads the cache of another layer than the one it writes."""
    reads = [n for n in dag.nodes if _is(n, "kv_read", "decode") and isinstance(n, StateNode)]
    other = next((n for n in reads[1:] if n.kv_state != reads[0].kv_state), None) if reads else None
    if other is None:
        return None
    return _update(dag, reads[0].id, kv_state=other.kv_state)


@mutation("DEC-3", "tp > 1 in decode (vocabulary-parallel LM head)")
def drop_vocab_gather(dag: DAG) -> DAG | None:
    """Sample from vocabulary slices without gathering the logits."""
    node = _find(dag, lambda n: _is(n, "all_gather", "decode", "vocab_gather"))
    return None if node is None else _remove(dag, {node.id}, rewire=True)


@mutation("DEC-4")
def multi_token_decode(dag: DAG) -> DAG | None:
    """Decode attention over four new tokens per sequence (tokens of one sequence in parallel)."""
    node = _find(dag, lambda n: _is(n, "attention", "decode"))
    if not isinstance(node, ComputeNode):
        return None
    return _update(dag, node.id, shape={**node.shape, "q_len": 4})


@mutation("DEC-5")
def uncommitted_kv_write(dag: DAG) -> DAG | None:
    """A decode KV write that the step boundary does not wait for."""
    node = _find(dag, lambda n: _is(n, "kv_write", "decode"))
    if node is None:
        return None
    return _drop_edges(dag, lambda e: e.src == node.id and e.dst == "decode/step_t+1")


@mutation("OVL-1")
def step_back_edge(dag: DAG) -> DAG | None:
    """An edge from step t+1 back into step t."""
    node = _find(dag, lambda n: _is(n, "norm", "decode"))
    return None if node is None else _add_edges(dag, ("decode/step_t+1", node.id, "sync"))


@mutation("OVL-1")
def prefetch_next_step(dag: DAG) -> DAG | None:
    """Start reading step t+1's cache while step t still runs."""
    read = _find(dag, lambda n: _is(n, "kv_read", "decode"))
    if read is None:
        return None
    early = read.model_copy(update={"id": f"{read.id}@t+1", "step": 1})
    return _add_edges(_dag(dag, nodes=[*dag.nodes, early]), ("decode/step_t", early.id, "sync"))
