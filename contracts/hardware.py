"""GPU and Cluster: what the cost model needs to know about the machines."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from shardplan.contracts.common import Contract
from shardplan.contracts.units import GBPerSecond, rename_old_fields
from shardplan.text import counted

__all__ = ["GPU", "Cluster", "DecodePool", "LinkScope", "PoolRole"]

LinkScope = Literal["intra_node", "inter_node", "local"]
PoolRole = Literal["prefill", "decode"]


class GPU(Contract):
    """One accelerator model, with datasheet figures (dense, not sparse, peak throughput)."""

    name: str = Field(description="Short catalog name, e.g. H100.")
    full_name: str = Field(description="Marketing name with form factor and memory.")
    vendor: Literal["nvidia", "amd", "other"] = Field(description="Maker.")
    memory_gb: float = Field(gt=0, description="HBM capacity in GB (1e9 bytes) as on the datasheet.")
    memory_bandwidth_gb_per_s: GBPerSecond = Field(
        description="Peak HBM bandwidth in GB/s (gigabytes); a string may carry its unit, e.g. '3.35 TB/s'."
    )
    dense_tflops: dict[str, float] = Field(
        description="Peak dense tensor throughput in TFLOP/s per dtype (bf16, fp8, ...)."
    )
    intra_node_bandwidth_gb_per_s: GBPerSecond = Field(
        description="Per-GPU unidirectional scale-up link bandwidth (NVLink, Infinity Fabric, PCIe) in GB/s "
        "(gigabytes); a string may carry its unit, e.g. '450GB/s'."
    )
    intra_node_latency_us: float = Field(
        ge=0, description="Small-message collective latency inside a node, microseconds."
    )
    gpus_per_node: int = Field(default=8, ge=1, description="GPUs in a typical node of this model.")
    inter_node_bandwidth_gb_per_s: GBPerSecond = Field(
        default=50.0,
        description="Typical per-GPU network bandwidth across nodes in GB/s (gigabytes); a string may carry its "
        "unit, e.g. '400Gbps' (gigabits, read as 50).",
    )
    inter_node_latency_us: float = Field(
        default=8.0, ge=0, description="Typical small-message latency across nodes, microseconds."
    )
    tdp_w: float | None = Field(default=None, description="Board power, watts.")
    source: str = Field(default="", description="Where the figures come from.")
    notes: str = Field(default="", description="How the figures were read (dense vs sparse, estimates).")

    @model_validator(mode="before")
    @classmethod
    def _renamed_fields(cls, data: Any) -> Any:
        return rename_old_fields(data, "gpu")

    def peak_flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for ``dtype``, falling back to the next wider floating-point format supported."""
        for candidate in (dtype, *_WIDER[dtype]):
            if candidate in self.dense_tflops:
                return self.dense_tflops[candidate] * 1e12
        return max(self.dense_tflops.values()) * 1e12


# Integer and floating-point tensor formats do not stand in for each other: fp8 on a GPU without
# fp8 support (A100) runs as bf16, not at the int8 rate.
_WIDER: dict[str, tuple[str, ...]] = {
    "fp4": ("fp8", "bf16", "fp16"),
    "fp8": ("bf16", "fp16"),
    "int8": ("bf16", "fp16"),
    "fp16": ("bf16",),
    "bf16": ("fp16",),
    "fp32": ("bf16", "fp16"),
}


class DecodePool(Contract):
    """The decode pool of a cluster with two GPU types: split deployments run their decode workers on nodes of
    this GPU and their prefill workers on nodes of the cluster's own ``gpu``. A node holds one GPU type; the
    cluster's network (its inter-node figures) joins the two pools and carries each request's KV cache."""

    gpu: GPU = Field(description="The accelerator of the decode pool's nodes.")
    gpus: int | None = Field(
        default=None,
        ge=1,
        description="Most GPUs the decode pool may use (the prefill pool then has the rest of the cluster); None: "
        "any share of the cluster's GPU count, each pool on nodes of its own type.",
    )
    intra_node_bandwidth_gb_per_s: GBPerSecond = Field(
        description="Per-GPU unidirectional bandwidth inside a decode node in GB/s (gigabytes), or with its unit."
    )
    intra_node_latency_us: float = Field(ge=0, description="Collective latency inside a decode node, microseconds.")


