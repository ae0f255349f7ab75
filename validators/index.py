"""DagIndex: every lookup the validator rules need, built once per validation in O(N + E).

Nodes are addressed by their position in ``dag.nodes`` (an ``int``) and edges by theirs in
``dag.edges``. Per-node facts are plain lists, so that a DAG of a hundred thousand nodes is indexed with a
handful of C-level passes and without allocating a container per node; the adjacency and the walks over it
are :class:`~shardplan.validators.walks.GraphWalks`. Nothing here raises on a schema-valid DAG, however odd
its contents.

>>> from shardplan.tools.catalogs.models import load_model
>>> from shardplan.tools.catalogs.gpus import make_cluster
>>> from shardplan.contracts.strategy import parse_strategy
>>> from shardplan.contracts.workload import Workload
>>> from shardplan.tools.builder.build import build_dag
>>> dag = build_dag(load_model("llama-3.1-8b"), make_cluster("H100", 2), parse_strategy("tp=2"),
...                 Workload(isl=64, osl=8, batch=2))
>>> ix = DagIndex(dag)
>>> ix.ids[ix.decode_ends[0]]
'decode/step_t+1'
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from functools import cached_property
from itertools import compress, repeat
from operator import attrgetter, is_not, itemgetter, ne
from typing import Any, TypeAlias

from shardplan.contracts.arithmetic.feasibility import Problem, strategy_problems
from shardplan.contracts.dag import COMM_KINDS, DAG, CommNode, ComputeNode, StateNode
from shardplan.contracts.dag_roles import BOUNDARY_ROLES, BoundaryRole, boundary_role
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.validators.walks import GraphWalks

__all__ = ["AnyNode", "DagIndex", "REDUCTION_KINDS", "PHASES"]

AnyNode: TypeAlias = ComputeNode | CommNode | StateNode

PHASES: tuple[str, str] = ("prefill", "decode")
"""The two top-level branches; ``handoff`` holds only the KV transfer between them."""

REDUCTION_KINDS: frozenset[str] = frozenset({"all_reduce", "reduce_scatter"})
"""Collectives that sum partial outputs."""

_WIRE_FIELDS = ("peers", "message_bytes", "dtype")


class DagIndex(GraphWalks):
    """Tables, adjacency and cached graph walks over one DAG (the walks from :class:`GraphWalks`).

    Per node ``i``: ``ids``, ``kind``, ``category``, ``phase``, ``stage``, ``mb``, ``step``, ``layer``, ``is_comm``,
    ``partial``, ``parallel``, ``purpose``, ``ranks`` (an interned frozenset) and ``footprint`` (ranks
    plus peers for communication nodes). Per edge ``e``: ``src[e]``, ``dst[e]`` (``-1`` when the
    endpoint does not exist) and ``edge_kind[e]``. ``out_edges(i)`` and ``in_edges(i)`` list edge numbers.
    """

    def __init__(self, dag: DAG) -> None:
        self.dag = dag
        self.meta = dag.meta
        self.nodes: list[AnyNode] = list(dag.nodes)
        self.fields: list[dict[str, Any]] = [node.__dict__ for node in self.nodes]
        """Each node's field values by name: the fastest way to read a kind-specific field."""
        fields = self.fields
        # One pass over the node objects, then columns out of the compact rows (memory-friendly).
        rows = list(
            map(itemgetter("id", "kind", "phase", "stage", "microbatch", "step", "layer", "ranks", "category"), fields)
        )
        self.ids: list[str] = list(map(itemgetter(0), rows))
        self.kind: list[str] = list(map(itemgetter(1), rows))
        self.phase: list[str] = list(map(itemgetter(2), rows))
        self.stage: list[int] = list(map(itemgetter(3), rows))
        self.mb: list[int] = list(map(itemgetter(4), rows))
        self.step: list[int] = list(map(itemgetter(5), rows))
        self.layer: list[int | None] = list(map(itemgetter(6), rows))
        self.rank_lists: list[tuple[int, ...]] = list(map(tuple, map(itemgetter(7), rows)))
        """Each node's ranks as written (order and repeats kept)."""
        self.category: list[str | None] = list(map(itemgetter(8), rows))
        """Each node's category as written (None when left to be derived from its kind)."""
        del rows
        self.is_comm: list[bool] = list(map(COMM_KINDS.__contains__, self.kind))
        self.partial: list[bool] = [flag is True for flag in map(dict.get, fields, repeat("partial"))]
        """Compute nodes whose output is a partial sum."""
        self.parallel: list[str | None] = list(map(dict.get, fields, repeat("parallel")))
        """How a compute node is split over its ranks; None for other nodes."""
        self.purpose: list[str | None] = list(map(dict.get, fields, repeat("purpose")))
        """Why a communication node exists; None for other nodes."""

        self.pos: dict[str, int] = dict(zip(self.ids, range(len(self.ids)), strict=True))
        self.duplicate_ids: dict[str, int] = {}
        if len(self.pos) != len(self.ids):
            self.pos = {}
            for i, node_id in enumerate(self.ids):
                if node_id in self.pos:
                    self.duplicate_ids[node_id] = self.duplicate_ids.get(node_id, 1) + 1
                else:
                    self.pos[node_id] = i

        interned = {key: frozenset(key) for key in set(self.rank_lists)}
        self.ranks: list[frozenset[int]] = list(map(interned.__getitem__, self.rank_lists))
        self.footprint: list[frozenset[int]] = list(self.ranks)
        comms = list(compress(range(len(fields)), self.is_comm))
        wire = _WIRE_FIELDS
        try:
            comm_rows = list(map(itemgetter(*wire), map(fields.__getitem__, comms)))
        except KeyError:  # a node record without some field: read them one by one
            comm_rows = [tuple(fields[i].get(key) for key in wire) for i in comms]
        self.wire: dict[int, tuple[float, str]] = {i: (row[1], row[2]) for i, row in zip(comms, comm_rows, strict=True)}
        """Per communication node, ``(message_bytes, dtype)``: what it puts on the wire."""
        for i, peers in zip(comms, map(itemgetter(0), comm_rows), strict=True):
            if peers:
                key = (*self.rank_lists[i], -1, *peers)
                both = interned.get(key)
                if both is None:
                    both = interned[key] = self.ranks[i] | frozenset(peers)
                self.footprint[i] = both

        edge_rows = list(map(itemgetter("src", "dst", "kind"), map(attrgetter("__dict__"), dag.edges)))
        count = len(edge_rows)
        self.src: list[int] = list(map(self.pos.get, map(itemgetter(0), edge_rows), repeat(-1, count)))
        self.dst: list[int] = list(map(self.pos.get, map(itemgetter(1), edge_rows), repeat(-1, count)))
        self.edge_kind: list[str] = list(map(itemgetter(2), edge_rows))
        del edge_rows
        self._build_adjacency()
        n = len(self.nodes)

        self.memo: dict[str, object] = {}
        """Results shared by several rules (see :func:`~shardplan.validators.derived.memo`)."""

        # Nodes grouped by kind, in graph order: a stable sort, then one slice per kind.
        by_kind = sorted(range(n), key=self.kind.__getitem__)
        sorted_kinds = list(map(self.kind.__getitem__, by_kind))
        self.by_kind: dict[str, list[int]] = {
            kind: by_kind[bisect_left(sorted_kinds, kind) : bisect_right(sorted_kinds, kind)]
            for kind in set(sorted_kinds)
        }

    # -- basic lookups ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def of_kind(self, *kinds: str) -> list[int]:
        """Nodes of the given kinds, in graph order."""
        if len(kinds) == 1:
            return self.by_kind.get(kinds[0], [])
        return sorted(i for kind in kinds for i in self.by_kind.get(kind, []))

    def edge_ids(self, e: int) -> tuple[str, str]:
        """An edge as ``(src id, dst id)``, as written in the DAG (endpoints may not exist)."""
        edge = self.dag.edges[e]
        return edge.src, edge.dst

    def attr(self, i: int, name: str, default: object = None) -> object:
        """A kind-specific field of node ``i`` (``kv_state``, ``shape``, ``op``, ...) or ``default``."""
        return self.fields[i].get(name, default)

    def is_boundary(self, i: int) -> bool:
        """Whether ``i`` is a step boundary (they join every microbatch and stage of a phase)."""
        return self.kind[i] == "step_boundary"

    def is_reduction(self, i: int) -> bool:
        """Whether ``i`` completes a partial sum: an all-reduce, a reduce-scatter or the EP combine."""
        kind = self.kind[i]
        return kind in REDUCTION_KINDS or (kind == "all_to_all" and self.purpose[i] == "ep_combine")

    def is_routed_expert(self, i: int) -> bool:
        """Whether ``i`` is the routed-expert compute of one expert rank (not a shared expert)."""
        return self.kind[i] == "expert" and self.attr(i, "op") != "shared_experts"

    def phase_strategy(self, phase: str) -> PhaseStrategy | None:
        """Degrees of ``phase`` from the DAG's strategy; None for ``handoff``."""
        if phase == "prefill":
            return self.meta.strategy.prefill
        if phase == "decode":
            return self.meta.strategy.decode
        return None

    def pool(self, phase: str) -> frozenset[int] | None:
        """Ranks of the drawn replica in ``phase`` (``meta.rank_pools``), None when not given."""
        ranks = self.meta.rank_pools.get(phase)
        return None if ranks is None else frozenset(ranks)

    # -- cached facts -------------------------------------------------------------------------------
    @cached_property
    def problems(self) -> list[Problem]:
        """What :func:`strategy_problems` says about the strategy the DAG claims."""
        meta = self.meta
        return strategy_problems(meta.model, meta.strategy, meta.workload, meta.gpus, meta.gpus_per_node,
                                 apart=meta.decode_gpu is not None)

    @cached_property
    def crossing(self) -> dict[str, list[int]]:
        """Existing edges whose endpoints differ in ``phase``, ``microbatch``, ``stage``, ``step``,
        ``layer`` or ``ranks`` (rank sets that are not the same interned object), by fact; and
        ``pipeline``, the pipeline edges. In a sound DAG each list is a small part of the edges, so
        the rules about those facts look at these lists only."""
        valid = self.valid_edges
        sources = list(map(self.src.__getitem__, valid))
        targets = list(map(self.dst.__getitem__, valid))

        def differ(table: Sequence[object], test: Callable[[object, object], bool] = ne) -> list[int]:
            return list(
                compress(valid, map(test, map(table.__getitem__, sources), map(table.__getitem__, targets)))
            )

        return {
            "phase": differ(self.phase),
            "microbatch": differ(self.mb),
            "stage": differ(self.stage),
            "step": differ(self.step),
            "layer": differ(self.layer),
            "ranks": differ(self.ranks, is_not),
            "pipeline": [e for e in valid if self.edge_kind[e] == "pipeline"],
        }

    @cached_property
    def microbatches(self) -> dict[str, list[int]]:
        """Microbatches drawn in each phase (step boundaries, which join them all, left out)."""
        boundary = [kind == "step_boundary" for kind in self.kind]
        seen: dict[str, set[int]] = {}
        for phase, mb, skip in set(zip(self.phase, self.mb, boundary, strict=True)):
            if not skip:
                seen.setdefault(phase, set()).add(mb)
        return {phase: sorted(mbs) for phase, mbs in seen.items()}

    @cached_property
    def layer_stage(self) -> dict[str, dict[int, int]]:
        """Per phase, the stage ``meta.stage_layers`` assigns to each layer (first stage wins)."""
        table: dict[str, dict[int, int]] = {}
        for phase, stages in self.meta.stage_layers.items():
            owner: dict[int, int] = {}
            for stage, layers in enumerate(stages):
                for layer in layers:
                    owner.setdefault(layer, stage)
            table[phase] = owner
        return table

    @cached_property
    def stage_ranks(self) -> dict[tuple[str, int], frozenset[int]]:
        """Ranks of each ``(phase, stage)``: the union of the ranks its compute and KV nodes run on.

        Communication nodes and step boundaries are left out: they are what the rules check against
        the stages, and a boundary spans the whole replica by design.
        """
        holders = [
            not comm and kind != "step_boundary" for comm, kind in zip(self.is_comm, self.kind, strict=True)
        ]
        sets: dict[tuple[str, int], set[int]] = {}
        for phase, stage, ranks in set(
            compress(zip(self.phase, self.stage, self.ranks, strict=True), holders)
        ):
            sets.setdefault((phase, stage), set()).update(ranks)
        return {key: frozenset(value) for key, value in sets.items()}

    def beyond_stage(self, i: int) -> list[int]:
        """Ranks node ``i`` reaches outside the GPUs of its own (phase, stage), sorted; empty when inside."""
        return sorted(self.footprint[i] - self.stage_ranks.get((self.phase[i], self.stage[i]), frozenset()))

    @cached_property
    def boundaries(self) -> dict[BoundaryRole, list[int]]:
        """Step boundaries by the role their fields give them (:func:`boundary_role`), in graph order."""
        found: dict[BoundaryRole, list[int]] = {role: [] for role in BOUNDARY_ROLES}
        for i in self.of_kind("step_boundary"):
            role = boundary_role(self.nodes[i])
            if role is not None:
                found[role].append(i)
        return found

    @property
    def decode_starts(self) -> list[int]:
        """Step boundaries that open the drawn decode step t."""
        return self.boundaries["decode_start"]

    @property
    def decode_ends(self) -> list[int]:
        """Step boundaries that close step t and open step t+1."""
        return self.boundaries["decode_end"]

    @cached_property
    def after_decode_start(self) -> bytearray:
        """Decode nodes that depend (transitively, within decode) on the opening of step t."""
        return self.reach(self.decode_starts, phase="decode")

    @cached_property
    def before_decode_end(self) -> bytearray:
        """Decode nodes the closing step boundary depends on (transitively, within decode)."""
        return self.reach(self.decode_ends, forward=False, phase="decode")

    @cached_property
    def after_decode_end(self) -> bytearray:
        """Nodes that depend (transitively) on the end of step t."""
        return self.reach(self.decode_ends)
