"""Pipeline rules (03-pipeline-parallelism.md): contiguous stages in layer order, forward-only pipeline
edges, explicit send/recv at every stage boundary, no more stages than layers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from shardplan.text import counted
from shardplan.validators.index import PHASES, DagIndex
from shardplan.validators.registry import Finding, from_problems, rule, sample

__all__ = [
    "rule_stages_contiguous",
    "rule_pipeline_forward",
    "rule_stage_boundary_send_recv",
    "rule_pp_le_layers",
]


def _stage_table_findings(ix: DagIndex) -> Iterator[Finding]:
    """``meta.stage_layers``: per phase, pp stages of consecutive layers covering the model once."""
    layers = ix.meta.model.num_layers
    for phase in PHASES:
        strategy = ix.phase_strategy(phase)
        stages = ix.meta.stage_layers.get(phase)
        if strategy is None or stages is None:
            yield Finding(
                message=f"meta.stage_layers has no entry for {phase}",
                fix=f"list the layers of each {phase} stage in meta.stage_layers",
            )
            continue
        if len(stages) != strategy.pp:
            yield Finding(
                message=f"{phase}: meta.stage_layers has {counted(len(stages), 'stage')} but pp={strategy.pp}",
                fix="give one layer list per pipeline stage",
            )
        broken = [
            s
            for s, held in enumerate(stages)
            if not held or held != list(range(held[0], held[0] + len(held)))
        ]
        if broken:
            yield Finding(
                message=f"{phase}: stages {broken[:8]} hold no layers or non-consecutive layers "
                f"(stage {broken[0]}: {stages[broken[0]][:8]})",
                fix="give each stage a non-empty run of consecutive layers",
            )
        flat = [layer for held in stages for layer in held]
        if not ix.meta.collapsed and flat != list(range(layers)):
            counts = Counter(flat)
            twice = sorted(layer for layer, count in counts.items() if count > 1)
            missing = sorted(set(range(layers)) - set(counts))
            yield Finding(
                message=f"{phase}: the stages do not cover layers 0..{layers - 1} once in order "
                f"(missing {missing[:8]}, repeated {twice[:8]})",
                fix="split the layers into consecutive runs, stage 0 first, each layer once",
            )


def _expected_stage(
    ix: DagIndex, phase: str, layer: int | None, kind: str, hop: bool, stage: int
) -> int | None:
    """The stage a node must run on (-1 when no stage holds its layer), or None when unconstrained."""
    strategy = ix.phase_strategy(phase)
    if strategy is None or kind == "step_boundary":
        return None
    if kind == "draft":
        return strategy.pp - 1
    if layer is None:
        return 0 if kind == "embedding" else strategy.pp - 1 if kind == "sampler" else None
    expected = ix.layer_stage.get(phase, {}).get(layer)
    if expected is None:
        return -1
    # A receive carries the last layer of the previous stage into the next one.
    return expected + 1 if kind == "recv" and hop else expected


def _layer_goes_back(ix: DagIndex, s: int, d: int) -> bool:
    ls, ld = ix.layer[s], ix.layer[d]
    return ls is not None and ld is not None and ld < ls and ix.phase[s] == ix.phase[d]


@rule("PP-1")
def rule_stages_contiguous(ix: DagIndex) -> Iterator[Finding]:
    """Stages own contiguous layer ranges in model order, and every node runs on its layer's stage."""
    yield from _stage_table_findings(ix)
    yield from from_problems(ix, "PP-1")
    hops = [purpose == "pp_activation" for purpose in ix.purpose]
    # A speculative drafter runs on the last stage, its own embedding and head included (SPEC-1).
    drafting = [ix.attr(i, "draft_pass") is not None for i in range(len(ix))]
    kinds = ["draft" if draft else kind for kind, draft in zip(ix.kind, drafting, strict=True)]
    keys = list(zip(ix.phase, ix.layer, kinds, hops, ix.stage, strict=True))
    verdicts = {key: _expected_stage(ix, *key) for key in set(keys)}
    wrong = {
        key: expected for key, expected in verdicts.items() if expected is not None and expected != key[4]
    }
    if wrong:
        misplaced = [i for i, key in enumerate(keys) if key in wrong]
        first = misplaced[0]
        expected = wrong[keys[first]]
        what = "no stage holds its layer" if expected < 0 else f"its layer belongs to stage {expected}"
        yield Finding(
            message=f"{counted(len(misplaced), 'node')} run on a stage that does not hold their layer: "
            f"{ix.ids[first]} is on stage {ix.stage[first]}, {what}",
            fix="give every node the stage that meta.stage_layers assigns to its layer (embedding on "
            f"stage 0, sampler on the last; layers 0..{ix.meta.model.num_layers - 1})",
            nodes=[ix.ids[i] for i in misplaced],
        )
    backwards = [
        ix.edge_ids(e)
        for e in ix.crossing["layer"]
        if _layer_goes_back(ix, ix.src[e], ix.dst[e]) and ix.edge_kind[e] == "data"
    ]
    if backwards:
        a, b = backwards[0]
        yield Finding(
            message=f"{len(backwards)} data edges go from a later layer to an earlier one, e.g. {a} -> {b}",
            fix="layer l may only read outputs of layers up to l",
            edges=backwards,
        )


