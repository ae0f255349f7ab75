"""An append-only collection of nodes and edges with readable ids; what the builder writes into."""

from __future__ import annotations

from typing import Any

from shardplan.contracts.dag import CommNode, ComputeNode, Edge, EdgeKind, StateNode, category_of
from shardplan.contracts.hardware import Cluster

__all__ = ["GraphBuffer"]

AnyNode = ComputeNode | CommNode | StateNode


def _static_defaults(cls: type[ComputeNode | CommNode | StateNode]) -> dict[str, Any]:
    """Every field in declaration order, with its default; required and factory fields are filled per node.

    Updating a copy of this template keeps the declaration order, so a node serialises exactly as a
    validated one does (``id`` first, not after the defaulted fields).
    """
    return {
        name: None if field.is_required() or field.default_factory is not None else field.default
        for name, field in cls.model_fields.items()
    }


_DEFAULTS = {cls: _static_defaults(cls) for cls in (ComputeNode, CommNode, StateNode)}


def _trusted(cls: Any, values: dict[str, Any]) -> Any:
    """A model instance from complete, already-correct values, as ``model_construct`` makes it but without
    its per-field bookkeeping: the builder is the one trusted producer, and the search builds hundreds of
    thousands of sample nodes. Tests round-trip builder DAGs through full validation."""
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(values))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


class GraphBuffer:
    """Nodes in insertion order and typed edges between them."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.nodes: list[AnyNode] = []
        self.edges: list[Edge] = []
        self._kinds: dict[str, str] = {}

    def _register(self, node: AnyNode) -> str:
        node.__dict__["category"] = category_of(node.kind)
        if node.id in self._kinds:
            raise ValueError(f"duplicate node id {node.id}")
        self._kinds[node.id] = node.kind
        self.nodes.append(node)
        return node.id

    def kind_of(self, node_id: str) -> str:
        """The kind of the node written with id ``node_id``."""
        return self._kinds[node_id]

    def compute(self, **fields: Any) -> str:
        fields.setdefault("shape", {})
        return self._register(_trusted(ComputeNode, {**_DEFAULTS[ComputeNode], **fields}))

    def comm(self, **fields: Any) -> str:
        fields.setdefault("peers", [])
        fields.setdefault("scope", self.cluster.scope_of(list(fields["ranks"]) + list(fields["peers"])))
        return self._register(_trusted(CommNode, {**_DEFAULTS[CommNode], **fields}))

    def state(self, **fields: Any) -> str:
        return self._register(_trusted(StateNode, {**_DEFAULTS[StateNode], **fields}))

    def edge(self, src: str, dst: str, kind: EdgeKind = "data") -> None:
        self.edges.append(_trusted(Edge, {"src": src, "dst": dst, "kind": kind}))

    def edges_from(self, sources: list[str], dst: str, kind: EdgeKind = "data") -> None:
        for src in sources:
            self.edge(src, dst, kind)
