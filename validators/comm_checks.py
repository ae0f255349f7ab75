"""What a collective carries, compared with what its producer made and its consumer reads (OVL-3).

Each function returns ``(node id, reason)`` pairs for the communication nodes that disagree with their
neighbours: input missing on some of their GPUs, a message size that is not the producer's output or
the consumer's input, or a format that the data moved cannot have. Sizes are compared exactly where the
graph fixes them and with one token row of slack where shards round up.
"""

from __future__ import annotations

from itertools import compress

from ..tools.contracts.common import DTYPE_BYTES
from .derived import COLLECTIVE_KINDS
from .index import DagIndex

__all__ = ["uncovered_collectives", "size_mismatches", "dtype_mismatches", "expected_dtypes"]

_REL = 1e-6


def _close(a: float, b: float, slack: float = 0.0) -> bool:
    return abs(a - b) <= slack + _REL * max(abs(a), abs(b))


def uncovered_collectives(ix: DagIndex) -> list[tuple[str, str]]:
    """Collectives some of whose GPUs receive no input from any data producer (not asked of a collapsed
    view, which draws one shard for many)."""
    found: list[tuple[str, str]] = []
    if ix.meta.collapsed:
        return found
    src, kinds, footprint = ix.src, ix.edge_kind, ix.footprint
    inn, start = ix.in_csr
    for kind in sorted(COLLECTIVE_KINDS):
        for c in ix.of_kind(kind):
            ranks = ix.ranks[c]
            producers = [footprint[src[e]] for e in inn[start[c] : start[c + 1]] if kinds[e] == "data"]
            if not producers or any(ranks <= fp for fp in producers):
                continue  # fed by nothing (other rules say so) or by one producer on all its GPUs
            missing = ranks - frozenset().union(*producers)
            if missing:
                found.append((ix.ids[c], f"no producer feeds it on ranks {sorted(missing)[:8]}"))
    return found


def _elements(shape: object) -> float | None:
    """Elements of a per-rank output from its shape (m x n), or None without one."""
    if not isinstance(shape, dict) or "m" not in shape or "n" not in shape:
        return None
    return float(shape["m"]) * float(shape["n"])


def _reduction_sizes(ix: DagIndex) -> list[tuple[str, str]]:
    """Reductions whose message is not their projection's output, or not what the residual add reads."""
    hidden = ix.meta.model.hidden_size
    fields, kinds, src, dst, edge_kind = ix.fields, ix.kind, ix.src, ix.dst, ix.edge_kind
    reduction = bytearray(len(ix))
    for kind in ("all_reduce", "reduce_scatter"):
        for c in ix.of_kind(kind):
            reduction[c] = 1
    # One pass over the edges: (producer, reduction) and (reduction, consumer) data edges.
    valid = ix.valid_edges
    flag = reduction.__getitem__
    into = [e for e in compress(valid, map(flag, map(dst.__getitem__, valid))) if edge_kind[e] == "data"]
    out_of = [e for e in compress(valid, map(flag, map(src.__getitem__, valid))) if edge_kind[e] == "data"]
    producers: dict[int, list[tuple[str, float | None]]] = {}
    for e in into:
        p = src[e]
        if kinds[p] in ("linear", "embedding"):
            producers.setdefault(dst[e], []).append((kinds[p], _elements(fields[p].get("shape"))))
    consumers: dict[int, list[float | None]] = {}
    for e in out_of:
        d = dst[e]
        if kinds[d] == "elementwise" and src[e] in producers:
            consumers.setdefault(src[e], []).append(_elements(fields[d].get("shape")))
    found = []
    verdicts: dict[tuple[object, ...], str | None] = {}  # layers repeat: judge each distinct case once
    for c, made in producers.items():
        f = fields[c]
        parts = len(ix.ranks[c]) if kinds[c] == "reduce_scatter" else 1
        key = (f.get("message_bytes"), f.get("dtype"), parts, tuple(made), tuple(consumers.get(c, ())))
        if key not in verdicts:
            verdicts[key] = _judge_reduction(
                float(f.get("message_bytes") or 0.0),
                DTYPE_BYTES.get(str(f.get("dtype")), 2.0),
                parts,
                tuple(made),
                tuple(consumers.get(c, ())),
                hidden,
            )
        why = verdicts[key]
        if why:
            found.append((ix.ids[c], why))
    return found


def _judge_reduction(
    message: float,
    width: float,
    parts: int,
    producers: tuple[tuple[str, float | None], ...],
    consumers: tuple[float | None, ...],
    hidden: int,
) -> str | None:
    for _, size in producers:
        if size is not None and not _close(size * width, message):
            return f"carries {message:.0f} B but its producer outputs {size * width:.0f} B"
    if not any(kind == "linear" for kind, _ in producers):
        return None
    for size in consumers:
        if size is not None and not _close(size * width * parts, message, slack=(parts - 1) * hidden * width):
            return f"delivers {message / parts:.0f} B per GPU but its residual add reads {size * width:.0f} B"
    return None


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
    routed_by_layer: dict[tuple[str, int, int | None], float] = {}
    for c in ix.of_kind("all_to_all"):
        if ix.purpose[c] != "ep_dispatch":
            continue
        routers = [p for p in ix.pred(c, "data") if ix.kind[p] == "router"]
        sizes = {_router_tokens(ix, r) / len(ix.ranks[r]) for r in routers}
        if len(sizes) != 1:
            continue
        copies = sizes.pop() * moe.experts_per_token * hidden
        routed_by_layer[(ix.phase[c], ix.mb[c], ix.layer[c])] = copies
        expected = copies * _bytes(ix, c)
        message = _message(ix, c)
        if not _close(expected, message):
            found.append((ix.ids[c], f"dispatches {message:.0f} B per GPU but its routers route {expected:.0f} B"))
    for c in ix.of_kind("all_to_all"):
        returned = routed_by_layer.get((ix.phase[c], ix.mb[c], ix.layer[c]))
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
    fields = ix.fields
    for i in compress(range(len(ix)), ix.is_comm):
        purpose = ix.purpose[i]
        if purpose not in allowed:
            allowed[purpose] = expected_dtypes(ix, purpose)
        dtype = fields[i].get("dtype")
        if dtype not in allowed[purpose]:
            formats = "/".join(sorted(allowed[purpose]))
            found.append((ix.ids[i], f"moves {dtype} where the {purpose} tensor is {formats}"))
    return found
