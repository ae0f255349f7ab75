"""Overlap rules (08-overlap.md): decode steps never overlap, and a transfer delivers what its consumer
expects, whatever the schedule overlaps it with."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import compress
from operator import ne

from shardplan.text import counted
from shardplan.validators.comm_checks import (
    dtype_mismatches,
    edges_between,
    members,
    size_mismatches,
    uncovered_collectives,
)
from shardplan.validators.index import REDUCTION_KINDS, DagIndex
from shardplan.validators.registry import Finding, rule, sample

__all__ = ["rule_no_cross_step_overlap", "rule_transfer_matches_consumer"]


@rule("OVL-1")
def rule_no_cross_step_overlap(ix: DagIndex) -> Iterator[Finding]:
    """No node of step t+1 starts before step t completed; no edge leads from step t+1 back into step t."""
    back = [ix.edge_ids(e) for e in ix.crossing["step"] if ix.step[ix.src[e]] > ix.step[ix.dst[e]]]
    if back:
        a, b = back[0]
        yield Finding(
            message=f"{counted(len(back), 'edge')} lead from a later decode step back into an earlier one, e.g. {a} "
            f"(step {ix.step[ix.pos[a]]}) -> {b} (step {ix.step[ix.pos[b]]})",
            fix="step t+1 may only depend on step t, never feed it: remove the backward edges",
            edges=back,
        )
    after = ix.after_decode_end
    early = [
        ix.ids[i] for i, step in enumerate(ix.step) if step >= 1 and ix.phase[i] == "decode" and not after[i]
    ]
    if early:
        end = ix.ids[ix.decode_ends[0]] if ix.decode_ends else "the step-t+1 boundary"
        yield Finding(
            message=f"{counted(len(early), 'node')} of step t+1 can start before step t completed (they do not "
            f"depend on {end}): {sample(early)}",
            fix=f"make every step-t+1 node depend on {end}, or leave step t+1 undrawn",
            nodes=early,
        )


@rule("OVL-3")
def rule_transfer_matches_consumer(ix: DagIndex) -> Iterator[Finding]:
    """Each transfer delivers the shape, dtype and placement its consumer expects."""
    holders, reductions = edges_between(ix, bytearray(ix.partial), members(ix, tuple(sorted(REDUCTION_KINDS))))
    misplaced = [
        (ix.ids[p], ix.ids[c])
        for p, c in compress(zip(holders, reductions, strict=True), map(ne, map(ix.ranks.__getitem__, holders),
                                                                        map(ix.ranks.__getitem__, reductions)))
    ]
    if misplaced:
        src, dst = misplaced[0]
        yield Finding(
            message=f"{len(misplaced)} reductions run on other GPUs than the partial sums they reduce, "
            f"e.g. {dst} on {sorted(ix.ranks[ix.pos[dst]])[:8]} reduces {src} on "
            f"{sorted(ix.ranks[ix.pos[src]])[:8]}",
            fix="reduce a partial output over exactly the ranks that hold it",
            edges=misplaced,
        )
    unmatched: list[tuple[str, str]] = []
    reasons: list[str] = []
    for s in ix.of_kind("send"):
        for e in ix.out_edges(s):
            d = ix.dst[e]
            if ix.kind[d] != "recv":
                continue
            send, recv = ix.nodes[s].__dict__, ix.nodes[d].__dict__
            why = [
                what
                for what, ok in (
                    ("send peers are not the receivers' ranks", set(send.get("peers") or []) == ix.ranks[d]),
                    ("recv peers are not the senders' ranks", set(recv.get("peers") or []) == ix.ranks[s]),
                    ("message sizes differ", send.get("message_bytes") == recv.get("message_bytes")),
                    ("dtypes differ", send.get("dtype") == recv.get("dtype")),
                )
                if not ok
            ]
            if why:
                unmatched.append(ix.edge_ids(e))
                reasons.append(f"{ix.ids[s]} -> {ix.ids[d]}: {', '.join(why)}")
    if unmatched:
        yield Finding(
            message=f"{len(unmatched)} send/recv pairs disagree on what is transferred: {sample(reasons, 2)}",
            fix="give a send and its recv the same message size and dtype, with each one's peers equal "
            "to the other's ranks",
            edges=unmatched,
        )
    for problems, what, fix in (
        (
            uncovered_collectives(ix),
            "collectives lack input on some of their GPUs",
            "feed the collective from a producer on each of its ranks (every shard or group that takes part)",
        ),
        (
            size_mismatches(ix),
            "collectives carry another size than their producer made or their consumer reads",
            "size the message as the producer's output (all-reduce / reduce-scatter) or as the routed token "
            "copies (dispatch, combine)",
        ),
        (
            dtype_mismatches(ix),
            "communication nodes move a format their tensor does not have",
            "move activations in the model's activation dtype, K/V in its kv dtype, logits in fp32; only an "
            "FP8 model's dispatch may be fp8",
        ),
    ):
        if problems:
            yield Finding(
                message=f"{len(problems)} {what}: {sample([f'{n} {why}' for n, why in problems], 2)}",
                fix=f"{fix} (first: {problems[0][0]})",
                nodes=sorted({n for n, _ in problems}),
            )
