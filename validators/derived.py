"""Facts about nodes derived from the graph (shapes, producers, ranks) rather than read from their labels.

The rules use these where a label could lie: a row-parallel projection relabelled as column-parallel
still has the output width and contraction of a partial sum; an attention relabelled as a linear still
consumes K/V; a decode attention split by sequence still reads less than the cached context. Each
function is a pure function of a :class:`~shardplan.validators.index.DagIndex`, linear in nodes plus
edges, and memoised on the index because several rules share it.

>>> from shardplan.tools.catalogs.models import load_model
>>> from shardplan.tools.catalogs.gpus import make_cluster
>>> from shardplan.contracts.strategy import parse_strategy
>>> from shardplan.contracts.workload import Workload
>>> from shardplan.tools.builder.build import build_dag
>>> dag = build_dag(load_model("llama-3.1-8b"), make_cluster("H100", 2), parse_strategy("tp=2"),
...                 Workload(isl=64, osl=8, batch=2))
>>> ix = DagIndex(dag)
>>> sorted({ix.attr(i, "op") for i in partial_by_shape(ix)})
['down_proj', 'o_proj']
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from operator import itemgetter
from typing import TypeVar, cast

from shardplan.validators.index import DagIndex

__all__ = [
    "memo",
    "partial_by_shape",
    "kv_producers",
    "kv_consumers",
    "min_context",
    "covering_ranks",
    "split_widths",
    "gemm_shapes",
    "bulk_get",
    "kv_states",
    "attention_shapes",
    "COLLECTIVE_KINDS",
]

T = TypeVar("T")

COLLECTIVE_KINDS: frozenset[str] = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})
"""Communication nodes that every rank of ``ranks`` feeds (send, recv and KV transfer are point-to-point)."""

_GEMM_KINDS = ("linear", "expert")


def memo(ix: DagIndex, key: str, compute: Callable[[DagIndex], T]) -> T:
    """``compute(ix)``, computed once per index and shared by the rules that need it."""
    store = ix.memo
    if key not in store:
        store[key] = compute(ix)
    return cast(T, store[key])


def split_widths(ix: DagIndex) -> set[int]:
    """The model's widths a row-parallel projection contracts over: the attention output (heads x value
    width), the FFN, expert and shared-expert intermediates."""
    model = ix.meta.model
    value_width = model.mla.v_head_dim if model.mla else model.head_dim
    widths = {model.num_attention_heads * value_width, model.intermediate_size}
    if model.moe is not None:
        widths.add(model.moe.expert_intermediate_size)
        widths.add(model.moe.num_shared_experts * model.moe.shared_expert_intermediate_size)
    return widths


def bulk_get(shapes: list[dict[str, object]], keys: tuple[str, ...]) -> list[tuple[object, ...]]:
    """``keys`` of every dict in ``shapes`` (None where absent): in C when every dict has them all."""
    try:
        return list(map(itemgetter(*keys), shapes))
    except KeyError:
        return [tuple(shape.get(key) for key in keys) for shape in shapes]


def _gemm_shapes(ix: DagIndex) -> dict[int, tuple[object, object, object]]:
    found: dict[int, tuple[object, object, object]] = {}
    for kind in (*_GEMM_KINDS, "embedding"):
        members = ix.of_kind(kind)
        shapes = list(map(_SHAPE, map(ix.fields.__getitem__, members)))
        found.update(zip(members, bulk_get(shapes, ("m", "n", "k")), strict=True))  # type: ignore[arg-type]
    return found


def gemm_shapes(ix: DagIndex) -> dict[int, tuple[object, object, object]]:
    """Per linear, expert and embedding node, its per-rank GEMM shape ``(m, n, k)`` (None where absent),
    read once: touching a hundred thousand node records is the slow part of a large validation."""
    return memo(ix, "gemm_shapes", _gemm_shapes)


def _partial_by_shape(ix: DagIndex) -> set[int]:
    hidden = ix.meta.model.hidden_size
    widths = split_widths(ix)
    ranks, kinds, src = ix.ranks, ix.kind, ix.src
    inn, start = ix.in_csr
    found = set()
    for i, (_, n, k) in gemm_shapes(ix).items():
        if n == hidden and kinds[i] in _GEMM_KINDS and len(ranks[i]) > 1:
            if not isinstance(k, int) or k <= 0:
                continue
            if ix.parallel[i] == "replicated" and k % hidden == 0 and k > hidden:
                continue  # a whole projection over full-width tensors side by side (a drafter's fusing projection)
            # k equal to the hidden width is ambiguous (a Q projection and an o_proj can look alike): then
            # the producer decides, since only attention hands a GEMM a head-split tensor of that width.
            if k != hidden or (
                k * len(ranks[i]) in widths and any(kinds[src[e]] == "attention" for e in inn[start[i] : start[i + 1]])
            ):
                found.add(i)
    return found


_SHAPE = itemgetter("shape")


def partial_by_shape(ix: DagIndex) -> set[int]:
    """GEMM nodes whose shapes say they produce a partial sum, whatever their ``partial`` flag says.

    A projection on several GPUs whose per-rank output is the full hidden width while it contracts over
    a slice (something other than the hidden width, or a model width divided by its GPU count that an
    attention node hands it) reads a split input (row-parallel): each GPU holds a partial sum of the
    whole output. Column-parallel projections read the full hidden width and write a slice.
    """
    return memo(ix, "partial_by_shape", _partial_by_shape)


_KV_SIDE = frozenset({"kv_write", "kv_read", "step_boundary", "kv_transfer"})


def _kv_producers(ix: DagIndex) -> set[int]:
    inn, start = ix.in_csr
    src, kinds, comm = ix.src, ix.kind, ix.is_comm
    return {
        p
        for w in ix.of_kind("kv_write")
        for e in inn[start[w] : start[w + 1]]
        if not comm[p := src[e]] and kinds[p] not in _KV_SIDE
    }


def kv_producers(ix: DagIndex) -> set[int]:
    """Compute nodes that feed a ``kv_write``: the projections that make the keys and values."""
    return memo(ix, "kv_producers", _kv_producers)


def _kv_consumers(ix: DagIndex) -> dict[int, int]:
    consumers: dict[int, int] = {}
    out, start = ix.out_csr
    dst, edge_kind, kinds = ix.dst, ix.edge_kind, ix.kind
    for kind in ("kv_read", "kv_write"):
        for s in ix.of_kind(kind):
            for e in out[start[s] : start[s + 1]]:
                j = dst[e]
                if edge_kind[e] == "state" and kinds[j] not in _KV_SIDE:
                    consumers.setdefault(j, s)
    comm, purpose = ix.is_comm, ix.purpose
    for p in kv_producers(ix):
        for e in out[start[p] : start[p + 1]]:
            if edge_kind[e] != "data":
                continue
            j = dst[e]
            if not comm[j]:
                consumers.setdefault(j, p)
            elif purpose[j] == "sp_kv_gather":  # the gathered K/V reach attention through the SP all-gather
                for f in out[start[j] : start[j + 1]]:
                    if edge_kind[f] == "data" and not comm[dst[f]]:
                        consumers.setdefault(dst[f], p)
    return consumers


def kv_consumers(ix: DagIndex) -> dict[int, int]:
    """Nodes that consume keys and values, each mapped to the node it takes them from.

    Those are the state successors of ``kv_read`` and ``kv_write`` nodes (other than KV and boundary
    nodes), and the compute nodes that read the output of a K/V producer directly or through the SP
    K/V all-gather. In a sound graph every one of them is an attention node.
    """
    return memo(ix, "kv_consumers", _kv_consumers)


def _kv_states(ix: DagIndex) -> dict[int, object]:
    members = [i for kind in ("kv_read", "kv_write") for i in ix.of_kind(kind)]
    return dict(zip(members, map(dict.get, map(ix.fields.__getitem__, members), repeat("kv_state")), strict=True))


def kv_states(ix: DagIndex) -> dict[int, object]:
    """The ``kv_state`` of every ``kv_read`` and ``kv_write`` node, read once for the rules that compare them."""
    return memo(ix, "kv_states", _kv_states)


def _attention_shapes(ix: DagIndex) -> dict[int, dict[str, object]]:
    members = ix.of_kind("attention")
    return dict(zip(members, map(_SHAPE, map(ix.fields.__getitem__, members)), strict=True))


def attention_shapes(ix: DagIndex) -> dict[int, dict[str, object]]:
    """The shape record of every attention node (q_len, kv_len, heads, ...), read once."""
    return memo(ix, "attention_shapes", _attention_shapes)


def min_context(ix: DagIndex, layer: int | None) -> int:
    """Fewest key positions an attention of ``layer`` may see: the prompt, or the window on a sliding
    layer. Prefill attention sees the whole prompt; decode attention sees at least what prefill cached."""
    model = ix.meta.model
    prompt = ix.meta.workload.isl
    if layer is not None and 0 <= layer < len(model.layer_types) and model.layer_types[layer] == "sliding":
        return min(prompt, model.sliding_window or prompt)
    return prompt


def covering_ranks(ix: DagIndex, i: int) -> frozenset[int]:
    """Ranks on which some data producer of node ``i`` holds its input."""
    ranks: set[int] = set()
    for p in ix.pred(i, "data"):
        ranks |= ix.footprint[p]
    return frozenset(ranks)
