"""Mutation operators for the parallel degrees: tensor, pipeline, expert and sequence parallelism,
microbatches, and the hierarchy of groups (which ranks reduce together, which node they sit on).

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
    _stage_ranks,
    _strategy,
    _update,
    mutation,
)

from shardplan.contracts.arithmetic.feasibility import strategy_problems
from shardplan.contracts.dag import DAG, CommNode, Edge, StateNode

__all__: list[str] = []


# -- tensor parallelism ----------------------------------------------------------------------------
@mutation("TP-1", "tp > 1")
def tp_node_per_shard(dag: DAG) -> DAG | None:
    """Draw a TP operator on one shard's rank instead of its whole TP group."""
    node = _find(
        dag,
        lambda n: _is(n, "linear", "decode") and getattr(n, "parallel", "") == "column" and len(n.ranks) > 1,
    )
    return None if node is None else _update(dag, node.id, ranks=node.ranks[:1])


@mutation("TP-2", "tp > 1")
def drop_all_reduce(dag: DAG) -> DAG | None:
    """Remove the all-reduce after a row-parallel projection; its neighbours join directly."""
    node = _find(
        dag,
        lambda n: _is(n, "all_reduce", "decode", "tp_reduce") and ".all_reduce" in n.id and "o_proj" in n.id,
    )
    return None if node is None else _remove(dag, {node.id}, rewire=True)


@mutation("TP-2", "tp > 1")
def unmark_partial(dag: DAG) -> DAG | None:
    """Declare a row-parallel projection's output whole, hiding that it must be reduced."""
    node = _find(dag, lambda n: _is(n, "linear", "decode") and getattr(n, "partial", False))
    return None if node is None else _update(dag, node.id, partial=False)


@mutation("TP-3")
def tp_not_dividing_heads(dag: DAG) -> DAG | None:
    """Claim a TP degree that does not divide the attention heads."""
    heads = dag.meta.model.num_attention_heads
    tp = next(t for t in range(3, heads + 2) if heads % t)
    return _strategy(dag, "prefill", tp=tp)


@mutation("TP-4", "tp > 1")
def norm_before_reduction(dag: DAG) -> DAG | None:
    """Normalize the partial output of o_proj before its all-reduce."""
    o_proj = _find(dag, lambda n: _is(n, "linear", "decode") and getattr(n, "partial", False))
    if o_proj is None:
        return None
    norm = _find(
        dag,
        lambda n: (
            _is(n, "norm", "decode")
            and n.layer == o_proj.layer
            and n.microbatch == o_proj.microbatch
            and n.shard == o_proj.shard
            and "post_attn_norm" in n.id
        ),
    )
    return None if norm is None else _add_edges(dag, (o_proj.id, norm.id, "data"))


@mutation("TP-5", "tp > 1 (a TP group then straddles one-GPU nodes)")
def tp_group_across_nodes(dag: DAG) -> DAG | None:
    """Place the same ranks on one-GPU nodes, so each TP group crosses the network."""
    if max(dag.meta.strategy.prefill.tp, dag.meta.strategy.decode.tp) < 2:
        return None
    return _dag(dag, meta=dag.meta.model_copy(update={"gpus_per_node": 1}))


# -- pipeline parallelism --------------------------------------------------------------------------
@mutation("PP-1", "pp > 1")
def layer_on_wrong_stage(dag: DAG) -> DAG | None:
    """Run the first layer of stage 1 on stage 0."""
    stages = dag.meta.stage_layers["prefill"]
    if len(stages) < 2:
        return None
    layer = stages[1][0]
    return _dag(
        dag,
        nodes=[
            n.model_copy(update={"stage": 0})
            if n.phase == "prefill" and n.layer == layer and not isinstance(n, CommNode)
            else n
            for n in dag.nodes
        ],
    )


@mutation("PP-2", "pp > 1")
def reverse_pipeline_edge(dag: DAG) -> DAG | None:
    """Point a pipeline edge from the later stage back to the earlier one."""
    index = next((k for k, e in enumerate(dag.edges) if e.kind == "pipeline"), None)
    if index is None:
        return None
    edges = list(dag.edges)
    edges[index] = Edge(src=edges[index].dst, dst=edges[index].src, kind="pipeline")
    return _dag(dag, edges=edges)


@mutation("PP-3", "pp > 1")
def drop_send_recv(dag: DAG) -> DAG | None:
    """Cross a stage boundary without the send/recv pair."""
    send = _find(dag, lambda n: n.kind == "send")
    if send is None:
        return None
    recv = [e.dst for e in dag.edges if e.src == send.id and e.kind == "pipeline"]
    return _remove(dag, {send.id, *recv}, rewire=True)


@mutation("PP-4")
def pp_exceeds_layers(dag: DAG) -> DAG | None:
    """Claim more pipeline stages than layers."""
    return _strategy(dag, "decode", pp=dag.meta.model.num_layers + 1)


