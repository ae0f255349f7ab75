"""The mandatory constraints of the decode branch (10-decode-constraints.md): one step, strictly ordered,
with explicit KV-cache dependencies and no hidden communication."""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.text import counted
from shardplan.validators.derived import attention_shapes, kv_states
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, rule, sample

__all__ = [
    "rule_step_order",
    "rule_attention_reads_kv",
    "rule_decode_comm_explicit",
    "rule_one_token_step",
    "rule_kv_write_commits",
]


@rule("DEC-1")
def rule_step_order(ix: DagIndex) -> Iterator[Finding]:
    """Step t+1 depends on every sampler and every KV-cache write of step t."""
    if "decode" not in ix.microbatches:
        return
    if not ix.decode_ends:
        yield Finding(
            message="the decode branch has no step boundary closing step t (a step_boundary with "
            "boundary='step_end', step=1), so nothing orders step t+1 after step t",
            fix="add decode/step_t+1 and feed it every sampler (sync) and every kv_write (state)",
        )
        return
    before = ix.before_decode_end
    loose = [
        ix.ids[i] for i in ix.of_kind("sampler", "kv_write") if ix.phase[i] == "decode" and not before[i]
    ]
    if loose:
        end = ix.ids[ix.decode_ends[0]]
        yield Finding(
            message=f"{len(loose)} decode samplers or KV writes do not precede {end}: "
            f"{sample(loose)}; step t+1 could start before they finish",
            fix=f"add an edge from each of them to {end} (sync for samplers, state for kv_write)",
            nodes=loose,
        )


@rule("DEC-2")
def rule_attention_reads_kv(ix: DagIndex) -> Iterator[Finding]:
    """Each decode attention node reads the cached K/V through a kv_read node and a state edge."""
    unread, mismatched = [], []
    kv_state = kv_states(ix)
    for i in ix.of_kind("attention"):
        if ix.phase[i] != "decode":
            continue
        cache = [p for p in ix.pred(i, "state") if ix.kind[p] in ("kv_read", "kv_write")]
        reads = [p for p in cache if ix.kind[p] == "kv_read"]
        states = {kv_state[p] for p in cache}
        if not reads:
            unread.append(ix.ids[i])
        elif len(states) != 1 or None in states or any(ix.layer[p] != ix.layer[i] for p in reads):
            mismatched.append(ix.ids[i])
    if unread:
        yield Finding(
            message=f"{len(unread)} decode attention nodes have no kv_read predecessor through a state "
            f"edge: {sample(unread)}; they would attend to nothing cached",
            fix="add a kv_read of the layer's cache (kv_state set) with a state edge into the attention",
            nodes=unread,
        )
    if mismatched:
        yield Finding(
            message=f"{len(mismatched)} decode attention nodes read a cache other than the one their layer "
            f"writes (another layer, another kv_state, or none named): {sample(mismatched)}",
            fix="read the cache of the attention's own layer: the kv_read and kv_write feeding an attention "
            "name the same kv_state",
            nodes=mismatched,
        )


@rule("DEC-3", full_graph=True)
def rule_decode_comm_explicit(ix: DagIndex) -> Iterator[Finding]:
    """In decode every reduction, gather and transfer is its own communication node."""
    hidden: list[tuple[str, str]] = []
    unreduced: list[str] = []
    split = [
        i
        for i, (partial, parallel) in enumerate(zip(ix.partial, ix.parallel, strict=True))
        if partial or parallel == "vocab"
    ]
    out, start = ix.out_csr
    dst, edge_kind, comm, phase = ix.dst, ix.edge_kind, ix.is_comm, ix.phase
    for i in split:
        if phase[i] != "decode":
            continue
        readers = [dst[e] for e in out[start[i] : start[i + 1]] if edge_kind[e] == "data"]
        hidden += [(ix.ids[i], ix.ids[j]) for j in readers if not comm[j]]
        if not any(comm[j] for j in readers):
            unreduced.append(ix.ids[i])
    src, ranks = ix.src, ix.ranks
    reshaped = [
        ix.edge_ids(e)
        for e in ix.crossing["ranks"]
        if edge_kind[e] == "data"
        and phase[s := src[e]] == "decode"
        and phase[d := dst[e]] == "decode"
        and not comm[s]
        and not comm[d]
        and ranks[s] != ranks[d]
    ]
    if hidden or unreduced:
        names = sorted({a for a, _ in hidden} | set(unreduced))
        yield Finding(
            message=f"{len(names)} decode nodes with partial or vocabulary-split outputs are read without "
            f"an explicit collective: {sample(names)}",
            fix="insert the all-reduce (partial sums) or all-gather (vocabulary slices) as a node",
            nodes=names,
            edges=hidden,
        )
    if reshaped:
        a, b = reshaped[0]
        yield Finding(
            message=f"{len(reshaped)} decode data edges change the GPU set without a communication node, "
            f"e.g. {a} on {sorted(ix.ranks[ix.pos[a]])[:8]} -> {b} on "
            f"{sorted(ix.ranks[ix.pos[b]])[:8]}",
            fix="route the tensor through the collective (all-gather, all-to-all, send/recv) that moves it",
            edges=reshaped,
        )


