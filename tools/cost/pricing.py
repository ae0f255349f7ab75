"""Who prices each node: the measured tables where they cover it, the calibrated roofline everywhere else.

A :class:`Pricer` is made for one model, cluster, strategy and engine. :meth:`Pricer.prepare` looks up
every node the measured tables can price in a few batched calls; :meth:`Pricer.node_time_s` then
answers the scheduler, and keeps, per phase, how many seconds each backend priced so that the cost
report can say so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from shardplan.contracts.common import ServingEngine
from shardplan.contracts.dag import CommNode, ComputeNode, StateNode
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.tools.cost.exchange import engine_exchange
from shardplan.tools.cost.measured.database import MeasuredTables, measured_available, measured_tables, system_for_gpu
from shardplan.tools.cost.measured.lookup import lookup_seconds
from shardplan.tools.cost.measured.mla_block import mla_block_seconds
from shardplan.tools.cost.measured.queries import node_query, other_scaling
from shardplan.tools.cost.op_time import layout_expert_factor, node_time_s

__all__ = ["Backend", "Pricer", "TwoPoolPricer", "make_pricer", "pricing_backend"]

Backend = Literal["auto", "roofline"]
# Node kinds some measured table may price (the others are norms, adds, samplers, state markers).
_TABLE_KINDS = frozenset(
    {"linear", "router", "expert", "attention", "all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
)
AnyNode = ComputeNode | CommNode | StateNode


@dataclass
class Pricer:
    """Node durations for the scheduler, from the measured tables (when loaded) or the roofline."""

    cluster: Cluster
    model: ModelSpec | None = None
    phases: Mapping[str, PhaseStrategy] = field(default_factory=dict)
    engine: ServingEngine = "vllm"
    tables: MeasuredTables | None = None
    why_roofline: str = ""
    measured: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))

    def prepare(self, nodes: Iterable[AnyNode]) -> None:
        """Look up every node the measured tables price (batched; answers are cached process-wide), and price each
        MLA decode attention block from the engine's measured module where its tables hold one
        (:mod:`shardplan.tools.cost.measured.mla_block`)."""
        if self.tables is None or self.model is None:
            return
        listed = list(nodes)
        self.measured.update({k: v for k, v in self._table_seconds(listed).items() if v is not None})
        tables = self.tables
        self.measured.update(mla_block_seconds(listed, self.model, self._own_seconds,
                                               lambda queries: lookup_seconds(tables, queries)))

    def _table_seconds(self, nodes: Iterable[AnyNode]) -> dict[str, float | None]:
        """The measured tables' seconds of each node they may price (None where they do not cover it)."""
        assert self.tables is not None and self.model is not None
        wanted = {}
        for node in nodes:
            phase = self.phases.get(node.phase)
            if phase is None or node.kind not in _TABLE_KINDS:
                continue
            query = node_query(node, self.model, phase, self.cluster.gpus_per_node, self.tables.engine)
            if query is not None:
                wanted[node.id] = query
        answers = lookup_seconds(self.tables, wanted.values())
        # A shape measured only under the other scaling of its weight format is still that format's measurement.
        retry = {q: other_scaling(q) for q, s in answers.items() if s is None}
        fallback = lookup_seconds(self.tables, [q for q in retry.values() if q is not None])
        seconds: dict[str, float | None] = {}
        for node_id, query in wanted.items():
            seconds[node_id] = answers[query]
            if seconds[node_id] is None and retry.get(query) is not None:
                seconds[node_id] = fallback[retry[query]]  # type: ignore[index]
        return seconds

    def _own_seconds(self, nodes: list[AnyNode]) -> dict[str, float]:
        """Each node's own price, as :meth:`node_time_s` would give it: the tables' where they cover the node, the
        roofline's elsewhere (the KV write; on h200_sxm/vllm 0.24.0 the MLA attention kernel too)."""
        measured = self._table_seconds(nodes)
        return {n.id: measured.get(n.id) or self._roofline_s(n) for n in nodes}

    def node_time_s(self, node: AnyNode) -> float:
        """Duration of ``node`` in seconds, counted towards the backend that priced it."""
        seconds = self.measured.get(node.id)
        backend = "measured"
        if seconds is None:
            seconds, backend = self._roofline_s(node), "roofline"
        self.seconds[node.phase][backend] += seconds
        return seconds

    def _roofline_s(self, node: AnyNode) -> float:
        phase = self.phases.get(node.phase)
        if isinstance(node, CommNode) and self.model is not None and phase is not None:
            exchange = engine_exchange(node, self.model, phase, self.cluster.gpus_per_node)
            if exchange is not None:
                return 0.0 if exchange.message_bytes <= 0 else node_time_s(exchange, self.cluster)
        if isinstance(node, ComputeNode) and node.op == "routed_experts" and phase is not None:
            return node_time_s(node, self.cluster) * layout_expert_factor(phase, self.cluster.gpu)
        return node_time_s(node, self.cluster)

    def measured_share(self, phase: str) -> float:
        """Fraction of the priced node time of ``phase`` that came from measured tables."""
        by_backend = self.seconds.get(phase, {})
        total = sum(by_backend.values())
        return by_backend.get("measured", 0.0) / total if total > 0 else 0.0