# -- expert parallelism ----------------------------------------------------------------------------
@mutation("EP-1", "ep > 1")
def drop_ep_dispatch(dag: DAG) -> DAG | None:
    """Send tokens from the routers straight to the experts, without the dispatch all-to-all."""
    node = _find(dag, lambda n: _is(n, "all_to_all", None, "ep_dispatch"))
    return None if node is None else _remove(dag, {node.id}, rewire=True)


@mutation("EP-2", "ep > 1 and pp > 1")
def ep_outside_stage(dag: DAG) -> DAG | None:
    """Let an expert all-to-all reach a GPU of the next stage."""
    node = _find(dag, lambda n: _is(n, "all_to_all", None, "ep_dispatch"))
    if node is None:
        return None
    other = _stage_ranks(dag, node.phase, node.stage + 1)
    return None if not other else _update(dag, node.id, ranks=[*node.ranks, min(other)])


@mutation("EP-3")
def ep_not_dividing(dag: DAG) -> DAG | None:
    """Claim EP on a dense model, or an EP degree that does not divide the experts."""
    moe = dag.meta.model.moe
    return _strategy(dag, "decode", ep=2 if moe is None else 2 * moe.num_experts)


@mutation("EP-4", "MoE model")
def router_tp_split(dag: DAG) -> DAG | None:
    """Split a router by TP."""
    node = _find(dag, lambda n: n.kind == "router")
    return None if node is None else _update(dag, node.id, parallel="column")


# -- sequence parallelism --------------------------------------------------------------------------
@mutation("SP-1")
def decode_sp_gather(dag: DAG) -> DAG | None:
    """Shard decode attention by tokens: an SP K/V all-gather in the decode branch."""
    attention = _find(dag, lambda n: _is(n, "attention", "decode"))
    if attention is None:
        return None
    gather = CommNode(
        id=f"{attention.id}.kv.all_gather",
        name="kv.all_gather",
        kind="all_gather",
        purpose="sp_kv_gather",
        phase="decode",
        layer=attention.layer,
        stage=attention.stage,
        microbatch=attention.microbatch,
        ranks=list(attention.ranks),
    )
    producers = [(src, gather.id, "data") for src in _data_preds(dag, attention.id)[:1]]
    return _add_edges(_dag(dag, nodes=[*dag.nodes, gather]), *producers, (gather.id, attention.id, "data"))


@mutation("SP-1")
def decode_sp_degree(dag: DAG) -> DAG | None:
    """Claim sp=2 for decode."""
    return _strategy(dag, "decode", sp=2)


@mutation("SP-2", "prefill sp > 1")
def drop_sp_kv_gather(dag: DAG) -> DAG | None:
    """Let attention shards see only their own tokens' K/V."""
    node = _find(dag, lambda n: _is(n, "all_gather", "prefill", "sp_kv_gather"))
    return None if node is None else _remove(dag, {node.id}, rewire=False)


@mutation("SP-3", "prefill sp > 1 and pp > 1")
def sp_outside_stage(dag: DAG) -> DAG | None:
    """Let an SP K/V gather reach a GPU of the next stage."""
    node = _find(dag, lambda n: _is(n, "all_gather", "prefill", "sp_kv_gather"))
    if node is None:
        return None
    other = _stage_ranks(dag, "prefill", node.stage + 1)
    return None if not other else _update(dag, node.id, ranks=[*node.ranks, min(other)])


@mutation("SP-4", "prefill sp > 1 and tp > 1 on an MoE model")
def router_before_sp_sync(dag: DAG) -> DAG | None:
    """Route the reduce-scattered shard of a token before gathering it."""
    routers = {n.id for n in dag.nodes if n.kind == "router"}
    gather = _find(
        dag,
        lambda n: (
            _is(n, "all_gather", "prefill", "sp_gather") and any(s in routers for s in _data_succs(dag, n.id))
        ),
    )
    return None if gather is None else _remove(dag, {gather.id}, rewire=True)


@mutation("SP-5", "prefill sp > 1")
def sp_exceeds_prompt(dag: DAG) -> DAG | None:
    """Claim a prompt shorter than the number of sequence shards."""
    sp = dag.meta.strategy.prefill.sp
    if sp < 2:
        return None
    workload = dag.meta.workload.model_copy(update={"isl": sp - 1})
    return _dag(dag, meta=dag.meta.model_copy(update={"workload": workload}))


# -- microbatches ----------------------------------------------------------------------------------
@mutation("MB-1", "mb > 1")
def join_microbatches(dag: DAG) -> DAG | None:
    """An edge from microbatch 0 into microbatch 1."""
    first = _find(dag, lambda n: _is(n, "norm", "prefill") and n.microbatch == 0 and n.layer == 0)
    second = _find(dag, lambda n: _is(n, "norm", "prefill") and n.microbatch == 1 and n.layer == 0)
    return None if first is None or second is None else _add_edges(dag, (first.id, second.id, "data"))