@rule("PP-2")
def rule_pipeline_forward(ix: DagIndex) -> Iterator[Finding]:
    """Pipeline edges go from stage s to s+1 only; no edge points back to an earlier stage."""
    skipping = [
        ix.edge_ids(e)
        for e in ix.crossing["pipeline"]
        if ix.phase[ix.src[e]] != ix.phase[ix.dst[e]] or ix.stage[ix.dst[e]] != ix.stage[ix.src[e]] + 1
    ]
    backward = []
    for e in ix.crossing["stage"]:
        s, d = ix.src[e], ix.dst[e]
        if (
            ix.edge_kind[e] != "pipeline"
            and ix.phase[s] == ix.phase[d]
            and ix.stage[d] < ix.stage[s]
            and not ix.is_boundary(s)
            and not ix.is_boundary(d)
        ):
            backward.append(ix.edge_ids(e))
    if skipping:
        a, b = skipping[0]
        yield Finding(
            message=f"{len(skipping)} pipeline edges do not go from stage s to stage s+1 of the same phase, "
            f"e.g. {a} (stage {ix.stage[ix.pos[a]]}) -> {b} (stage {ix.stage[ix.pos[b]]})",
            fix="point pipeline edges forward, from a stage's send to the next stage's recv",
            edges=skipping,
        )
    if backward:
        a, b = backward[0]
        yield Finding(
            message=f"{counted(len(backward), 'edge')} point back to an earlier stage, e.g. {a} "
            f"(stage {ix.stage[ix.pos[a]]}) -> {b} (stage {ix.stage[ix.pos[b]]})",
            fix="stages run in order within a step: remove edges from stage s to stages before s",
            edges=backward,
        )


@rule("PP-3")
def rule_stage_boundary_send_recv(ix: DagIndex) -> Iterator[Finding]:
    """Every stage boundary moves its activations through explicit send and recv nodes."""
    hops: set[tuple[str, int, int]] = set()
    not_p2p = []
    for e in ix.crossing["pipeline"]:
        s, d = ix.src[e], ix.dst[e]
        if ix.kind[s] == "send" and ix.kind[d] == "recv":
            hops.add((ix.phase[s], ix.mb[s], ix.stage[s]))
        else:
            not_p2p.append(ix.edge_ids(e))
    crossing = [
        ix.edge_ids(e)
        for e in ix.crossing["stage"]
        if ix.edge_kind[e] == "data" and ix.phase[ix.src[e]] == ix.phase[ix.dst[e]]
    ]
    if crossing:
        a, b = crossing[0]
        yield Finding(
            message=f"{len(crossing)} data edges cross a stage boundary without send/recv, e.g. {a} "
            f"(stage {ix.stage[ix.pos[a]]}) -> {b} (stage {ix.stage[ix.pos[b]]})",
            fix="end the stage with a send node, start the next with a recv node, join them by a "
            "pipeline edge",
            edges=crossing,
        )
    if not_p2p:
        yield Finding(
            message=f"{len(not_p2p)} pipeline edges do not join a send to a recv: "
            f"{sample([f'{a} -> {b}' for a, b in not_p2p])}",
            fix="use pipeline edges only from a send node to its recv node",
            edges=not_p2p,
        )
    missing = []
    for phase in PHASES:
        strategy = ix.phase_strategy(phase)
        if strategy is None or strategy.pp < 2:
            continue
        missing += [
            f"{phase} microbatch {mb}, stage {s} -> {s + 1}"
            for mb in ix.microbatches.get(phase, [])
            for s in range(strategy.pp - 1)
            if (phase, mb, s) not in hops
        ]
    if missing:
        yield Finding(
            message=f"{len(missing)} stage boundaries have no send -> recv pipeline edge: {sample(missing)}",
            fix="add a send at the end of each stage and a recv at the start of the next, per microbatch",
        )


@rule("PP-4")
def rule_pp_le_layers(ix: DagIndex) -> Iterator[Finding]:
    """The pipeline degree does not exceed the number of layers."""
    yield from from_problems(ix, "PP-4")
