"""Sequence-parallel rules (05-sequence-parallelism.md): prefill only, explicit K/V gathers, gathers
inside a stage, routers fed by whole tokens, no more shards than prompt tokens."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat

from shardplan.contracts.arithmetic.feasibility import idle_decode_groups
from shardplan.text import agreeing, counted
from shardplan.validators.derived import attention_shapes, covering_ranks, min_context
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, from_problems, rule, sample

__all__ = [
    "rule_no_sp_in_decode",
    "rule_sp_gathers_kv",
    "rule_sp_inside_stage",
    "rule_router_after_sp_sync",
    "rule_sp_le_prompt",
    "rule_idle_decode_groups",
    "short_sighted",
]


def short_sighted(ix: DagIndex, phase: str) -> list[tuple[str, int, int]]:
    """Attention and kv_read nodes of ``phase`` that see fewer key positions than the prompt (or the
    window), as ``(id, seen, expected)``: the mark of a split along the sequence, whatever the labels."""
    found = []
    fields, phases, layers = ix.fields, ix.phase, ix.layer
    expected_of: dict[int | None, int] = {}
    attention = [i for i in ix.of_kind("attention") if phases[i] == phase]
    reads = [i for i in ix.of_kind("kv_read") if phases[i] == phase]
    shapes = attention_shapes(ix)
    seen_by_attention = [shapes[i].get("kv_len") for i in attention]
    seen_by_reads = list(map(dict.get, map(fields.__getitem__, reads), repeat("tokens")))
    for i, seen in zip(attention + reads, seen_by_attention + seen_by_reads, strict=True):
        layer = layers[i]
        if layer not in expected_of:
            expected_of[layer] = min_context(ix, layer)
        if isinstance(seen, int) and seen < expected_of[layer]:
            found.append((ix.ids[i], seen, expected_of[layer]))
    return found


_SP_PURPOSES = ("sp_reduce_scatter", "sp_kv_gather", "sp_gather")


@rule("SP-1")
def rule_no_sp_in_decode(ix: DagIndex) -> Iterator[Finding]:
    """Decode uses no sequence parallelism: sp=1 and no token-shard nodes or SP collectives."""
    yield from from_problems(ix, "SP-1")
    shards = [
        ix.ids[i]
        for i, phase in enumerate(ix.phase)
        if phase == "decode" and (ix.purpose[i] in _SP_PURPOSES or ix.parallel[i] == "sequence")
    ]
    split = short_sighted(ix, "decode")
    if split:
        name, seen, expected = split[0]
        yield Finding(
            message=f"{len(split)} decode attention or KV reads see only part of the cached context, e.g. "
            f"{name} sees {seen} of at least {expected} positions: the cache is split by sequence",
            fix=f"let {name} read the whole cached context of its sequences; spread decode over attention "
            "groups by sequence (adp), not over positions",
            nodes=[s[0] for s in split],
        )
    if shards:
        yield Finding(
            message=f"{len(shards)} decode nodes are sequence shards or SP collectives: {sample(shards)}",
            fix="decode has one token per sequence: drop the token shards and SP gathers, use those "
            "GPUs as attention data parallelism (adp) instead",
            nodes=shards,
        )


@rule("SP-2")
def rule_sp_gathers_kv(ix: DagIndex) -> Iterator[Finding]:
    """Under SP every attention shard reads the whole sequence's K/V through an explicit all-gather."""
    strategy = ix.meta.strategy.prefill
    if strategy.sp < 2:
        return
    blind = [
        ix.ids[i]
        for i in ix.of_kind("attention")
        if ix.phase[i] == "prefill"
        and not any(
            ix.kind[p] == "all_gather" and ix.purpose[p] == "sp_kv_gather" for p in ix.pred(i, "data")
        )
    ]
    partial_gathers = [
        (ix.ids[i], sorted(ix.ranks[i] - covering_ranks(ix, i)))
        for i in ix.of_kind("all_gather")
        if ix.purpose[i] == "sp_kv_gather" and not ix.meta.collapsed and ix.ranks[i] - covering_ranks(ix, i)
    ]
    if partial_gathers:
        name, missing = partial_gathers[0]
        yield Finding(
            message=f"{len(partial_gathers)} SP K/V all-gathers are fed by only some shards, e.g. {name} gets "
            f"nothing from ranks {missing[:8]}: attention misses those tokens' keys",
            fix=f"feed {name} from the K/V projection of every sequence shard of its group",
            nodes=[g[0] for g in partial_gathers],
        )
    narrow = short_sighted(ix, "prefill")
    if narrow:
        name, seen, expected = narrow[0]
        yield Finding(
            message=f"{len(narrow)} prefill attention shards see fewer keys than the prompt, e.g. {name} sees "
            f"{seen} of {expected}",
            fix=f"give {name} the gathered K/V of the whole prompt (kv_len {expected})",
            nodes=[n[0] for n in narrow],
        )
    if blind:
        yield Finding(
            message=f"{len(blind)} prefill attention shards (sp={strategy.sp}) see only their own tokens' "
            f"K/V: no sp_kv_gather all-gather feeds them ({sample(blind)})",
            fix="all-gather the K/V of every shard of the attention group (purpose sp_kv_gather) and "
            "feed it to each attention shard",
            nodes=blind,
        )


