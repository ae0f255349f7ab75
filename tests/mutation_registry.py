"""The mutation registry and the building blocks every operator module shares.

An operator is a plain function ``DAG -> DAG | None`` registered with :func:`mutation` under the rule it must
trigger and a line saying when it applies; it returns ``None`` when the DAG offers nothing to break (no TP
reduction to drop when tp=1, no pipeline edge when pp=1, ...). Operators never modify their input: they build a
new DAG from new node and edge lists and copy only the nodes they change (:func:`_dag`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, Edge, StateNode

__all__ = ["AnyNode", "Mutation", "MUTATIONS", "mutation"]

AnyNode = ComputeNode | CommNode | StateNode
Mutator = Callable[[DAG], "DAG | None"]


@dataclass(frozen=True)
class Mutation:
    """A mutation operator and the rule whose validator must catch it."""

    name: str
    rule: str
    applies: str
    apply: Mutator


MUTATIONS: dict[str, Mutation] = {}
"""Every operator by name, in definition order."""


def mutation(rule: str, applies: str = "always") -> Callable[[Mutator], Mutator]:
    """Register the decorated operator as breaking knowledge rule ``rule``."""

    def register(func: Mutator) -> Mutator:
        MUTATIONS[func.__name__] = Mutation(func.__name__, rule, applies, func)
        return func

    return register


# -- building blocks -------------------------------------------------------------------------------
def _dag(
    dag: DAG,
    *,
    nodes: Iterable[AnyNode] | None = None,
    edges: Iterable[Edge] | None = None,
    meta: object = None,
) -> DAG:
    """A new DAG sharing the unchanged parts of ``dag``."""
    return DAG.model_construct(
        schema_version=dag.schema_version,
        meta=meta if meta is not None else dag.meta,
        nodes=list(dag.nodes if nodes is None else nodes),
        edges=list(dag.edges if edges is None else edges),
    )


def _find(dag: DAG, test: Callable[[AnyNode], bool]) -> AnyNode | None:
    return next((node for node in dag.nodes if test(node)), None)


def _update(dag: DAG, node_id: str, **fields: object) -> DAG:
    """``dag`` with one node's fields changed."""
    return _dag(
        dag, nodes=[node.model_copy(update=fields) if node.id == node_id else node for node in dag.nodes]
    )


def _add_edges(dag: DAG, *edges: tuple[str, str, str]) -> DAG:
    return _dag(dag, edges=[*dag.edges, *(Edge(src=s, dst=d, kind=k) for s, d, k in edges)])  # type: ignore[arg-type]


def _drop_edges(dag: DAG, test: Callable[[Edge], bool]) -> DAG:
    return _dag(dag, edges=[edge for edge in dag.edges if not test(edge)])


def _remove(dag: DAG, ids: set[str], *, rewire: bool) -> DAG:
    """``dag`` without the nodes ``ids``; with ``rewire``, each outside producer of a removed chain is
    joined by a data edge to each outside consumer (the transfer disappears, the data flow stays)."""
    inside = [e for e in dag.edges if e.src in ids or e.dst in ids]
    edges = [e for e in dag.edges if e.src not in ids and e.dst not in ids]
    if rewire:
        producers = [e.src for e in inside if e.src not in ids and e.kind in ("data", "pipeline")]
        consumers = [e.dst for e in inside if e.dst not in ids and e.kind in ("data", "pipeline")]
        edges += [
            Edge(src=p, dst=c, kind="data")
            for p in dict.fromkeys(producers)
            for c in dict.fromkeys(consumers)
        ]
    return _dag(dag, nodes=[n for n in dag.nodes if n.id not in ids], edges=edges)


def _strategy(dag: DAG, phase: str, **degrees: object) -> DAG:
    """``dag`` claiming other degrees for one phase in its meta."""
    strategy = dag.meta.strategy
    changed = getattr(strategy, phase).model_copy(update=degrees)
    return _dag(
        dag, meta=dag.meta.model_copy(update={"strategy": strategy.model_copy(update={phase: changed})})
    )


def _data_preds(dag: DAG, node_id: str) -> list[str]:
    return [e.src for e in dag.edges if e.dst == node_id and e.kind == "data"]


def _data_succs(dag: DAG, node_id: str) -> list[str]:
    return [e.dst for e in dag.edges if e.src == node_id and e.kind == "data"]


def _stage_ranks(dag: DAG, phase: str, stage: int) -> set[int]:
    return {
        r
        for n in dag.nodes
        if n.phase == phase and n.stage == stage and isinstance(n, ComputeNode)
        for r in n.ranks
    }


def _is(node: AnyNode, kind: str, phase: str | None = None, purpose: str | None = None) -> bool:
    return (
        node.kind == kind
        and (phase is None or node.phase == phase)
        and (purpose is None or getattr(node, "purpose", None) == purpose)
    )


def _op(node: AnyNode) -> str | None:
    return getattr(node, "op", None)


def _by_id(dag: DAG) -> dict[str, AnyNode]:
    return {n.id: n for n in dag.nodes}



def _drop_edge(dag: DAG, src: str, dst: str) -> DAG:
    """``dag`` without the edges from ``src`` to ``dst``."""
    return _drop_edges(dag, lambda e: e.src == src and e.dst == dst)
