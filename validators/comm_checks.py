"""What a collective carries, compared with what its producer made and its consumer reads (OVL-3).

Each function returns ``(node id, reason)`` pairs for the communication nodes that disagree with their
neighbours: input missing on some of their GPUs, a message size that is not the producer's output or
the consumer's input, or a format that the data moved cannot have. Sizes are compared exactly where the
graph fixes them and with one token row of slack where shards round up.
"""

from __future__ import annotations

from itertools import compress
from operator import itemgetter

from shardplan.contracts.common import DTYPE_BYTES
from shardplan.validators.derived import COLLECTIVE_KINDS, bulk_get, gemm_shapes
from shardplan.validators.index import DagIndex

__all__ = [
    "uncovered_collectives",
    "size_mismatches",
    "dtype_mismatches",
    "expected_dtypes",
    "edges_between",
    "members",
]

_REL = 1e-6


def _close(a: float, b: float, slack: float = 0.0) -> bool:
    return abs(a - b) <= slack + _REL * max(abs(a), abs(b))


def uncovered_collectives(ix: DagIndex) -> list[tuple[str, str]]:
    """Collectives some of whose GPUs receive no input from any data producer (not asked of a collapsed
    view, which draws one shard for many)."""
    found: list[tuple[str, str]] = []
    if ix.meta.collapsed:
        return found
    everything = bytearray(b"\x01") * len(ix)
    producers, fed = edges_between(ix, everything, members(ix, tuple(sorted(COLLECTIVE_KINDS))))
    ranks, footprint = ix.ranks, ix.footprint
    # Usually one producer holds the input on every GPU of the collective: settle those in bulk.
    held_whole = map(frozenset.issubset, map(ranks.__getitem__, fed), map(footprint.__getitem__, producers))
    whole = set(compress(fed, held_whole))
    held: dict[int, set[int]] = {}
    for p, c in zip(producers, fed, strict=True):
        if c not in whole:
            held.setdefault(c, set()).update(footprint[p])
    for c, have in held.items():
        missing = ranks[c] - have
        if missing:
            found.append((ix.ids[c], f"no producer feeds it on ranks {sorted(missing)[:8]}"))
    return found


def edges_between(ix: DagIndex, sources: bytearray, targets: list[int]) -> tuple[list[int], list[int]]:
    """The data edges from a node flagged in ``sources`` into a node of ``targets``, as (sources, targets)."""
    inn, start = ix.in_csr
    src, edge_kind = ix.src, ix.edge_kind
    chosen = [
        (src[e], t)
        for t in targets
        for e in inn[start[t] : start[t + 1]]
        if sources[src[e]] and edge_kind[e] == "data"
    ]
    return [p for p, _ in chosen], [t for _, t in chosen]


def members(ix: DagIndex, kinds: tuple[str, ...]) -> list[int]:
    """Nodes of the given kinds."""
    return [i for kind in kinds for i in ix.of_kind(kind)]


def _flags(ix: DagIndex, kinds: tuple[str, ...]) -> bytearray:
    flags = bytearray(len(ix))
    for kind in kinds:
        for i in ix.of_kind(kind):
            flags[i] = 1
    return flags


def _shape_sizes(ix: DagIndex, nodes: list[int]) -> list[tuple[object, object]]:
    """Each compute node's output shape as (m, n), read in bulk (None where absent)."""
    return bulk_get(list(map(_SHAPE, map(ix.fields.__getitem__, nodes))), ("m", "n"))  # type: ignore[return-value]


_SHAPE = itemgetter("shape")


def _reduction_sizes(ix: DagIndex) -> list[tuple[str, str]]:
    """Reductions whose message is not their projection's output, or not what the residual add reads.

    The columns are read in bulk and each distinct (message, format, shape) case judged once: layers,
    microbatches and units repeat the same few cases thousands of times.
    """
    hidden = ix.meta.model.hidden_size
    gemms = _flags(ix, ("linear", "embedding"))
    makers, reduced = edges_between(ix, gemms, members(ix, ("all_reduce", "reduce_scatter")))
    shapes = gemm_shapes(ix)
    wire = ix.wire
    rows = [(wire[c], shapes[p][:2]) for c, p in zip(reduced, makers, strict=True)]
    bad = {row for row in set(rows) if _judge_made(row)}
    found = [(ix.ids[c], _judge_made(row) or "") for c, row in zip(reduced, rows, strict=True) if row in bad]
    # The residual add after a projection's reduction reads exactly what the reduction delivers.
    after_projection = bytearray(len(ix))
    for c, p in zip(reduced, makers, strict=True):
        if ix.kind[p] == "linear":
            after_projection[c] = 1
    delivered, readers = edges_between(ix, after_projection, ix.of_kind("elementwise"))
    rows_read = list(
        zip(
            map(wire.__getitem__, delivered),
            [len(ix.ranks[c]) if ix.kind[c] == "reduce_scatter" else 1 for c in delivered],
            _shape_sizes(ix, readers),
            strict=True,
        )
    )
    bad_read = {row for row in set(rows_read) if _judge_read(row, hidden)}
    found += [
        (ix.ids[c], _judge_read(row, hidden) or "")
        for c, row in zip(delivered, rows_read, strict=True)
        if row in bad_read
    ]
    return found


