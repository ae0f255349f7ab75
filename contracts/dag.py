"""The parallel strategy DAG: nodes, typed edges, and the facts needed to check and price them.

Conventions every producer and consumer relies on:

* ``flops``, ``bytes_read``, ``bytes_written`` and ``message_bytes`` are **per participating rank**:
  what each GPU listed in ``ranks`` does. A TP node is one logical node mapped to its TP group.
* ``step`` is 0 for the drawn decode step t; the ``step_boundary`` that opens step t+1 has step 1.
* Only one data-parallel replica is drawn; ``meta.strategy`` carries the replica count.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from shardplan.contracts.common import Contract, DType, Phase
from shardplan.contracts.hardware import Cluster, LinkScope
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.workload import Workload

__all__ = [
    "ComputeNode",
    "CommNode",
    "StateNode",
    "Node",
    "Edge",
    "EdgeKind",
    "DAG",
    "DAGMeta",
    "COMPUTE_KINDS",
    "COMM_KINDS",
    "STATE_KINDS",
    "NodeCategory",
    "category_of",
]

ComputeKind = Literal["embedding", "norm", "linear", "attention", "expert", "router", "sampler", "elementwise"]
CommKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv", "kv_transfer"]
StateKind = Literal["kv_read", "kv_write", "step_boundary"]
EdgeKind = Literal["data", "pipeline", "sync", "state"]

COMPUTE_KINDS: frozenset[str] = frozenset(ComputeKind.__args__)  # type: ignore[attr-defined]
COMM_KINDS: frozenset[str] = frozenset(CommKind.__args__)  # type: ignore[attr-defined]
STATE_KINDS: frozenset[str] = frozenset(StateKind.__args__)  # type: ignore[attr-defined]

NodeCategory = Literal["compute", "communication", "control"]
"""The seeds' three node classes: compute, communication, and control/state (routing, KV cache, step ends)."""

_CONTROL_KINDS: frozenset[str] = frozenset({"router", *STATE_KINDS})


def category_of(kind: str) -> NodeCategory:
    """The node category of a node kind: routing and the state kinds are control, like the seeds class them.

    >>> category_of("router"), category_of("all_to_all"), category_of("linear")
    ('control', 'communication', 'compute')
    """
    if kind in _CONTROL_KINDS:
        return "control"
    return "communication" if kind in COMM_KINDS else "compute"


Parallel = Literal["replicated", "column", "row", "vocab", "expert", "sequence", "none"]
Purpose = Literal[
    "tp_reduce",
    "sp_reduce_scatter",
    "sp_kv_gather",
    "sp_gather",
    "ep_dispatch",
    "ep_combine",
    "pp_activation",
    "vocab_gather",
    "kv_transfer",
    "adp_gather",
    "adp_scatter",
    "shared_expert_reduce",
]
"""Why a communication node exists. ``shared_expert_reduce`` is the all-reduce of the shared experts'
tensor-parallel output: a TP reduction, told apart from ``tp_reduce`` because engines fuse it with the routed
experts' reduction, which pricing follows."""


class _NodeBase(Contract):
    id: str = Field(description="Unique node id, readable: prefill/mb0/L3/attn.o_proj.")
    name: str = Field(description="Short human label.")
    phase: Phase = Field(description="Top-level branch: prefill, decode, or the handoff between them.")
    layer: int | None = Field(default=None, description="Transformer layer (0-based); None outside layers.")
    stage: int = Field(default=0, ge=0, description="Pipeline stage that runs the node.")
    microbatch: int = Field(default=0, ge=0, description="Microbatch the node belongs to.")
    step: int = Field(default=0, ge=0, description="Decode step relative to the drawn one: 0 is step t, 1 is t+1.")
    ranks: list[int] = Field(description="Global ranks (GPUs) that run the node.")
    shard: int | None = Field(default=None, description="SP shard, attention-DP group or expert rank the node covers.")
    draft_pass: int | None = Field(
        default=None,
        ge=0,
        description="Speculative decoding: the draft pass (0 to K-1) of the drafter this decode node belongs to; "
        "None for the target model's own nodes (its verify pass).",
    )
    category: NodeCategory | None = Field(
        default=None,
        description="compute, communication or control (routing, KV cache, step boundaries); derived from kind "
        "when absent, and it must agree with kind when given.",
    )

    @model_validator(mode="after")
    def _category_matches_kind(self) -> _NodeBase:
        expected = category_of(str(getattr(self, "kind", "")))
        if self.category is None:
            object.__setattr__(self, "category", expected)
        elif self.category != expected:
            raise ValueError(
                f"category '{self.category}' contradicts kind '{getattr(self, 'kind', '')}' (expected '{expected}')"
            )
        return self


