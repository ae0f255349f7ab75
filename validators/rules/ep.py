"""Expert-parallel rules (04-expert-parallelism.md): routing, dispatch, experts, combine as explicit
nodes; all-to-all inside one stage; EP only on MoE models with a degree dividing the experts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from shardplan.text import counted
from shardplan.validators.index import PHASES, DagIndex
from shardplan.validators.registry import Finding, from_problems, rule, sample

__all__ = ["rule_moe_layer_shape", "rule_ep_inside_stage", "rule_ep_divides", "rule_router_not_tp_split"]


@dataclass
class _MoELayer:
    """The EP nodes of one MoE layer of one microbatch."""

    routers: list[int] = field(default_factory=list)
    dispatch: set[int] = field(default_factory=set)
    combine: set[int] = field(default_factory=set)
    experts: list[int] = field(default_factory=list)


def _moe_layers(ix: DagIndex, phase: str) -> dict[tuple[int, int], _MoELayer]:
    """Per ``(microbatch, layer)`` of a phase, its MoE nodes; every drawn MoE layer has an entry."""
    model = ix.meta.model
    layers: dict[tuple[int, int], _MoELayer] = {}
    for i in ix.of_kind("attention"):
        layer = ix.layer[i]
        if ix.phase[i] == phase and layer is not None and model.is_moe_layer(layer):
            layers.setdefault((ix.mb[i], layer), _MoELayer())
    for kind in ("router", "all_to_all", "expert"):
        for i in ix.of_kind(kind):
            layer = ix.layer[i]
            if ix.phase[i] != phase or layer is None:
                continue
            entry = layers.setdefault((ix.mb[i], layer), _MoELayer())
            purpose = ix.purpose[i]
            if kind == "router":
                entry.routers.append(i)
            elif purpose == "ep_dispatch":
                entry.dispatch.add(i)
            elif purpose == "ep_combine":
                entry.combine.add(i)
            elif kind == "expert" and ix.is_routed_expert(i):
                entry.experts.append(i)
    return layers


def _reaches_combine(ix: DagIndex, expert: int, combine: set[int]) -> bool:
    """Whether an expert's output enters the combine, directly or through communication only (its
    expert-TP reduction, however that is drawn: an all-reduce, or a reduce-scatter and an all-gather)."""
    stack, seen = [expert], {expert}
    while stack:
        for j in ix.succ(stack.pop(), "data"):
            if j in combine:
                return True
            if ix.is_comm[j] and j not in seen:
                seen.add(j)
                stack.append(j)
    return False


def _layer_problems(ix: DagIndex, entry: _MoELayer, ep: int) -> list[str]:
    problems = []
    if not entry.dispatch:
        problems.append("no dispatch all-to-all")
    elif any(ix.kind[i] != "all_to_all" for i in entry.dispatch):
        problems.append("a dispatch that is not an all-to-all")
    if not entry.combine:
        problems.append("no combine all-to-all")
    if not entry.routers:
        problems.append("no router")
    elif entry.dispatch and any(
        not any(j in entry.dispatch for j in ix.succ(r, "data")) for r in entry.routers
    ):
        problems.append("a router that does not feed the dispatch")
    if len(entry.experts) != ep or len({ix.attr(i, "shard") for i in entry.experts}) != len(entry.experts):
        problems.append(f"{len(entry.experts)} expert nodes for ep={ep} expert ranks")
    if entry.dispatch and any(
        not any(p in entry.dispatch for p in ix.pred(x, "data")) for x in entry.experts
    ):
        problems.append("experts not fed by the dispatch")
    if entry.combine and any(not _reaches_combine(ix, x, entry.combine) for x in entry.experts):
        problems.append("experts whose output skips the combine")
    return problems


@rule("EP-1", full_graph=True)
def rule_moe_layer_shape(ix: DagIndex) -> Iterator[Finding]:
    """An MoE layer under EP is router, dispatch all-to-all, one node per expert rank, combine all-to-all."""
    if ix.meta.model.moe is None:
        return
    broken: dict[str, list[str]] = {}
    for phase in PHASES:
        strategy = ix.phase_strategy(phase)
        if strategy is None or strategy.ep < 2:
            continue
        for (mb, layer), entry in sorted(_moe_layers(ix, phase).items()):
            for problem in _layer_problems(ix, entry, strategy.ep):
                broken.setdefault(problem, []).append(f"{phase}/mb{mb}/L{layer}")
    for problem, where in broken.items():
        yield Finding(
            message=f"{len(where)} MoE layers under EP have {problem}: {sample(where)}",
            fix="model each MoE layer as router -> all_to_all (ep_dispatch) -> one expert node per "
            "expert rank -> all_to_all (ep_combine)",
            nodes=where,
        )


@rule("EP-2", full_graph=True)
def rule_ep_inside_stage(ix: DagIndex) -> Iterator[Finding]:
    """Expert all-to-all traffic stays inside the pipeline stage of its layer."""
    outside = [
        i for i in ix.of_kind("all_to_all") if ix.purpose[i] in ("ep_dispatch", "ep_combine") and ix.beyond_stage(i)
    ]
    if outside:
        first = outside[0]
        yield Finding(
            message=f"{len(outside)} EP all-to-all nodes reach GPUs outside their pipeline stage, e.g. "
            f"{ix.ids[first]} (stage {ix.stage[first]}) includes ranks {ix.beyond_stage(first)[:8]}",
            fix="dispatch and combine among the GPUs of the stage that holds the MoE layer only",
            nodes=[ix.ids[i] for i in outside],
        )


@rule("EP-3")
def rule_ep_divides(ix: DagIndex) -> Iterator[Finding]:
    """EP is used only on MoE models, with a degree that divides the routed experts."""
    yield from from_problems(ix, "EP-3")


@rule("EP-4")
def rule_router_not_tp_split(ix: DagIndex) -> Iterator[Finding]:
    """Routing is not split by TP; expert TP acts inside the experts."""
    experts = ix.meta.model.moe.num_experts if ix.meta.model.moe else None
    split = [ix.ids[i] for i in ix.of_kind("router") if ix.parallel[i] not in ("replicated", "none")]
    narrow = []
    for i in ix.of_kind("router"):
        shape = ix.attr(i, "shape")
        width = shape.get("n") if isinstance(shape, dict) else None
        if experts is not None and width is not None and width != experts:
            narrow.append((ix.ids[i], width))
    if narrow:
        yield Finding(
            message=f"{len(narrow)} routers score a slice of the experts, e.g. {narrow[0][0]} outputs "
            f"{narrow[0][1]} scores of {counted(experts, 'expert')} on each GPU: top-k over a slice is not top-k",
            fix=f"give {narrow[0][0]} the full router weight on every rank of its group (shape n={experts}); "
            "split only the experts",
            nodes=[name for name, _ in narrow],
        )
    if split:
        yield Finding(
            message=f"{len(split)} router nodes are tensor-split: {sample(split)}",
            fix="run the router replicated on its TP group (parallel='replicated'); split the experts",
            nodes=split,
        )
