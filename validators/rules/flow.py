"""Data-flow rules (14-data-flow-and-state.md): layer l+1 reads the whole, reduced output of layer l, and
layers follow in model order; under SP and attention DP the MoE combine returns every unit's tokens.

The check behind FLOW-1 and EP-5 is one pass in topological order: each node of a layer carries a bit
mask of the layer's collectives it depends on (through data and pipeline edges), and every node that
hands a tensor to another layer must carry the bits of all the layer's collectives on its GPUs.

Why not a graph library: on the 110k-node benchmark DAG, building a networkx DiGraph alone takes about
0.6 s (the whole validation budget is under 1 s) and ``nx.ancestors`` of one node another 0.6 s;
rustworkx builds the same graph in about 12 ms and sorts it in 4 ms, but answering "which collectives
of its layer does each exit depend on" with it still needs one ancestor query per exit. The bit-mask
pass reuses the index's topological order and adjacency arrays and stays linear in nodes plus edges.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from shardplan.text import counted
from shardplan.validators.derived import COLLECTIVE_KINDS, memo
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, rule, sample

__all__ = ["LayerExit", "layer_exits", "rule_layer_output_complete", "rule_layers_in_order", "rule_combine_returns"]

_FLOW = ("data", "pipeline")


@dataclass(frozen=True)
class LayerExit:
    """A node that hands a tensor to another layer, and the collectives of its layer it skips."""

    node: int
    missing: tuple[int, ...]


def _layer_keys(ix: DagIndex) -> tuple[dict[tuple[str, int, int | None], int], list[int]]:
    keys = list(zip(ix.phase, ix.mb, ix.layer, strict=True))
    key_ids = {key: j for j, key in enumerate(dict.fromkeys(keys))}
    return key_ids, list(map(key_ids.__getitem__, keys))


def layer_keys(ix: DagIndex) -> tuple[dict[tuple[str, int, int | None], int], list[int]]:
    """Each ``(phase, microbatch, layer)`` drawn, numbered, and the number of every node's own."""
    return memo(ix, "layer_keys", _layer_keys)


def _layer_exits(ix: DagIndex) -> list[LayerExit]:
    n = len(ix)
    order = ix.topological_order
    if len(order) != n:
        return []  # DAG-1 reports the cycle; the flow of a cyclic graph is undefined
    key_ids, key_of = layer_keys(ix)
    outside = {j for key, j in key_ids.items() if key[2] is None}  # embedding, head, boundaries
    bit = [0] * n
    members: list[list[int]] = [[] for _ in key_ids]
    by_footprint: dict[tuple[int, frozenset[int]], int] = {}  # a layer's collectives repeat per GPU set
    footprint = ix.footprint
    for kind in COLLECTIVE_KINDS:
        for c in ix.of_kind(kind):
            k = key_of[c]
            if k in outside:
                continue
            bit[c] = 1 << len(members[k])
            members[k].append(c)
            group = (k, footprint[c])
            by_footprint[group] = by_footprint.get(group, 0) | bit[c]
    rank_bits: list[dict[int, int]] = [{} for _ in key_ids]
    for (k, ranks), bits in by_footprint.items():
        table = rank_bits[k]
        for r in ranks:
            table[r] = table.get(r, 0) | bits
    # Propagate along the data and pipeline edges inside each layer, taken in the topological order of their
    # targets: every edge into a node then comes before every edge out of it, so one flat pass suffices.
    src, dst, edge_kind = ix.src, ix.dst, ix.edge_kind
    inn, start = ix.in_csr
    mask = list(bit)
    for e in [e for i in order for e in inn[start[i] : start[i + 1]]]:
        s, d = src[e], dst[e]
        if key_of[s] == key_of[d] and edge_kind[e] in _FLOW:
            mask[d] |= mask[s]
    exits: dict[int, LayerExit] = {}
    needed: dict[tuple[int, frozenset[int]], int] = {}
    for e in ix.crossing["layer"]:
        s = ix.src[e]
        k = key_of[s]
        if k in outside or s in exits or ix.edge_kind[e] not in _FLOW:
            continue
        group = (k, footprint[s])
        required = needed.get(group)
        if required is None:
            table = rank_bits[k]
            required = 0
            for r in footprint[s]:
                required |= table.get(r, 0)
            needed[group] = required
        missing = required & ~mask[s]
        if missing:
            exits[s] = LayerExit(s, tuple(c for c in members[k] if bit[c] & missing))
    return list(exits.values())