def _judge_made(row: tuple[tuple[object, object], tuple[object, object]]) -> str | None:
    (message, dtype), (m, n) = row
    if not isinstance(m, int | float) or not isinstance(n, int | float):
        return None
    made = float(m) * float(n) * DTYPE_BYTES.get(str(dtype), 2.0)
    sent = float(str(message or 0.0))
    return None if _close(made, sent) else f"carries {sent:.0f} B but its producer outputs {made:.0f} B"


def _judge_read(row: tuple[tuple[object, object], int, tuple[object, object]], hidden: int) -> str | None:
    (message, dtype), parts, (m, n) = row
    if not isinstance(m, int | float) or not isinstance(n, int | float):
        return None
    width = DTYPE_BYTES.get(str(dtype), 2.0)
    read = float(m) * float(n) * width
    sent = float(str(message or 0.0))
    if _close(read * parts, sent, slack=(parts - 1) * hidden * width):
        return None
    return f"delivers {sent / parts:.0f} B per GPU but its residual add reads {read:.0f} B"


def _router_tokens(ix: DagIndex, router: int) -> float:
    """Tokens a router scores (its GEMM's m)."""
    shape = ix.attr(router, "shape")
    return float(shape.get("m", 0)) if isinstance(shape, dict) else 0.0


def _all_to_all_sizes(ix: DagIndex) -> list[tuple[str, str]]:
    """Dispatches whose message is not the routed copies of their routers' tokens, and combines that
    bring back another amount than their layer's dispatch sent."""
    found: list[tuple[str, str]] = []
    moe = ix.meta.model.moe
    if moe is None:
        return found
    hidden = ix.meta.model.hidden_size
    # Keyed by layer and, for a speculative drafter's nodes (outside the layers), by draft pass.
    routed_by_layer: dict[tuple[str, int, int | None, object], float] = {}
    for c in ix.of_kind("all_to_all"):
        if ix.purpose[c] != "ep_dispatch":
            continue
        # A router on no ranks (a hand-edited DAG) routes nothing this check can size; other rules name it.
        routers = [p for p in ix.pred(c, "data") if ix.kind[p] == "router" and ix.ranks[p]]
        sizes = {_router_tokens(ix, r) / len(ix.ranks[r]) for r in routers}
        if len(sizes) != 1:
            continue
        copies = sizes.pop() * moe.experts_per_token * hidden
        routed_by_layer[(ix.phase[c], ix.mb[c], ix.layer[c], ix.attr(c, "draft_pass"))] = copies
        expected = copies * _bytes(ix, c)
        message = _message(ix, c)
        if not _close(expected, message):
            found.append((ix.ids[c], f"dispatches {message:.0f} B per GPU but its routers route {expected:.0f} B"))
    for c in ix.of_kind("all_to_all"):
        returned = routed_by_layer.get((ix.phase[c], ix.mb[c], ix.layer[c], ix.attr(c, "draft_pass")))
        if ix.purpose[c] != "ep_combine" or returned is None:
            continue
        expected = returned * _bytes(ix, c)
        message = _message(ix, c)
        if not _close(expected, message):
            found.append(
                (ix.ids[c], f"combines {message:.0f} B per GPU but the dispatch sent {expected:.0f} B of copies")
            )
    return found


def _message(ix: DagIndex, i: int) -> float:
    return float(str(ix.attr(i, "message_bytes") or 0.0))


def _bytes(ix: DagIndex, i: int) -> float:
    return DTYPE_BYTES.get(str(ix.attr(i, "dtype")), 2.0)


def size_mismatches(ix: DagIndex) -> list[tuple[str, str]]:
    """Collectives whose message size disagrees with their producer or consumer (see the helpers)."""
    return _reduction_sizes(ix) + _all_to_all_sizes(ix)


def expected_dtypes(ix: DagIndex, purpose: str | None) -> set[str]:
    """Formats a communication of ``purpose`` may carry for the DAG's model."""
    model = ix.meta.model
    if purpose in ("sp_kv_gather", "kv_transfer"):
        return {model.kv_dtype}
    if purpose == "vocab_gather":
        return {"fp32", model.activation_dtype}
    if purpose == "ep_dispatch":
        return {model.activation_dtype, "fp8"} if "fp8" in (model.weight_dtype, model.expert_dtype) else {
            model.activation_dtype
        }
    return {model.activation_dtype}


def dtype_mismatches(ix: DagIndex) -> list[tuple[str, str]]:
    """Communication nodes whose format is not the one the tensor they move has."""
    found = []
    allowed: dict[str | None, set[str]] = {}
    purposes = ix.purpose
    for i, (_, dtype) in ix.wire.items():
        purpose = purposes[i]
        if purpose not in allowed:
            allowed[purpose] = expected_dtypes(ix, purpose)
        if dtype not in allowed[purpose]:
            formats = "/".join(sorted(allowed[purpose]))
            found.append((ix.ids[i], f"moves {dtype} where the {purpose} tensor is {formats}"))
    return found