class Cluster(Contract):
    """GPUs arranged in nodes, of one kind, or of two kinds with ``decode_pool`` (prefill nodes of ``gpu``, decode
    nodes of the pool's GPU); link figures are per GPU and unidirectional."""

    name: str = Field(default="cluster", description="A label.")
    gpu: GPU = Field(description="The accelerator in every slot.")
    gpus_per_node: int = Field(ge=1, description="GPUs joined by the fast scale-up link.")
    nodes: int = Field(ge=1, description="Nodes joined by the network.")
    intra_node_bandwidth_gb_per_s: GBPerSecond = Field(
        description="Per-GPU unidirectional bandwidth inside a node in GB/s (gigabytes), or a string with its unit "
        "('450GB/s', '3600 Gb/s')."
    )
    intra_node_latency_us: float = Field(ge=0, description="Collective latency inside a node, microseconds.")
    inter_node_bandwidth_gb_per_s: GBPerSecond = Field(
        description="Per-GPU unidirectional bandwidth across nodes in GB/s (gigabytes), or a string with its unit "
        "('400Gbps' for a 400 Gb/s NIC is 50 GB/s)."
    )
    inter_node_latency_us: float = Field(ge=0, description="Collective latency across nodes, microseconds.")
    description: str = Field(default="", description="Free text.")
    decode_pool: DecodePool | None = Field(
        default=None,
        description="A second GPU type for the decode workers of split deployments (only split deployments then "
        "run); None: every GPU is ``gpu``.",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed_fields(cls, data: Any) -> Any:
        return rename_old_fields(data, "cluster")

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if self.inter_node_bandwidth_gb_per_s > self.intra_node_bandwidth_gb_per_s * 4:
            raise ValueError(
                f"inter_node_bandwidth_gb_per_s={self.inter_node_bandwidth_gb_per_s:g} is far above "
                f"intra_node_bandwidth_gb_per_s={self.intra_node_bandwidth_gb_per_s:g}; figures are per GPU, "
                "unidirectional GB/s (gigabytes: a 400 Gb/s NIC is 50, or write '400Gbps')"
            )
        cap = self.decode_pool.gpus if self.decode_pool is not None else None
        if cap is not None:
            if cap >= self.world_size:
                raise ValueError(
                    f"decode_pool.gpus={cap} leaves no GPU of the {self.world_size} for the prefill pool"
                )
            per_node = self.gpus_per_node
            for name, count in (("decode", cap), ("prefill", self.world_size - cap)):
                if count > per_node and count % per_node:
                    raise ValueError(
                        f"the {name} pool's {counted(count, 'GPU')} do not fill whole nodes of {per_node}; each pool "
                        f"sits on "
                        "nodes of its own GPU type"
                    )
        return self

    @property
    def mixed(self) -> bool:
        """Whether prefill and decode workers run on two GPU types (only split deployments then run)."""
        return self.decode_pool is not None

    def gpu_of(self, role: PoolRole) -> GPU:
        """The GPU a split deployment's ``role`` workers run on."""
        return self.decode_pool.gpu if role == "decode" and self.decode_pool is not None else self.gpu

    def pool_budget(self, role: PoolRole) -> int:
        """The most GPUs ``role`` workers may use: the whole cluster for one type or an open share, else the
        decode pool's GPUs or the rest of the cluster."""
        cap = self.decode_pool.gpus if self.decode_pool is not None else None
        if cap is None:
            return self.world_size
        return cap if role == "decode" else self.world_size - cap

    def pool(self, role: PoolRole) -> Cluster:
        """The one-type cluster ``role`` workers run on: this cluster when it has one GPU type, else ``role``'s GPU
        with its scale-up links on nodes of the same size, as many GPUs as :meth:`pool_budget`, and the cluster's
        network."""
        if self.decode_pool is None:
            return self
        gpus = self.pool_budget(role)
        update: dict[str, Any] = {
            "decode_pool": None,
            "gpus_per_node": min(self.gpus_per_node, gpus),
            "nodes": -(-gpus // self.gpus_per_node),
            "name": f"{self.name} ({role} pool)",
        }
        if role == "decode":
            pool = self.decode_pool
            update |= {
                "gpu": pool.gpu,
                "intra_node_bandwidth_gb_per_s": pool.intra_node_bandwidth_gb_per_s,
                "intra_node_latency_us": pool.intra_node_latency_us,
            }
        return self.model_copy(update=update)

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    def node_of(self, rank: int) -> int:
        """The node that global ``rank`` sits on (ranks fill nodes in order)."""
        return rank // self.gpus_per_node

    def scope_of(self, ranks: list[int] | tuple[int, ...]) -> LinkScope:
        """Which link a group of ranks crosses: none (one rank), NVLink-class, or the network."""
        if len(set(ranks)) <= 1:
            return "local"
        nodes = {rank // self.gpus_per_node for rank in ranks}
        return "intra_node" if len(nodes) == 1 else "inter_node"