@mutation("MB-2", "mb > 1")
def share_kv_state(dag: DAG) -> DAG | None:
    """Let microbatch 1 write microbatch 0's KV cache."""
    mine = _find(dag, lambda n: _is(n, "kv_write", "prefill") and n.microbatch == 0)
    theirs = _find(dag, lambda n: _is(n, "kv_write", "prefill") and n.microbatch == 1)
    if not isinstance(mine, StateNode) or theirs is None:
        return None
    return _update(dag, theirs.id, kv_state=mine.kv_state)


@mutation("MB-3", "dp * adp * mb > 1")
def mb_exceeds_batch(dag: DAG) -> DAG | None:
    """Claim a batch of one sequence for more microbatches or groups than that."""
    workload = dag.meta.workload.model_copy(update={"batch": 1})
    meta = dag.meta
    problems = strategy_problems(meta.model, meta.strategy, workload, meta.gpus, meta.gpus_per_node)
    if not any(p.rule == "MB-3" for p in problems):
        return None  # one sequence is enough (a colocated SP prefill of one long prompt, SP-6)
    return _dag(dag, meta=dag.meta.model_copy(update={"workload": workload}))


@mutation("MB-4")
def detach_microbatch(dag: DAG) -> DAG | None:
    """Let the last decode microbatch start without waiting for step t to open."""
    last = max(n.microbatch for n in dag.nodes if n.phase == "decode")
    chain = {
        n.id for n in dag.nodes if n.phase == "decode" and n.microbatch == last and n.kind != "step_boundary"
    }
    return _drop_edges(dag, lambda e: e.src == "decode/step_t" and e.dst in chain)


# -- hierarchy and overlap -------------------------------------------------------------------------
def _shifted_reduction(dag: DAG) -> tuple[CommNode, list[int]] | None:
    """A TP all-reduce of a stage with several TP groups, and its ranks moved by one inside the stage."""
    for node in dag.nodes:
        if _is(node, "all_reduce", None, "tp_reduce") and isinstance(node, CommNode) and len(node.ranks) > 1:
            moved = [r + 1 for r in node.ranks]
            if set(moved) <= _stage_ranks(dag, node.phase, node.stage):
                return node, moved
    return None


@mutation("HIER-1", "tp > 1 and a stage with several TP groups (sp, adp or ep)")
def straddle_tp_groups(dag: DAG) -> DAG | None:
    """Run a TP all-reduce over half of one TP group and half of the next."""
    found = _shifted_reduction(dag)
    return None if found is None else _update(dag, found[0].id, ranks=found[1])


@mutation("HIER-2")
def wrong_gpu_count(dag: DAG) -> DAG | None:
    """Claim twice the GPUs the degrees multiply to."""
    return _dag(dag, meta=dag.meta.model_copy(update={"gpus": 2 * dag.meta.gpus}))


@mutation("HIER-3", "dp > 1")
def reach_other_replica(dag: DAG) -> DAG | None:
    """Run a decode operator on the GPUs of the second replica."""
    pool = dag.meta.rank_pools["decode"]
    if dag.meta.strategy.decode.dp < 2:
        return None
    node = _find(dag, lambda n: _is(n, "linear", "decode"))
    if node is None:
        return None
    return _update(dag, node.id, ranks=[r + len(pool) for r in node.ranks])


@mutation("OVL-3", "pp > 1")
def send_recv_mismatch(dag: DAG) -> DAG | None:
    """A recv that expects half the bytes its send delivers."""
    recv = _find(dag, lambda n: n.kind == "recv")
    if not isinstance(recv, CommNode):
        return None
    return _update(dag, recv.id, message_bytes=recv.message_bytes / 2)


@mutation("OVL-3", "tp > 1 and a stage with several TP groups")
def reduce_on_other_group(dag: DAG) -> DAG | None:
    """Reduce a partial output on another TP group than the one holding it."""
    for node in dag.nodes:
        if _is(node, "all_reduce", "decode", "tp_reduce") and len(node.ranks) > 1:
            other = [r + len(node.ranks) for r in node.ranks]
            if set(other) <= _stage_ranks(dag, node.phase, node.stage):
                return _update(dag, node.id, ranks=other)
    return None


@mutation("SPEC-1", "speculative decoding")
def unchained_draft(dag: DAG) -> DAG | None:
    """The first draft pass starts without the tokens the verify pass accepted."""
    firsts = {n.id for n in dag.nodes if n.kind == "embedding" and n.draft_pass == 0}
    if not firsts:
        return None
    samplers = {n.id for n in dag.nodes if n.kind == "sampler" and n.phase == "decode" and n.draft_pass is None}
    return _drop_edges(dag, lambda e: e.dst in firsts and e.src in samplers)


@mutation("SPEC-1", "speculative decoding")
def drafts_without_speculation(dag: DAG) -> DAG | None:
    """Draft passes in a DAG whose workload does not speculate."""
    if dag.meta.workload.speculation is None:
        return None
    return _dag(dag, meta=dag.meta.model_copy(update={"workload": dag.meta.workload.model_copy(
        update={"speculation": None})}))