@rule("SP-3", full_graph=True)
def rule_sp_inside_stage(ix: DagIndex) -> Iterator[Finding]:
    """SP collectives involve only the GPUs of one pipeline stage."""
    outside = [i for i, purpose in enumerate(ix.purpose) if purpose in _SP_PURPOSES and ix.beyond_stage(i)]
    if outside:
        first = outside[0]
        yield Finding(
            message=f"{len(outside)} SP collectives reach GPUs outside their pipeline stage, e.g. "
            f"{ix.ids[first]} (stage {ix.stage[first]}) includes ranks {ix.beyond_stage(first)[:8]}",
            fix="gather and scatter sequence shards among the GPUs of one stage only",
            nodes=[ix.ids[i] for i in outside],
        )


@rule("SP-4")
def rule_router_after_sp_sync(ix: DagIndex) -> Iterator[Finding]:
    """A router reads whole tokens: never a partial sum, never a reduce-scattered shard left ungathered."""
    routers = ix.of_kind("router")
    if not routers:
        return
    partial = [i for i, flag in enumerate(ix.partial) if flag]
    scattered = [i for i in ix.of_kind("reduce_scatter") if ix.purpose[i] == "sp_reduce_scatter"]
    bad: list[tuple[str, str]] = []
    for sources, stop in ((partial, ix.is_reduction), (scattered, lambda j: ix.is_comm[j])):
        reached = ix.taint(sources, stop)
        bad += [(ix.ids[source], ix.ids[i]) for i, source in reached.items() if ix.kind[i] == "router"]
    if bad:
        src, dst = bad[0]
        yield Finding(
            message=f"{len(bad)} routers read tokens before the SP/TP synchronization completed, e.g. "
            f"{dst} depends on {src} with no reduction or gather in between",
            fix="reduce (all-reduce / reduce-scatter) and all-gather the attention output before the "
            "router reads it",
            nodes=[d for _, d in bad],
            edges=bad,
        )


@rule("SP-5")
def rule_sp_le_prompt(ix: DagIndex) -> Iterator[Finding]:
    """The SP degree does not exceed the prompt length."""
    yield from from_problems(ix, "SP-5")


@rule("SP-6")
def rule_idle_decode_groups(ix: DagIndex) -> Iterator[Finding]:
    """Colocated SP prefill of fewer sequences than decode's attention groups leaves GPUs idle in decode."""
    strategy = ix.meta.strategy
    idle = idle_decode_groups(strategy, ix.meta.workload)
    if strategy.disaggregated or strategy.prefill.sp < 2 or idle < 1:
        return
    decode = strategy.decode
    busy = decode.adp - idle
    # Decode has no sequence shards, so an attention node's shard is its attention-DP group.
    empty = [
        i for i in ix.of_kind("attention") if ix.phase[i] == "decode" and int(str(ix.attr(i, "shard") or 0)) >= busy
    ]
    idle_ranks = sorted({r for i in empty for r in ix.ranks[i]})
    names = [ix.ids[i] for i in empty]
    yield Finding(
        message=f"{counted(ix.meta.workload.sequences, 'sequence')} "
                f"{agreeing(ix.meta.workload.sequences, 'fills', 'fill')} {busy} of the {decode.adp} decode attention "
                f"groups per "
        f"replica (prefill sp={strategy.prefill.sp} becomes decode adp={decode.adp}): GPUs {idle_ranks[:16]} "
        "have no sequence to attend to in decode: they hold their weight shards and join the collectives "
        "(MoE all-to-alls, pipeline hops); the graph draws each group with one sequence, an upper bound",
        fix="serve disaggregated (;disagg) with a smaller decode pool, or raise the batch to "
        f"{decode.adp * decode.dp * decode.mb} to use every decode group",
        nodes=names,
    )
