"""Structural rules of the DAG (11-dag-vocabulary.md): acyclic, well-formed, two branches, ranks, devices."""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.text import counted
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, rule, sample

__all__ = [
    "rule_acyclic",
    "rule_ids_and_endpoints",
    "rule_phase_branches",
    "rule_ranks_in_world",
    "rule_device_changes_are_explicit",
]


@rule("DAG-1")
def rule_acyclic(ix: DagIndex) -> Iterator[Finding]:
    """The graph has no directed cycle."""
    cycle = ix.cycle
    if not cycle:
        return
    names = [ix.ids[i] for i in cycle]
    stuck = len(ix) - len(ix.topological_order)
    loop = " -> ".join(names[:6]) + (" -> ..." if len(names) > 6 else "") + f" -> {names[0]}"
    yield Finding(
        message=f"the graph has a directed cycle of {counted(len(cycle), 'node')} ({loop}); {counted(stuck, 'node')} "
                f"lie on or "
        "after a cycle and cannot be scheduled",
        fix="remove the edge that closes the cycle: every dependency must point forward in time",
        nodes=names,
        edges=[(names[k], names[(k + 1) % len(names)]) for k in range(len(names))],
    )


@rule("DAG-2")
def rule_ids_and_endpoints(ix: DagIndex) -> Iterator[Finding]:
    """Node ids are unique and every edge joins two existing nodes."""
    if ix.duplicate_ids:
        dups = sorted(ix.duplicate_ids)
        counts = ", ".join(f"{name} (x{ix.duplicate_ids[name]})" for name in dups[:3])
        yield Finding(
            message=f"{len(dups)} node ids are used more than once: {counts}"
            + (f" and {len(dups) - 3} more" if len(dups) > 3 else ""),
            fix="give every node its own id (phase/mb/layer/op plus shard suffixes)",
            nodes=dups,
        )
    if ix.dangling:
        edges = [ix.edge_ids(e) for e in ix.dangling]
        missing = sorted({end for src, dst in edges for end in (src, dst) if end not in ix.pos})
        yield Finding(
            message=f"{counted(len(edges), 'edge')} name nodes that do not exist: {sample(missing)}",
            fix="add the missing nodes or remove the edges that point at them",
            edges=edges,
        )


@rule("DAG-3")
def rule_phase_branches(ix: DagIndex) -> Iterator[Finding]:
    """Prefill and decode are separate branches, joined only boundary to boundary or by a KV transfer."""
    present = set(ix.phase)
    for phase in ("prefill", "decode"):
        if phase not in present:
            yield Finding(
                message=f"the DAG has no {phase} branch: no node has phase '{phase}'",
                fix="draw both phases as top-level branches: prefill, then one decode step",
            )
    stray = [i for i, phase in enumerate(ix.phase) if phase == "handoff" and ix.kind[i] != "kv_transfer"]
    if stray:
        names = [ix.ids[i] for i in stray]
        yield Finding(
            message=f"{len(stray)} handoff nodes are not KV transfers: {sample(names)}",
            fix="put compute and state nodes in prefill or decode; handoff holds only kv_transfer",
            nodes=names,
        )
    disaggregated = ix.meta.strategy.disaggregated
    bad: list[tuple[str, str]] = []
    for e in ix.crossing["phase"]:
        s, d = ix.src[e], ix.dst[e]
        pair = (ix.phase[s], ix.phase[d])
        allowed = pair in (("prefill", "handoff"), ("handoff", "decode")) or (
            pair == ("prefill", "decode") and not disaggregated and ix.is_boundary(s) and ix.is_boundary(d)
        )
        if not allowed:
            bad.append(ix.edge_ids(e))
    if bad:
        how = "a KV-transfer node" if disaggregated else "prefill's end boundary into decode's start boundary"
        yield Finding(
            message=f"{counted(len(bad), 'edge')} join the phases other than through {how}: "
            f"{sample([f'{a} -> {b}' for a, b in bad])}",
            fix="link prefill to decode only "
            + (
                "through kv_transfer nodes (disaggregated serving)"
                if disaggregated
                else "boundary to boundary"
            ),
            edges=bad,
        )


@rule("DAG-4")
def rule_ranks_in_world(ix: DagIndex) -> Iterator[Finding]:
    """Every node names its ranks, and each rank lies in 0 .. world size - 1."""
    world = ix.meta.gpus
    bad = {footprint for footprint in set(ix.footprint) if not all(0 <= r < world for r in footprint)}
    outside = [i for i, footprint in enumerate(ix.footprint) if footprint in bad] if bad else []
    written = set(ix.rank_lists)
    empty = [ix.ids[i] for i, ranks in enumerate(ix.rank_lists) if not ranks] if () in written else []
    repeated = {ranks for ranks in written if len(set(ranks)) != len(ranks)}
    doubled = [ix.ids[i] for i, ranks in enumerate(ix.rank_lists) if ranks in repeated] if repeated else []
    if empty:
        yield Finding(
            message=f"{counted(len(empty), 'node')} list no ranks: {sample(empty)}",
            fix="give every node the GPUs it runs on (a TP node lists its whole TP group)",
            nodes=empty,
        )
    if outside:
        first = outside[0]
        wrong = sorted(r for r in ix.footprint[first] if not 0 <= r < world)
        names = [ix.ids[i] for i in outside]
        yield Finding(
            message=f"{counted(len(outside), 'node')} use ranks outside 0..{world - 1} (world size {world}); "
            f"{names[0]} uses {wrong[:5]}",
            fix=f"use ranks (and peers) between 0 and {world - 1}, or raise meta.gpus",
            nodes=names,
        )
    if doubled:
        yield Finding(
            message=f"{counted(len(doubled), 'node')} list the same rank twice: {sample(doubled)}",
            fix="list each rank of a node once",
            nodes=doubled,
        )


@rule("DAG-5", full_graph=True)
def rule_device_changes_are_explicit(ix: DagIndex) -> Iterator[Finding]:
    """A data or pipeline edge never joins two nodes on disjoint rank sets."""
    bad: list[tuple[str, str]] = []
    disjoint: dict[tuple[int, int], bool] = {}
    footprint = ix.footprint
    for e in ix.crossing["ranks"]:
        if ix.edge_kind[e] not in ("data", "pipeline"):
            continue
        a, b = footprint[ix.src[e]], footprint[ix.dst[e]]
        key = (id(a), id(b))
        verdict = disjoint.get(key)
        if verdict is None:
            verdict = disjoint[key] = bool(a) and bool(b) and a.isdisjoint(b)
        if verdict:
            bad.append(ix.edge_ids(e))
    if bad:
        (src, dst), s, d = bad[0], ix.pos[bad[0][0]], ix.pos[bad[0][1]]
        yield Finding(
            message=f"{len(bad)} data edges move a tensor between disjoint GPU sets with no communication "
            f"node, e.g. {src} on ranks {sorted(footprint[s])[:8]} -> {dst} on ranks "
            f"{sorted(footprint[d])[:8]}",
            fix="insert the transfer as a node: send/recv across stages, all-to-all for experts, a "
            "collective inside a group",
            edges=bad,
        )
