"""An append-only collection of nodes and edges with readable ids; what the builder writes into."""

from __future__ import annotations

from typing import Any

from ..contracts.dag import CommNode, ComputeNode, Edge, EdgeKind, StateNode
from ..contracts.hardware import Cluster

__all__ = ["GraphBuffer"]

AnyNode = ComputeNode | CommNode | StateNode


class GraphBuffer:
    """Nodes in insertion order and typed edges between them."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.nodes: list[AnyNode] = []
        self.edges: list[Edge] = []
        self._ids: set[str] = set()

    def _register(self, node: AnyNode) -> str:
        if node.id in self._ids:
            raise ValueError(f"duplicate node id {node.id}")
        self._ids.add(node.id)
        self.nodes.append(node)
        return node.id

    def compute(self, **fields: Any) -> str:
        return self._register(ComputeNode(**fields))

    def comm(self, **fields: Any) -> str:
        ranks = list(fields["ranks"]) + list(fields.get("peers", ()))
        fields.setdefault("scope", self.cluster.scope_of(ranks))
        return self._register(CommNode(**fields))

    def state(self, **fields: Any) -> str:
        return self._register(StateNode(**fields))

    def edge(self, src: str, dst: str, kind: EdgeKind = "data") -> None:
        self.edges.append(Edge(src=src, dst=dst, kind=kind))

    def edges_from(self, sources: list[str], dst: str, kind: EdgeKind = "data") -> None:
        for src in sources:
            self.edge(src, dst, kind)