class ComputeNode(_NodeBase):
    """Arithmetic on one or more ranks: a TP operator is one node mapped to its whole TP group."""

    kind: ComputeKind = Field(description="Compute operation class.")
    op: str = Field(
        description="Role in the block: qkv_proj, attention, o_proj, residual_add, post_attn_norm, gate_up_proj, ..."
    )
    parallel: Parallel = Field(default="replicated", description="How the operator is split over its ranks.")
    partial: bool = Field(
        default=False, description="True when the output is a partial sum that must be reduced before use."
    )
    dtype: DType = Field(default="bf16", description="Arithmetic format.")
    shape: dict[str, int] = Field(
        default_factory=dict, description="Per-rank problem shape, e.g. GEMM m/n/k or attention q_len/kv_len/heads."
    )
    flops: float = Field(default=0.0, ge=0, description="FLOPs per rank.")
    bytes_read: float = Field(default=0.0, ge=0, description="HBM bytes read per rank (weights, activations, KV).")
    bytes_written: float = Field(default=0.0, ge=0, description="HBM bytes written per rank.")


class CommNode(_NodeBase):
    """An explicit collective or point-to-point transfer among ``ranks``."""

    kind: CommKind = Field(description="Collective or transfer type.")
    purpose: Purpose = Field(description="Why it exists: tp_reduce, ep_dispatch, pp_activation, ...")
    peers: list[int] = Field(
        default_factory=list, description="send: destination ranks; recv: source ranks; kv_transfer: decode ranks."
    )
    message_bytes: float = Field(
        default=0.0,
        ge=0,
        description="Size of the whole tensor the operation moves, as one rank sees it: all-reduce and reduce-scatter "
        "input, all-gather output, all-to-all total sent by one rank, send/recv/kv_transfer payload per rank.",
    )
    dtype: DType = Field(default="bf16", description="Format of the data moved.")
    scope: LinkScope = Field(default="intra_node", description="Link crossed: inside a node or across the network.")


class StateNode(_NodeBase):
    """KV-cache reads and updates, and the step boundaries of decode."""

    kind: StateKind = Field(description="kv_read, kv_write or step_boundary.")
    kv_state: str | None = Field(
        default=None, description="Identity of the KV-cache object touched (per microbatch and layer)."
    )
    tokens: int = Field(default=0, ge=0, description="Tokens per sequence read (kv_read) or written (kv_write).")
    bytes: float = Field(default=0.0, ge=0, description="HBM bytes moved per rank.")
    boundary: Literal["step_start", "step_end"] | None = Field(
        default=None, description="For step_boundary: which end of the step."
    )


Node = Annotated[ComputeNode | CommNode | StateNode, Field(discriminator="kind")]


class Edge(Contract):
    """A dependency: ``dst`` may start only after ``src`` finished."""

    src: str = Field(description="Producer node id.")
    dst: str = Field(description="Consumer node id.")
    kind: EdgeKind = Field(
        description="data (tensor flows), pipeline (across stages), sync (ordering/visibility), state (KV cache)."
    )


class DAGMeta(Contract):
    """What the DAG was built from, so that it can be checked and priced on its own."""

    model: ModelSpec = Field(description="The model the graph computes.")
    gpu: str = Field(description="GPU catalog name (of the prefill pool when decode_gpu is set).")
    decode_gpu: str | None = Field(
        default=None,
        description="GPU catalog name of the decode pool when it is another type: the decode ranks then sit on "
        "nodes of their own (KV-5); None: every rank is gpu.",
    )
    gpus: int = Field(ge=1, description="GPUs of the deployment (all replicas, both pools).")
    gpus_per_node: int = Field(ge=1, description="GPUs per node, for placing ranks on links.")
    cluster: Cluster | None = Field(
        default=None, description="The cluster the graph was built for, so it can be priced alone."
    )
    strategy: Strategy = Field(description="Degrees per phase.")
    workload: Workload = Field(description="Lengths and batch the shapes were computed for.")
    stage_layers: dict[str, list[list[int]]] = Field(description="Per phase, the layers each pipeline stage holds.")
    rank_pools: dict[str, list[int]] = Field(description="Per phase, the ranks of the drawn replica.")
    collapsed: bool = Field(
        default=False, description="True for a layer-collapsed view (one representative layer per stage)."
    )


class DAG(Contract):
    """A parallel strategy DAG for prefill and one decode step."""

    schema_version: Literal["1"] = Field(description="Version of this contract.")
    meta: DAGMeta = Field(description="Provenance and the facts needed to check and price the graph.")
    nodes: list[Node] = Field(description="Every compute, communication and state node.")
    edges: list[Edge] = Field(description="Typed dependencies between nodes.")
