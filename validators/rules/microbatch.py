"""Microbatch rules (07-microbatching.md): independent microbatches with their own KV cache, no more
microbatches than sequences, and decode microbatches held inside one step."""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.text import counted
from shardplan.validators.derived import kv_states
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, from_problems, rule, sample

__all__ = ["rule_microbatches_independent", "rule_kv_isolated", "rule_mb_le_batch", "rule_decode_mb_in_step"]

_JOINERS = ("step_boundary", "kv_transfer")
"""Nodes that join all microbatches by design: phase and step boundaries, the KV handoff."""


@rule("MB-1")
def rule_microbatches_independent(ix: DagIndex) -> Iterator[Finding]:
    """No edge joins nodes of two different microbatches."""
    bad = [
        ix.edge_ids(e)
        for e in ix.crossing["microbatch"]
        if ix.kind[ix.src[e]] not in _JOINERS and ix.kind[ix.dst[e]] not in _JOINERS
    ]
    if bad:
        a, b = bad[0]
        yield Finding(
            message=f"{counted(len(bad), 'edge')} join different microbatches, e.g. {a} (microbatch "
            f"{ix.mb[ix.pos[a]]}) -> {b} (microbatch {ix.mb[ix.pos[b]]})",
            fix="keep each microbatch's chain separate; only step boundaries may join them",
            edges=bad,
        )


@rule("MB-2")
def rule_kv_isolated(ix: DagIndex) -> Iterator[Finding]:
    """Each KV-cache state is read and written by one microbatch only."""
    owners: dict[str, set[int]] = {}
    touching: dict[str, list[str]] = {}
    anonymous = []
    states = kv_states(ix)
    for i in ix.of_kind("kv_read", "kv_write"):
        state = states[i]
        if state is None:
            anonymous.append(ix.ids[i])
        else:
            owners.setdefault(str(state), set()).add(ix.mb[i])
            touching.setdefault(str(state), []).append(ix.ids[i])
    shared = sorted(state for state, mbs in owners.items() if len(mbs) > 1)
    if shared:
        yield Finding(
            message=f"{len(shared)} KV-cache states are touched by several microbatches, e.g. {shared[0]} "
            f"by microbatches {sorted(owners[shared[0]])}",
            fix="give each microbatch its own kv_state per layer (its own sequences' cache)",
            nodes=[name for state in shared for name in touching[state]],
        )
    if anonymous:
        yield Finding(
            message=f"{len(anonymous)} KV nodes name no kv_state, so their cache cannot be told apart: "
            f"{sample(anonymous)}",
            fix="set kv_state on every kv_read and kv_write (e.g. kv/L3/mb0)",
            nodes=anonymous,
        )


@rule("MB-3")
def rule_mb_le_batch(ix: DagIndex) -> Iterator[Finding]:
    """Microbatches (times data-parallel groups) do not exceed the batch."""
    yield from from_problems(ix, "MB-3")


@rule("MB-4")
def rule_decode_mb_in_step(ix: DagIndex) -> Iterator[Finding]:
    """Each decode microbatch starts after step t opens, ends before step t+1, and stays in step t."""
    starts, ends = bool(ix.decode_starts), bool(ix.decode_ends)
    after, before = ix.after_decode_start, ix.before_decode_end
    later: dict[int, list[str]] = {}
    unopened: dict[int, list[str]] = {}
    unclosed: dict[int, list[str]] = {}
    for i, phase in enumerate(ix.phase):
        if phase != "decode" or ix.kind[i] == "step_boundary":
            continue
        if ix.step[i] != 0:
            later.setdefault(ix.mb[i], []).append(ix.ids[i])
        if starts and not after[i]:
            unopened.setdefault(ix.mb[i], []).append(ix.ids[i])
        if ends and not before[i]:
            unclosed.setdefault(ix.mb[i], []).append(ix.ids[i])
    problems = {
        "are drawn in a later step": later,
        "do not wait for the step-t boundary": unopened,
        "do not feed the step-t+1 boundary": unclosed,
    }
    for problem, by_mb in problems.items():
        if not by_mb:
            continue
        names = [name for mb in sorted(by_mb) for name in by_mb[mb]]
        yield Finding(
            message=f"decode microbatches {sorted(by_mb)[:8]} spread beyond step t: {counted(len(names), 'node')} "
            f"{problem} ({sample(names)})",
            fix="open every decode microbatch from decode/step_t and close it into decode/step_t+1; "
            "draw no node of step t+1",
            nodes=names,
        )
