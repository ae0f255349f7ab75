"""KV-cache state rules (14-data-flow-and-state.md) and the labels the KV rules depend on (11-dag-vocabulary.md):
prefill's cache is committed before decode, each cache has one owner, and whatever consumes K/V is an
attention node, so that no relabelling switches the KV rules off."""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.contracts.dag import category_of
from shardplan.text import counted
from shardplan.validators.derived import kv_consumers, kv_states
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, rule, sample

__all__ = ["rule_labels_match_graph", "rule_prefill_kv_committed", "rule_kv_single_owner"]

_COMMIT_PATH = frozenset({"kv_write", "step_boundary", "kv_transfer"})


@rule("DAG-6")
def rule_labels_match_graph(ix: DagIndex) -> Iterator[Finding]:
    """Categories agree with kinds, and every node that consumes K/V is an attention node."""
    categories = ix.category
    # Kinds and categories repeat: compare the distinct pairs, then find the nodes of a wrong one.
    bad_pairs = {
        (kind, category)
        for kind, category in set(zip(ix.kind, categories, strict=True))
        if category is not None and category != category_of(kind)
    }
    wrong = [
        (ix.ids[i], str(category), category_of(kind))
        for i, (kind, category) in enumerate(zip(ix.kind, categories, strict=True))
        if (kind, category) in bad_pairs
    ] if bad_pairs else []
    if wrong:
        name, have, want = wrong[0]
        yield Finding(
            message=f"{counted(len(wrong), 'node')} carry a category their kind contradicts, e.g. {name} says "
            f"'{have}' where its kind is '{want}'",
            fix=f"set category '{want}' on {name} (routing and KV/step nodes are control, collectives "
            "and transfers communication, the rest compute), or leave category out to derive it",
            nodes=[w[0] for w in wrong],
        )
    disguised = sorted((ix.ids[j], ix.ids[s]) for j, s in kv_consumers(ix).items() if ix.kind[j] != "attention")
    if disguised:
        node, source = disguised[0]
        yield Finding(
            message=f"{counted(len(disguised), 'node')} consume keys and values but are not attention nodes, e.g. "
            f"{node} ({ix.kind[ix.pos[node]]}) reads the K/V of {source}",
            fix=f"give {node} kind 'attention' so the KV-cache rules apply to it, or stop feeding it K/V",
            nodes=[d[0] for d in disguised],
            edges=disguised,
        )


def _committed(ix: DagIndex) -> bytearray:
    """Nodes from which a decode step start is reached through KV writes, boundaries and KV transfers only."""
    mask = bytearray(len(ix))
    stack = list(ix.decode_starts)
    for i in stack:
        mask[i] = 1
    while stack:
        i = stack.pop()
        for e in ix.in_edges(i):
            j = ix.src[e]
            if not mask[j] and ix.kind[j] in _COMMIT_PATH and ix.edge_kind[e] in ("state", "sync"):
                mask[j] = 1
                stack.append(j)
    return mask


@rule("KV-3")
def rule_prefill_kv_committed(ix: DagIndex) -> Iterator[Finding]:
    """Every prefill KV write is committed before the decode step opens."""
    writes = [i for i in ix.of_kind("kv_write") if ix.phase[i] == "prefill"]
    if not writes or not ix.decode_starts:
        return
    committed = _committed(ix)
    loose = [ix.ids[i] for i in writes if not committed[i]]
    if loose:
        ends = ix.boundaries["prefill_end"]
        end = ix.ids[ends[0]] if ends else "the boundary that closes prefill"
        yield Finding(
            message=f"{len(loose)} prefill KV writes are not committed before decode starts at "
            f"{ix.ids[ix.decode_starts[0]]}: {sample(loose)}; decode could read a cache still being filled",
            fix=f"add a state edge from each of them to {end}, which precedes the decode step (directly, "
            "or through the KV transfer when disaggregated)",
            nodes=loose,
        )


@rule("KV-4")
def rule_kv_single_owner(ix: DagIndex) -> Iterator[Finding]:
    """Each kv_state has one writer per phase, fed by its layer's K/V producer, and is read where it was written."""
    writers: dict[tuple[str, str], list[int]] = {}
    states = kv_states(ix)
    for w in ix.of_kind("kv_write"):
        state = states[w]
        if state is not None:
            writers.setdefault((ix.phase[w], str(state)), []).append(w)
    shared = [(state, ws) for (_, state), ws in writers.items() if len(ws) > 1]
    if shared:
        state, ws = shared[0]
        yield Finding(
            message=f"{len(shared)} KV caches are written by several nodes of one phase, e.g. {state} by "
            f"{sample([ix.ids[w] for w in ws], 2)} (on GPUs {sorted(ix.ranks[ws[0]])[:4]} and "
            f"{sorted(ix.ranks[ws[1]])[:4]})",
            fix=f"give each attention group, sequence shard and microbatch its own kv_state: rename the "
            f"state of {ix.ids[ws[1]]}",
            nodes=[ix.ids[w] for _, ws in shared for w in ws],
        )
    inn, start = ix.in_csr
    src, comm, layer, mb, kinds = ix.src, ix.is_comm, ix.layer, ix.mb, ix.kind
    unfed = [
        ix.ids[w]
        for ws in writers.values()
        for w in ws
        if not any(
            not comm[p] and layer[p] == layer[w] and mb[p] == mb[w] and kinds[p] != "kv_read"
            for p in map(src.__getitem__, inn[start[w] : start[w + 1]])
        )
    ]
    if unfed:
        yield Finding(
            message=f"{len(unfed)} KV writes store nothing their layer computed (no K/V producer of the same "
            f"layer and microbatch feeds them): {sample(unfed)}",
            fix=f"add a state edge from the layer's QKV projection to {unfed[0]}",
            nodes=unfed,
        )
    elsewhere = []
    for r in ix.of_kind("kv_read"):
        state = states[r]
        owners = writers.get((ix.phase[r], str(state)), [])
        if owners and all(ix.ranks[w] != ix.ranks[r] for w in owners):
            elsewhere.append((ix.ids[r], ix.ids[owners[0]]))
    if elsewhere:
        read, write = elsewhere[0]
        yield Finding(
            message=f"{len(elsewhere)} KV reads run on other GPUs than the write of their cache, e.g. {read} "
            f"on {sorted(ix.ranks[ix.pos[read]])[:4]} reads the cache {write} fills on "
            f"{sorted(ix.ranks[ix.pos[write]])[:4]}",
            fix=f"run {read} on the GPUs of {write}: a cache is read where it lives",
            nodes=[a for a, _ in elsewhere],
        )
