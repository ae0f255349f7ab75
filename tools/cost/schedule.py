"""List scheduling of a DAG on per-GPU compute and communication streams.

Every rank has one compute stream and one communication stream. A node starts when all its
predecessors have finished and every rank it runs on has the needed stream free; it then occupies
that stream on all its ranks. So communication overlaps computation exactly where the DAG has no
path between them, and a step boundary, which depends on everything of its step, stops any overlap
across decode steps (OVL-1).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shardplan.contracts.dag import DAG, CommNode, ComputeNode, Edge, StateNode
from shardplan.contracts.hardware import Cluster
from shardplan.text import counted
from shardplan.tools.cost.op_time import node_time_s

if TYPE_CHECKING:
    from shardplan.tools.cost.pricing import Pricer

__all__ = ["Schedule", "schedule_dag", "schedule_graph", "busy_overlap"]

AnyNode = ComputeNode | CommNode | StateNode


@dataclass
class Schedule:
    """Start and finish time (seconds) of every node, the stream intervals per rank, and who gated whom."""

    start: dict[str, float]
    finish: dict[str, float]
    gate: dict[str, str | None]
    compute_busy: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    comm_busy: dict[int, list[tuple[float, float]]] = field(default_factory=dict)

    def critical_path(self, end: str) -> list[str]:
        """Node ids from the first node to ``end`` along the chain that set each start time."""
        path: list[str] = []
        node: str | None = end
        while node is not None:
            path.append(node)
            node = self.gate.get(node)
        return path[::-1]


def _stream(node: AnyNode) -> str | None:
    if isinstance(node, ComputeNode):
        return "compute"
    if isinstance(node, CommNode):
        return None if node.kind == "recv" else "comm"
    return "compute" if node.kind == "kv_write" else None


def schedule_dag(dag: DAG, cluster: Cluster, pricer: Pricer | None = None) -> Schedule:
    """Simulate ``dag`` on ``cluster``.

    Ready nodes run in order of readiness, first come first served, so a second microbatch fills the
    communication gaps of the first. In a pipelined phase (pp > 1) lower microbatches go first instead,
    so each stage finishes microbatch m before starting m + 1 and the stages overlap as a pipeline.

    ``pricer`` gives each node's duration (measured tables where they cover it); without one, the
    roofline prices every node.

    Raises:
        ValueError: the graph has a cycle (validate it first).
    """
    pipelined = {name for name in ("prefill", "decode") if getattr(dag.meta.strategy, name).pp > 1}
    return schedule_graph(dag.nodes, dag.edges, cluster, microbatch_first=pipelined, pricer=pricer)


def schedule_graph(
    node_list: Sequence[AnyNode],
    edge_list: Sequence[Edge],
    cluster: Cluster,
    microbatch_first: set[str] | None = None,
    *,
    record_busy: bool = True,
    pricer: Pricer | None = None,
) -> Schedule:
    """:func:`schedule_dag` on bare node and edge lists (a sample graph that is not a whole DAG).

    ``microbatch_first`` names the phases whose ready nodes are taken in microbatch order;
    ``record_busy=False`` skips the per-rank busy intervals (the search's samples need only times).
    """
    nodes: dict[str, AnyNode] = {n.id: n for n in node_list}
    duration: Callable[[AnyNode], float] = (
        pricer.node_time_s if pricer is not None else lambda node: node_time_s(node, cluster)
    )
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for edge in edge_list:
        preds[edge.dst].append(edge.src)
        succs[edge.src].append(edge.dst)
    waiting = {nid: len(preds[nid]) for nid in nodes}
    order = {nid: i for i, nid in enumerate(nodes)}
    first = microbatch_first or set()

    def priority(nid: str) -> int:
        node = nodes[nid]
        return node.microbatch if node.phase in first else 0

    # (priority, data-ready time, insertion order, node, the predecessor that finished last)
    ready: list[tuple[int, float, int, str, str | None]] = [
        (priority(nid), 0.0, order[nid], nid, None) for nid, count in waiting.items() if count == 0
    ]
    heapq.heapify(ready)
    # Per stream: when each rank's stream is next free, and which node last held it.
    free: dict[str, dict[int, float]] = {"compute": defaultdict(float), "comm": defaultdict(float)}
    holder: dict[str, dict[int, str]] = {"compute": {}, "comm": {}}
    busy: dict[str, dict[int, list[tuple[float, float]]]] = {"compute": defaultdict(list), "comm": defaultdict(list)}
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    gate: dict[str, str | None] = {}
    while ready:
        _, begin, _, nid, gated_by = heapq.heappop(ready)
        node = nodes[nid]
        stream = _stream(node)
        if stream is not None:
            stream_free, stream_holder = free[stream], holder[stream]
            for rank in node.ranks:
                if stream_free[rank] > begin:
                    begin, gated_by = stream_free[rank], stream_holder[rank]
        end = begin + duration(node)
        start[nid], finish[nid], gate[nid] = begin, end, gated_by
        if stream is not None:
            intervals = busy[stream]
            for rank in node.ranks:
                stream_free[rank] = end
                stream_holder[rank] = nid
                if record_busy and end > begin:
                    intervals[rank].append((begin, end))
        for nxt in succs[nid]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                last = max(preds[nxt], key=finish.__getitem__)
                heapq.heappush(ready, (priority(nxt), finish[last], order[nxt], nxt, last))
    if len(finish) != len(nodes):
        raise ValueError(f"the DAG has a cycle: {counted(len(nodes) - len(finish), 'node')} never became ready")
    return Schedule(start, finish, gate, dict(busy["compute"]), dict(busy["comm"]))


def busy_overlap(a: list[tuple[float, float]], b: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds within [lo, hi] during which both sorted, disjoint interval lists are busy."""
    a = [(max(s, lo), min(e, hi)) for s, e in a if e > lo and s < hi]
    b = [(max(s, lo), min(e, hi)) for s, e in b if e > lo and s < hi]
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