def _why_no_tables(gpu: str) -> str:
    if system_for_gpu(gpu) is None:
        return f"{gpu} is not in the measured database"
    if not measured_available():
        return "aiconfigurator-core is not installed (pip install aiconfigurator-core on Linux x86-64)"
    return f"the measured database for {gpu} could not be loaded"


@dataclass
class TwoPoolPricer(Pricer):
    """A split DAG's pricer on two GPU types: this pricer (on the prefill pool's GPU) prices prefill, ``decode_pool``
    prices decode on its own GPU and tables, and the KV handoff between them is priced on ``link``, the two-type
    cluster, whose network joins a node of each type."""

    decode_pool: Pricer | None = None
    link: Cluster | None = None

    def prepare(self, nodes: Iterable[AnyNode]) -> None:
        listed = list(nodes)
        super().prepare([n for n in listed if n.phase != "decode"])
        if self.decode_pool is not None:
            self.decode_pool.prepare([n for n in listed if n.phase == "decode"])

    def node_time_s(self, node: AnyNode) -> float:
        if node.phase == "decode" and self.decode_pool is not None:
            return self.decode_pool.node_time_s(node)
        if node.phase == "handoff" and self.link is not None:
            seconds = node_time_s(node, self.link)
            self.seconds[node.phase]["roofline"] += seconds
            return seconds
        return super().node_time_s(node)

    def measured_share(self, phase: str) -> float:
        if phase == "decode" and self.decode_pool is not None:
            return self.decode_pool.measured_share(phase)
        return super().measured_share(phase)


def make_pricer(
    cluster: Cluster,
    model: ModelSpec | None = None,
    phases: Mapping[str, PhaseStrategy] | None = None,
    engine: ServingEngine = "vllm",
    backend: Backend = "auto",
) -> Pricer:
    """A pricer for ``model`` on ``cluster`` under ``engine``; ``backend="roofline"`` ignores the tables. On a
    cluster of two GPU types, a :class:`TwoPoolPricer` (each phase on its pool's GPU)."""
    if cluster.decode_pool is not None:
        prefill = make_pricer(cluster.pool("prefill"), model, phases, engine, backend)
        decode = make_pricer(cluster.pool("decode"), model, phases, engine, backend)
        return TwoPoolPricer(prefill.cluster, model, prefill.phases, engine, prefill.tables, prefill.why_roofline,
                             decode_pool=decode, link=cluster)
    if backend == "roofline":
        return Pricer(cluster, model, phases or {}, engine, None, "the roofline backend was asked for")
    tables = measured_tables(cluster.gpu.name, engine) if model is not None else None
    why = "" if tables is not None else _why_no_tables(cluster.gpu.name)
    return Pricer(cluster, model, phases or {}, engine, tables, why)


def pricing_backend(cluster: Cluster, engine: ServingEngine = "vllm") -> Literal["measured", "roofline"]:
    """The backend that prices most of a deployment on ``cluster`` under ``engine``: ``measured`` when the
    measured tables of its GPU load (they then price nearly all node time), else ``roofline``."""
    return "measured" if measured_tables(cluster.gpu.name, engine) is not None else "roofline"
