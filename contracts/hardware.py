"""GPU and Cluster: what the cost model needs to know about the machines."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from shardplan.contracts.common import Contract
from shardplan.contracts.units import GBPerSecond, rename_old_fields

__all__ = ["GPU", "Cluster", "LinkScope"]

LinkScope = Literal["intra_node", "inter_node", "local"]


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


class Cluster(Contract):
    """GPUs of one kind arranged in nodes; link figures are per GPU and unidirectional."""

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
        return self

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
