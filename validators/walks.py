"""Adjacency and graph walks over a DAG's node and edge positions, for :class:`~shardplan.validators.index.DagIndex`.

Edges are addressed by their position in ``dag.edges`` and nodes by theirs in ``dag.nodes``. The adjacency is
kept in compressed (CSR) form, so that a DAG of a hundred thousand nodes is indexed without allocating a
container per node, and edges whose endpoints do not exist (DAG-2) are left out of it, so every walk can
follow the graph without checking for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from itertools import accumulate, repeat
from operator import lt

__all__ = ["GraphWalks"]


def _offsets(rows: Iterable[int], n: int) -> list[int]:
    """CSR offsets of ``n`` rows from the row number of each entry (in any order)."""
    counts = Counter(rows)
    return [0, *accumulate(map(counts.get, range(n), repeat(0, n)))]


class GraphWalks:
    """The CSR adjacency of the edge tables ``src``, ``dst`` and ``edge_kind``, and the walks over it.

    A base of :class:`~shardplan.validators.index.DagIndex`, which fills the tables named below and then
    calls :meth:`_build_adjacency`.
    """

    nodes: Sequence[object]
    phase: list[str]
    src: list[int]
    """Per edge, the position of its source node; ``-1`` when that node does not exist."""
    dst: list[int]
    """Per edge, the position of its target node; ``-1`` when that node does not exist."""
    edge_kind: list[str]

    def _build_adjacency(self) -> None:
        """Set ``dangling``, ``valid_edges`` and the CSR tables from ``src`` and ``dst``."""
        count = len(self.src)
        self.dangling: list[int] = (
            [e for e in range(count) if self.src[e] < 0 or self.dst[e] < 0]
            if (-1 in self.src or -1 in self.dst)
            else []
        )
        self.valid_edges: list[int] = (
            list(range(count)) if not self.dangling else sorted(set(range(count)) - set(self.dangling))
        )
        n = len(self.nodes)
        self._out = sorted(self.valid_edges, key=self.src.__getitem__)
        self._in = sorted(self.valid_edges, key=self.dst.__getitem__)
        if self.dangling:
            self._out_start = _offsets(map(self.src.__getitem__, self.valid_edges), n)
            self._in_start = _offsets(map(self.dst.__getitem__, self.valid_edges), n)
        else:
            self._out_start = _offsets(self.src, n)
            self._in_start = _offsets(self.dst, n)

    @property
    def edge_count(self) -> int:
        """Number of edges, dangling ones included."""
        return len(self.src)

    def out_edges(self, i: int) -> list[int]:
        """Edges leaving node ``i``."""
        return self._out[self._out_start[i] : self._out_start[i + 1]]

    @property
    def in_csr(self) -> tuple[list[int], list[int]]:
        """The incoming adjacency as ``(edges, start)``: node ``i``'s edges are ``edges[start[i]:start[i+1]]``
        (for tight loops that cannot afford a call per node)."""
        return self._in, self._in_start

    @property
    def out_csr(self) -> tuple[list[int], list[int]]:
        """The outgoing adjacency as ``(edges, start)``, like :attr:`in_csr`."""
        return self._out, self._out_start

    def in_edges(self, i: int) -> list[int]:
        """Edges entering node ``i``."""
        return self._in[self._in_start[i] : self._in_start[i + 1]]

    def succ(self, i: int, kind: str | None = None) -> list[int]:
        """Successor nodes of ``i`` (through edges of ``kind`` only, when given)."""
        if kind is None:
            return [self.dst[e] for e in self.out_edges(i)]
        return [self.dst[e] for e in self.out_edges(i) if self.edge_kind[e] == kind]

    def pred(self, i: int, kind: str | None = None) -> list[int]:
        """Predecessor nodes of ``i`` (through edges of ``kind`` only, when given)."""
        if kind is None:
            return [self.src[e] for e in self.in_edges(i)]
        return [self.src[e] for e in self.in_edges(i) if self.edge_kind[e] == kind]

    @cached_property
    def topological_order(self) -> list[int]:
        """A topological order of the nodes; shorter than the node count exactly when the graph has a cycle.

        When every edge points from an earlier node of the list to a later one (the builder writes nodes
        in dependency order) the list order is one, checked in one C-level pass; otherwise Kahn's walk.
        """
        valid = self.valid_edges
        if all(map(lt, map(self.src.__getitem__, valid), map(self.dst.__getitem__, valid))):
            return list(range(len(self.nodes)))
        indegree = [self._in_start[i + 1] - self._in_start[i] for i in range(len(self.nodes))]
        ready = [i for i, d in enumerate(indegree) if d == 0]
        order: list[int] = []
        dst, out, start = self.dst, self._out, self._out_start
        while ready:
            i = ready.pop()
            order.append(i)
            for e in out[start[i] : start[i + 1]]:
                j = dst[e]
                indegree[j] -= 1
                if indegree[j] == 0:
                    ready.append(j)
        return order

    @cached_property
    def cycle(self) -> list[int]:
        """One directed cycle as a node list (first node not repeated), or ``[]`` when acyclic."""
        if len(self.topological_order) == len(self.nodes):
            return []
        remaining = bytearray(b"\x01") * len(self.nodes)
        for i in self.topological_order:
            remaining[i] = 0
        # A node Kahn left over still has a predecessor left over; walking predecessors inside the
        # remainder must therefore revisit a node, and the walk from that node on is a cycle.
        seen: dict[int, int] = {}
        path: list[int] = []
        i = remaining.index(1)
        while i not in seen:
            seen[i] = len(path)
            path.append(i)
            i = next(self.src[e] for e in self.in_edges(i) if remaining[self.src[e]])
        cycle = path[seen[i] :]
        cycle.reverse()
        return cycle

    def reach(self, starts: Iterable[int], *, forward: bool = True, phase: str | None = None) -> bytearray:
        """Mask of the nodes reachable from ``starts`` (inclusive), along edges or against them,
        walking only through nodes of ``phase`` when one is given."""
        mask = bytearray(len(self.nodes))
        stack = [i for i in starts if 0 <= i < len(self.nodes)]
        for i in stack:
            mask[i] = 1
        edges, start, ends = (
            (self._out, self._out_start, self.dst) if forward else (self._in, self._in_start, self.src)
        )
        phases = self.phase
        while stack:
            i = stack.pop()
            for e in edges[start[i] : start[i + 1]]:
                j = ends[e]
                if not mask[j] and (phase is None or phases[j] == phase):
                    mask[j] = 1
                    stack.append(j)
        return mask

    def taint(self, sources: Sequence[int], stop: Callable[[int], bool]) -> dict[int, int]:
        """Nodes reached from ``sources`` along data edges, each mapped to the source that reached it.

        The walk does not enter nodes for which ``stop`` is true; sources themselves are reported only
        when another source reaches them.
        """
        origin: dict[int, int] = {}
        stack = [(i, i) for i in sources]
        visited = set(sources)
        while stack:
            i, source = stack.pop()
            for e in self.out_edges(i):
                if self.edge_kind[e] != "data":
                    continue
                j = self.dst[e]
                if j in visited or stop(j):
                    continue
                visited.add(j)
                origin[j] = source
                stack.append((j, source))
        return origin