@rule("DEC-4")
def rule_one_token_step(ix: DagIndex) -> Iterator[Finding]:
    """The decode branch is exactly one step producing one new token per sequence."""
    if "decode" not in ix.microbatches:
        return
    fix_step = "draw one decode step: one step_start boundary (step t) and one step_end boundary (step t+1)"
    if len(ix.decode_starts) != 1 or len(ix.decode_ends) != 1:
        names = [ix.ids[i] for i in ix.decode_starts + ix.decode_ends]
        yield Finding(
            message=f"the decode branch has {len(ix.decode_starts)} step-start and "
            f"{len(ix.decode_ends)} step-end boundaries; exactly one of each is expected",
            fix=fix_step,
            nodes=names,
        )
    far = [ix.ids[i] for i, step in enumerate(ix.step) if step > 1 and ix.phase[i] == "decode"]
    if far:
        yield Finding(
            message=f"{len(far)} decode nodes belong to step t+2 or later: {sample(far)}",
            fix=fix_step,
            nodes=far,
        )
    multi = []
    shapes = attention_shapes(ix)
    # Speculative decoding verifies the last token and its K drafts in one step (10-decode-constraints.md): still
    # one step, each position depending on the ones before it (causal), so K + 1 positions and no other count.
    spec = ix.meta.workload.speculation
    allowed = (1, spec.verify_tokens) if spec else (1,)
    for i in ix.of_kind("attention"):
        shape = shapes[i]
        if ix.phase[i] == "decode" and shape.get("q_len", 1) not in allowed:
            multi.append((ix.ids[i], shape.get("q_len")))
    for i in ix.of_kind("kv_write"):
        if ix.phase[i] == "decode" and ix.attr(i, "tokens") not in (0, *allowed):
            multi.append((ix.ids[i], ix.attr(i, "tokens")))
    if multi:
        step = f"1 (or the {allowed[-1]} positions a verify step checks)" if spec else "1"
        yield Finding(
            message=f"{len(multi)} decode attention or kv_write nodes handle a number of new tokens per sequence "
            f"other than {step}, e.g. {multi[0][0]} with {counted(multi[0][1], 'token')}",
            fix="decode one token per sequence per step (q_len=1, kv_write tokens=1), or under speculative "
            "decoding the K + 1 positions of the verify step",
            nodes=[name for name, _ in multi],
        )
    with_sampler = {ix.mb[i] for i in ix.of_kind("sampler") if ix.phase[i] == "decode"}
    silent = [mb for mb in ix.microbatches.get("decode", []) if mb not in with_sampler]
    if silent:
        yield Finding(
            message=f"decode microbatches {silent[:8]} produce no token: they have no sampler",
            fix="end every decode microbatch with final norm, LM head and a sampler",
        )


@rule("DEC-5")
def rule_kv_write_commits(ix: DagIndex) -> Iterator[Finding]:
    """Every decode kv_write feeds the step boundary through a state edge."""
    ends = set(ix.decode_ends)
    if not ends:
        return  # DEC-1 reports the missing boundary
    readers: dict[object, list[int]] = {}
    states = kv_states(ix)
    out, start = ix.out_csr
    inn, in_start = ix.in_csr
    dst, src, kinds, edge_kind, phase = ix.dst, ix.src, ix.kind, ix.edge_kind, ix.phase
    for r in ix.of_kind("kv_read"):
        if phase[r] == "decode":
            readers.setdefault(states[r], []).extend(
                j for e in out[start[r] : start[r + 1]] if edge_kind[e] == "state" and kinds[j := dst[e]] == "attention"
            )
    late = []
    for w in ix.of_kind("kv_write"):
        attention = readers.get(states[w], []) if phase[w] == "decode" else []
        if any(w not in map(src.__getitem__, inn[in_start[a] : in_start[a + 1]]) for a in attention):
            late.append(ix.ids[w])
    if late:
        yield Finding(
            message=f"{len(late)} decode kv_write nodes do not precede the attention that reads their cache: "
            f"{sample(late)}; the new token's key and value would be missing from it",
            fix=f"add a state edge from {late[0]} to the attention of its layer (store, then attend)",
            nodes=late,
        )
    loose = [
        ix.ids[i]
        for i in ix.of_kind("kv_write")
        if ix.phase[i] == "decode" and not any(j in ends for j in ix.succ(i, "state"))
    ]
    if loose:
        end = ix.ids[min(ends)]
        yield Finding(
            message=f"{len(loose)} decode kv_write nodes are not committed at the step boundary "
            f"{end}: {sample(loose)}",
            fix=f"add a state edge from each kv_write to {end}",
            nodes=loose,
        )
