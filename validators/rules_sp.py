"""Sequence-parallel rules (05-sequence-parallelism.md): prefill only, explicit K/V gathers, gathers
inside a stage, routers fed by whole tokens, no more shards than prompt tokens."""

from __future__ import annotations

from collections.abc import Iterator

from .index import DagIndex
from .registry import Finding, from_problems, rule, sample

__all__ = [
    "rule_no_sp_in_decode",
    "rule_sp_gathers_kv",
    "rule_sp_inside_stage",
    "rule_router_after_sp_sync",
    "rule_sp_le_prompt",
]

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