def layer_exits(ix: DagIndex) -> list[LayerExit]:
    """Nodes that hand a tensor to another layer without depending on every collective of their own
    layer on their GPUs (empty for a sound graph, and for a cyclic one, which DAG-1 reports)."""
    return memo(ix, "layer_exits", _layer_exits)


@rule("FLOW-1", full_graph=True)
def rule_layer_output_complete(ix: DagIndex) -> Iterator[Finding]:
    """What leaves a layer depends on all of that layer's collectives on its GPUs."""
    broken = layer_exits(ix)
    if not broken:
        return
    first = broken[0]
    skipped = [ix.ids[c] for c in first.missing]
    readers = [ix.ids[j] for j in ix.succ(first.node) if ix.layer[j] != ix.layer[first.node]]
    yield Finding(
        message=f"{len(broken)} tensors leave their layer before the layer's reductions completed, e.g. "
        f"{ix.ids[first.node]} (layer {ix.layer[first.node]}) feeds {sample(readers, 2)} without depending "
        f"on {sample(skipped, 2)}",
        fix=f"feed {sample(readers, 2)} from the layer's final residual add, which must read "
        f"{sample(skipped, 2)}; the next layer starts from the complete, reduced output",
        nodes=[ix.ids[x.node] for x in broken],
    )


@rule("FLOW-2", full_graph=True)
def rule_layers_in_order(ix: DagIndex) -> Iterator[Finding]:
    """Each layer reads from the previous layer only and hands its output to the next."""
    last = ix.meta.model.num_layers - 1
    jumps: list[tuple[str, str]] = []
    handed: set[tuple[str, int, int]] = set()
    for e in ix.crossing["layer"]:
        if ix.edge_kind[e] not in ("data", "pipeline"):
            continue
        s, d = ix.src[e], ix.dst[e]
        a, b = ix.layer[s], ix.layer[d]
        if a is None:
            ok = b == 0
        elif b is None:
            ok = a == last
        else:
            ok = b == a + 1
        if ok and a is not None:
            handed.add((ix.phase[s], ix.mb[s], a))
        elif not ok:
            jumps.append(ix.edge_ids(e))
    if jumps:
        first, then = jumps[0]
        yield Finding(
            message=f"{len(jumps)} data edges skip or reverse the layer order, e.g. {first} (layer "
            f"{ix.layer[ix.pos[first]]}) -> {then} (layer {ix.layer[ix.pos[then]]})",
            fix=f"feed {then} from the output of the layer just before it; every layer reads layer l-1 and "
            "feeds layer l+1",
            edges=jumps,
        )
    drawn = {key for key in layer_keys(ix)[0] if key[2] is not None and key[0] in ("prefill", "decode")}
    unused = sorted(drawn - handed)
    if unused:
        where = [f"{phase}/mb{mb}/L{layer}" for phase, mb, layer in unused]
        yield Finding(
            message=f"{counted(len(unused), 'layer')} hand their output to no later layer or LM head: {sample(where)}",
            fix=f"feed the next layer (or the LM head after layer {last}) from the final residual add of "
            f"{where[0]}",
            nodes=where,
        )


@rule("EP-5", full_graph=True)
def rule_combine_returns(ix: DagIndex) -> Iterator[Finding]:
    """Every unit's FFN output depends on the MoE combine that returns its tokens."""
    lost = [
        (x.node, c)
        for x in layer_exits(ix)
        for c in x.missing
        if ix.purpose[c] in ("ep_combine", "adp_scatter")
    ]
    if lost:
        node, combine = lost[0]
        yield Finding(
            message=f"{len(lost)} units finish an MoE layer without receiving their tokens back from the "
            f"combine, e.g. {ix.ids[node]} does not depend on {ix.ids[combine]}",
            fix=f"add a data edge from {ix.ids[combine]} to the FFN residual add that {ix.ids[node]} "
            "depends on, for every sequence shard and attention group",
            nodes=sorted({ix.ids[n] for n, _ in lost}),
        )
