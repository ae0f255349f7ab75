"""Tensor-parallel rules (02-tensor-parallelism.md): one node per TP operator, explicit reductions,
divisibility, reduced tensors only in the residual stream, groups inside a node."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import compress

from shardplan.text import counted
from shardplan.validators.derived import partial_by_shape
from shardplan.validators.index import REDUCTION_KINDS, DagIndex
from shardplan.validators.registry import Finding, from_problems, rule, sample

__all__ = [
    "rule_tp_one_logical_node",
    "rule_partial_reduced",
    "rule_tp_divides",
    "rule_norm_on_reduced",
    "rule_tp_group_in_node",
]

_SPLIT = ("column", "row", "vocab")


@rule("TP-1")
def rule_tp_one_logical_node(ix: DagIndex) -> Iterator[Finding]:
    """A TP-split operator is one node whose ranks are its whole TP group (expert TP for routed experts)."""
    wrong: list[tuple[str, int, int]] = []
    strategies = {phase: ix.phase_strategy(phase) for phase in ("prefill", "decode")}
    for i, parallel in enumerate(ix.parallel):
        strategy = strategies.get(ix.phase[i])
        if parallel is None or strategy is None:
            continue
        if ix.kind[i] == "expert" and ix.is_routed_expert(i):
            expected = strategy.etp
        elif parallel in _SPLIT:
            expected = strategy.tp
        else:
            continue
        if expected and len(ix.ranks[i]) != expected:
            wrong.append((ix.ids[i], len(ix.ranks[i]), expected))
    if wrong:
        name, have, want = wrong[0]
        yield Finding(
            message=f"{len(wrong)} tensor-parallel operators do not span their TP group, e.g. {name} "
            f"runs on {counted(have, 'rank')} where the group has {want}",
            fix="draw each TP operator once, on all ranks of its TP group (expert TP group for "
            "routed experts), never one node per shard",
            nodes=[w[0] for w in wrong],
        )


@rule("TP-2")
def rule_partial_reduced(ix: DagIndex) -> Iterator[Finding]:
    """The partial output of a row-parallel operator is read only by an explicit reduction."""
    bypassed: list[tuple[str, str]] = []
    dropped: list[str] = []
    by_shape = partial_by_shape(ix)
    out, start = ix.out_csr
    targets, edge_kind, kinds = ix.dst, ix.edge_kind, ix.kind
    for i in sorted(set(compress(range(len(ix)), ix.partial)) | by_shape):
        readers = [targets[e] for e in out[start[i] : start[i + 1]] if edge_kind[e] == "data"]
        if not readers:
            dropped.append(ix.ids[i])
        for j in readers:
            if kinds[j] not in REDUCTION_KINDS and not ix.is_reduction(j):
                bypassed.append((ix.ids[i], ix.ids[j]))
    if bypassed:
        src, dst = bypassed[0]
        yield Finding(
            message=f"{len(bypassed)} partial (row-parallel) outputs are read before any reduction, "
            f"e.g. {src} -> {dst} ({ix.kind[ix.pos[dst]]})",
            fix="put an all-reduce (or a reduce-scatter under SP) node between the partial output and "
            "its readers",
            nodes=sorted({s for s, _ in bypassed}),
            edges=bypassed,
        )
    unmarked = [
        ix.ids[i]
        for i, parallel in enumerate(ix.parallel)
        if (parallel == "row" or i in by_shape) and not ix.partial[i] and len(ix.ranks[i]) > 1
    ]
    if unmarked:
        yield Finding(
            message=f"{len(unmarked)} operators on several GPUs are row-parallel (by label, or by shape: full "
            f"hidden-width output from a split contraction) but not marked partial: {sample(unmarked)}",
            fix=f"set partial=true and parallel='row' on {unmarked[0]} and reduce its output with an explicit "
            "collective",
            nodes=unmarked,
        )
    if dropped:
        yield Finding(
            message=f"{len(dropped)} partial outputs are never reduced (no data successor): "
            f"{sample(dropped)}",
            fix="reduce every partial output with an explicit collective node",
            nodes=dropped,
        )


@rule("TP-3")
def rule_tp_divides(ix: DagIndex) -> Iterator[Finding]:
    """The TP degree divides the attention heads and the FFN / expert widths."""
    yield from from_problems(ix, "TP-3")


@rule("TP-4")
def rule_norm_on_reduced(ix: DagIndex) -> Iterator[Finding]:
    """No normalization or residual add reads a partial sum, directly or through other operators."""
    sources = sorted({i for i, flag in enumerate(ix.partial) if flag} | partial_by_shape(ix))
    reached = ix.taint(sources, ix.is_reduction)
    bad = [
        (ix.ids[source], ix.ids[i]) for i, source in reached.items() if ix.kind[i] in ("norm", "elementwise")
    ]
    if bad:
        src, dst = bad[0]
        yield Finding(
            message=f"{len(bad)} normalizations or residual adds consume a partial sum before its "
            f"reduction, e.g. {dst} reads {src}",
            fix="feed norms and residual adds from the all-reduce (or reduce-scatter) output, never "
            "from the row-parallel projection",
            nodes=[dst for _, dst in bad],
            edges=bad,
        )


@rule("TP-5")
def rule_tp_group_in_node(ix: DagIndex) -> Iterator[Finding]:
    """Each TP group sits on the GPUs of one node."""
    per_node = ix.meta.gpus_per_node
    spread: dict[frozenset[int], str] = {}
    seen: set[int] = set()
    for i, ranks in enumerate(ix.ranks):
        if id(ranks) in seen or len(ranks) < 2 or ix.is_comm[i] or ix.kind[i] in ("step_boundary",):
            continue
        seen.add(id(ranks))
        if len({r // per_node for r in ranks}) > 1:
            spread.setdefault(ranks, ix.ids[i])
    if spread:
        group, example = next(iter(spread.items()))
        nodes = sorted({r // per_node for r in group})
        yield Finding(
            message=f"{len(spread)} TP groups span several nodes of {counted(per_node, 'GPU')}, e.g. {example} runs on "
            f"{counted(len(group), 'GPU')} over nodes {nodes[:8]}; their collectives cross the network",
            fix=f"keep tp (and expert tp) at most {per_node} and aligned to nodes; spread pp or dp "
            "across nodes instead",
            nodes=list(spread.values()),
        )
