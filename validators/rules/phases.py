"""KV-cache rules of the two phases (01-phases.md, 10-decode-constraints.md): prefill fills the cache,
decode appends to it, and disaggregated serving moves it with an explicit transfer."""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.text import counted
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, rule, sample

__all__ = [
    "short_prompt_writes",
    "rule_prefill_writes_kv",
    "rule_decode_writes_kv",
    "rule_disaggregated_kv_transfer",
    "missing_kv_writes",
]


def missing_kv_writes(ix: DagIndex, phase: str) -> tuple[list[str], list[tuple[int, int]], int]:
    """KV writes a phase lacks: attention nodes with no ``kv_write`` of the same microbatch, layer and
    shard; ``(microbatch, layer)`` pairs with no ``kv_write`` at all; and the layer count expected.

    Every model layer is expected, except in a layer-collapsed view, where the layers drawn are.
    """
    writes: set[tuple[int, int | None, object]] = set()
    layers_written: set[tuple[int, int | None]] = set()
    for i in ix.of_kind("kv_write"):
        if ix.phase[i] == phase:
            writes.add((ix.mb[i], ix.layer[i], ix.attr(i, "shard")))
            layers_written.add((ix.mb[i], ix.layer[i]))
    attention = [i for i in ix.of_kind("attention") if ix.phase[i] == phase]
    unmatched = [ix.ids[i] for i in attention if (ix.mb[i], ix.layer[i], ix.attr(i, "shard")) not in writes]
    if ix.meta.collapsed:
        layers = sorted({layer for i in attention if (layer := ix.layer[i]) is not None})
    else:
        layers = list(range(ix.meta.model.num_layers))
    microbatches = ix.microbatches.get(phase, [])
    uncovered = [(mb, layer) for mb in microbatches for layer in layers if (mb, layer) not in layers_written]
    return unmatched, uncovered, len(layers)


def _kv_findings(ix: DagIndex, phase: str, fix: str) -> Iterator[Finding]:
    unmatched, uncovered, layer_count = missing_kv_writes(ix, phase)
    if uncovered:
        by_mb: dict[int, list[int]] = {}
        for mb, layer in uncovered:
            by_mb.setdefault(mb, []).append(layer)
        parts = [
            f"microbatch {mb}: layers {sample([str(layer) for layer in layers], 5)}"
            for mb, layers in sorted(by_mb.items())
        ]
        yield Finding(
            message=f"{phase} writes no KV cache for {len(uncovered)} (microbatch, layer) pairs of "
            f"{counted(layer_count, 'layer')} ({'; '.join(parts[:3])})",
            fix=fix,
        )
    if unmatched:
        yield Finding(
            message=f"{len(unmatched)} {phase} attention nodes have no kv_write of the same "
            f"microbatch, layer and shard: {sample(unmatched)}",
            fix=fix,
            nodes=unmatched,
        )


def short_prompt_writes(ix: DagIndex) -> list[tuple[str, int]]:
    """Prefill KV writes that cover fewer than the prompt positions prefill computes (``isl``, less a prefix the
    prefix cache already holds): per microbatch, layer and attention group (its SP shards together), the first
    write and the tokens written. Writes that state no token count (0) are not judged."""
    sp = max(ix.meta.strategy.prefill.sp, 1)
    written: dict[tuple[int, int | None, int], list[int]] = {}
    for i in ix.of_kind("kv_write"):
        if ix.phase[i] != "prefill":
            continue
        shard = ix.attr(i, "shard")
        key = (ix.mb[i], ix.layer[i], shard // sp if isinstance(shard, int) else 0)
        written.setdefault(key, []).append(i)
    isl = ix.meta.workload.prefill_tokens
    short = []
    for writes in written.values():
        tokens = sum(ix.fields[i].get("tokens") or 0 for i in writes)
        if 0 < tokens < isl:
            short.append((ix.ids[writes[0]], tokens))
    return short


@rule("PH-1")
def rule_prefill_writes_kv(ix: DagIndex) -> Iterator[Finding]:
    """Prefill writes the KV cache of every attention layer, for every microbatch and prompt position."""
    yield from _kv_findings(
        ix,
        "prefill",
        "add a kv_write per layer, microbatch and shard, fed by the QKV "
        "projection and feeding prefill's end boundary",
    )
    short = [] if ix.meta.collapsed else short_prompt_writes(ix)  # a collapsed view draws one shard
    if short:
        name, tokens = short[0]
        yield Finding(
            message=f"{len(short)} prefill layer caches hold fewer tokens than the prompt: {name} and its "
            f"shards write {tokens} of the {ix.meta.workload.prefill_tokens} positions prefill computes "
            f"(isl={ix.meta.workload.isl})",
            fix="write the K/V of every prompt position: the shards of an attention group together cover isl",
            nodes=[n for n, _ in short],
        )


@rule("KV-1")
def rule_decode_writes_kv(ix: DagIndex) -> Iterator[Finding]:
    """Decode appends the new token's K/V through a kv_write in every attention layer."""
    yield from _kv_findings(
        ix,
        "decode",
        "add a kv_write per decode layer, microbatch and attention group, "
        "fed by the QKV projection and feeding the step boundary",
    )


@rule("KV-2")
def rule_disaggregated_kv_transfer(ix: DagIndex) -> Iterator[Finding]:
    """With disaggregated serving, every decode KV read depends on an explicit KV-transfer node."""
    if not ix.meta.strategy.disaggregated:
        return
    fix = "add kv_transfer nodes (phase handoff) after prefill's end boundary and before decode's first step"
    transfers = ix.of_kind("kv_transfer")
    reads = [i for i in ix.of_kind("kv_read") if ix.phase[i] == "decode"]
    if not transfers:
        yield Finding(
            message="the strategy is disaggregated but the DAG has no kv_transfer node: the decode "
            "pool never receives the prefill pool's KV cache",
            fix=fix,
        )
        return
    reached = ix.reach(transfers)
    unfed = [ix.ids[i] for i in reads if not reached[i]]
    if unfed:
        yield Finding(
            message=f"{len(unfed)} of {len(reads)} decode kv_read nodes do not depend on a KV "
            f"transfer: {sample(unfed)}",
            fix=fix,
            nodes=unfed,
        )
    early = [ix.ids[i] for i in transfers if not any(ix.phase[p] == "prefill" for p in ix.pred(i))]
    if early:
        yield Finding(
            message=f"{len(early)} kv_transfer nodes do not wait for prefill: {sample(early)}",
            fix="make every kv_transfer depend on prefill's end boundary (a state edge)",
            nodes=early,
        )
