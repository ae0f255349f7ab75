"""Time of one DAG node on its GPUs: a roofline for compute, latency plus bandwidth for communication.

Plain functions of a node and a cluster; the scheduler adds them up.
"""

from __future__ import annotations

import math

from shardplan.contracts.dag import CommNode, ComputeNode, StateNode
from shardplan.contracts.hardware import GPU, Cluster
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.tools.cost.calibration import Calibration, ProfileCal, calibration
from shardplan.tools.cost.profiles import profile_for

__all__ = [
    "compute_dtype",
    "gemm_efficiency",
    "compute_time_s",
    "engine_allreduce_s",
    "expert_load_factor",
    "layout_expert_factor",
    "collective_time_s",
    "node_time_s",
    "bytes_on_wire",
]


def gemm_efficiency(m: float, dtype: str, k: float | None = None, gpu: GPU | None = None) -> float:
    """Fraction of peak FLOP/s a GEMM with ``m`` rows and inner dimension ``k`` reaches on ``gpu``.

    Few rows leave tensor cores idle; a thin inner dimension (a weight split many ways by tensor
    parallelism) leaves too little work per tile to hide its loads. Without a GPU, the public-kernel
    profile answers.

    >>> 0.5 < gemm_efficiency(4096, "bf16") < 1.0
    True
    """
    cal = (profile_for(gpu) if gpu is not None else calibration()).gemm
    efficiency = cal.max_efficiency.get(dtype, cal.max_efficiency["bf16"]) * m / (m + cal.m_half)
    if k is not None and cal.k_half > 0:
        efficiency *= k / (k + cal.k_half)
    return efficiency


def compute_dtype(weight_dtype: str, gpu: GPU) -> str:
    """The precision a GEMM over ``weight_dtype`` weights multiplies in on ``gpu``.

    Its own where the GPU's tensor cores take that format. Otherwise the engines run it weight-only:
    the kernel widens each weight tile to the activations' bf16 in registers and multiplies in bf16
    (vLLM's Marlin kernels for AWQ/GPTQ int4 and for FP8 on Ampere, vLLM's Triton MXFP4 MoE on Hopper
    and ROCm, whose only activation dtype is bf16, TensorRT-LLM's Hopper MXFP4 MoE with bf16
    activations; NVIDIA's measured tables name the Hopper MXFP4 MoE mode ``w4a16``). Such a GEMM reads
    the narrow weights but computes at the bf16 rate and bf16 efficiency, not at a narrower format's.

    >>> from shardplan.tools.catalogs.gpus import gpu_catalog
    >>> compute_dtype("fp4", gpu_catalog()["H100"]), compute_dtype("fp4", gpu_catalog()["B200"])
    ('bf16', 'fp4')
    """
    if weight_dtype in gpu.dense_tflops or weight_dtype in ("bf16", "fp16", "fp32"):
        return weight_dtype
    return "bf16"


def _launch_s(node: ComputeNode | StateNode, phase: str) -> float:
    cal = calibration().launch
    per_kernel = (cal.decode_us if phase == "decode" else cal.prefill_us) * 1e-6
    return per_kernel * (1 + cal.extra_kernels.get(node.kind, 0))


DECODE_QUERY_TILE = 64
"""Query rows a decode attention kernel's tile holds: FlashMLA schedules ``s_q * h_q // h_kv`` query rows per KV head
in blocks of 64 (its README's ``get_mla_metadata``), so fewer rows leave the tile part empty."""


def _decode_attention_efficiency(node: ComputeNode, dtype: str, gpu: GPU, cal: Calibration | ProfileCal) -> float:
    """Share of ``dtype``'s peak a decode attention node reaches: the GPU's profile ``cal`` gives its measured kernel
    efficiency for ``dtype`` (scaled by how full the query tile is), else the GEMM's row-fill curve."""
    rows = node.shape.get("q_len", 1) * node.shape.get("heads", 1)
    measured = cal.attention.decode_max_efficiency or {}
    if dtype in measured:
        return measured[dtype] * min(1.0, rows / DECODE_QUERY_TILE)
    return gemm_efficiency(rows, dtype, gpu=gpu)


def compute_time_s(node: ComputeNode, cluster: Cluster) -> float:
    """Roofline time of a compute node on one of its ranks, plus kernel launch overhead."""
    gpu = cluster.gpu
    cal = profile_for(gpu)
    bandwidth = gpu.memory_bandwidth_gb_per_s * 1e9
    moved = node.bytes_read + node.bytes_written
    if node.kind == "attention":
        dtype = compute_dtype(node.dtype, gpu)
        if node.phase == "prefill":
            length = node.shape.get("kv_len", 1)
            efficiency = cal.attention.max_efficiency * length / (length + cal.attention.l_half)
            # FP8 kernels reach a smaller share of their format's peak than bf16 ones, as the GEMMs do.
            efficiency *= cal.gemm.max_efficiency.get(dtype, 1.0) / cal.gemm.max_efficiency["bf16"]
            memory_efficiency = cal.memory.efficiency
        else:
            efficiency = _decode_attention_efficiency(node, dtype, gpu, cal)
            memory_efficiency = cal.attention.decode_memory_efficiency
        flops_time = node.flops / (gpu.peak_flops(dtype) * efficiency)
    else:
        rows: float = node.shape.get("m", 1)
        if node.kind == "expert" and node.shape.get("experts"):
            rows = max(1.0, rows / node.shape["experts"])  # grouped GEMM: rows per expert set the tile fill
        dtype = compute_dtype(node.dtype, gpu)
        efficiency = gemm_efficiency(rows, dtype, node.shape.get("k"), gpu)
        if node.op == "routed_experts" and node.shape.get("n"):
            # A gated expert FFN is three GEMMs: gate and up (2/3 of the FLOPs) reduce over the hidden size
            # (``n``), only the down projection over the expert's intermediate slice (``k``, thin under
            # expert TP). The thin-k penalty applies to that third alone.
            up = gemm_efficiency(rows, dtype, node.shape["n"], gpu)
            efficiency = 1.0 / (2.0 / 3.0 / up + 1.0 / 3.0 / efficiency)
        if node.op == "routed_experts" and cal.moe.m_half is not None:
            # Grouped MoE kernels fill their (small) row tiles expert by expert: their own fill curve.
            efficiency *= (rows + cal.gemm.m_half) / (rows + cal.moe.m_half)
        flops_time = node.flops / (gpu.peak_flops(dtype) * efficiency) if node.flops else 0.0
        memory_efficiency = cal.memory.efficiency
    return max(flops_time, moved / (bandwidth * memory_efficiency)) + _launch_s(node, node.phase)


def expert_load_factor(ep: int, gpu: GPU, dispatched: bool = True, skewed: bool = True) -> float:
    """How much longer than the roofline of its mean share the routed experts of the busiest of ``ep`` expert ranks
    take: 1 without expert parallelism (one rank holds every expert).

    Under skewed routing (``skewed``) the busiest rank carries more than the mean load and the layer waits for it.
    Where the engine does not dispatch tokens to their experts' ranks (``dispatched`` False: every rank's fused MoE
    kernel sees every token of the layer), the kernel's own per-token work over all routed copies comes on top.

    >>> from shardplan.tools.catalogs.gpus import gpu_catalog
    >>> expert_load_factor(1, gpu_catalog()["H100"])
    1.0
    """
    moe = profile_for(gpu).moe
    doublings = math.log2(max(ep, 1))
    factor = 1.0 + moe.imbalance_per_doubling * doublings if skewed else 1.0
    return factor if dispatched else factor * (1.0 + moe.ep_overhead_per_doubling * doublings)


def layout_expert_factor(phase: PhaseStrategy, gpu: GPU) -> float:
    """:func:`expert_load_factor` of a phase's layout. Attention-DP ranks dispatch each token to its experts' ranks
    (DeepEP, all-to-all), so a rank's kernel sees only its share; under tensor-parallel attention every rank's fused
    kernel sees every token."""
    return expert_load_factor(phase.ep, gpu, dispatched=phase.adp > 1)


def bytes_on_wire(node: CommNode) -> float:
    """Bytes one rank sends for the operation (ring algorithms for collectives)."""
    n = max(len(node.ranks), 1)
    size = node.message_bytes
    if node.kind == "all_reduce":
        return 2.0 * (n - 1) / n * size
    if node.kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n * size
    if node.kind == "recv":
        return 0.0
    return size


def engine_allreduce_s(size: float, ranks: int, step_s: float, bandwidth: float) -> float:
    """The engines' custom all-reduce inside a node: one-shot (every rank reads every peer's buffer,
    one step) for small messages, two-shot (reduce-scatter then all-gather, two steps) for larger ones,
    whichever is faster.

    >>> engine_allreduce_s(16384, 8, 5e-6, 400e9) < engine_allreduce_s(16384, 8, 10e-6, 400e9)
    True
    """
    one_shot = step_s + (ranks - 1) * size / bandwidth
    two_shot = 2 * step_s + 2 * (ranks - 1) / ranks * size / bandwidth
    return min(one_shot, two_shot)


def collective_time_s(node: CommNode, cluster: Cluster) -> float:
    """Latency plus bandwidth time of a communication node on the links its ranks cross.

    Inside one node a collective runs at the scale-up link's bandwidth. A group that spans nodes runs
    hierarchically: the intra-node part on NVLink-class links and only the inter-node share over the
    network, each GPU with its own NIC, which is how NCCL and DeepEP behave on HGX systems.
    """
    cal = profile_for(cluster.gpu).collectives
    ranks = node.ranks if node.kind not in ("send", "recv", "kv_transfer") else node.ranks + node.peers
    per_node = cluster.gpus_per_node
    nodes = len({r // per_node for r in ranks})
    n = len(set(node.ranks)) if node.kind not in ("send", "recv", "kv_transfer") else 2
    if n <= 1 and node.kind not in ("send", "kv_transfer"):
        return 0.0
    intra_bw = cluster.intra_node_bandwidth_gb_per_s * 1e9 * cal.bandwidth_efficiency["intra_node"]
    inter_bw = cluster.inter_node_bandwidth_gb_per_s * 1e9 * cal.bandwidth_efficiency["inter_node"]
    factor = cal.latency_factor.get(node.kind, 1.0)
    alpha = (cluster.inter_node_latency_us if nodes > 1 else cluster.intra_node_latency_us) * 1e-6
    latency = factor * alpha * (1 + math.log2(max(n, 2)))
    size = node.message_bytes
    if node.kind in ("send", "recv"):
        if node.kind == "recv":
            return 0.0  # the matching send carries the transfer time
        bandwidth = inter_bw if nodes > 1 else intra_bw
        return latency + size / bandwidth
    if node.kind == "kv_transfer":
        return latency + size / (inter_bw if nodes > 1 else intra_bw)
    if nodes == 1:
        ring = latency + bytes_on_wire(node) / intra_bw
        if node.kind == "all_reduce" and 0 < size <= cal.engine_allreduce_max_bytes and cal.engine_allreduce_us > 0:
            return min(ring, engine_allreduce_s(size, n, cal.engine_allreduce_us * 1e-6, intra_bw))
        return ring
    local = max(n // nodes, 1)
    if node.kind == "all_to_all":
        off_node = size * (n - local) / n
        on_node = size * (local - 1) / n
        return latency + max(off_node / inter_bw, on_node / intra_bw)
    # Hierarchical: reduce/gather inside each node, then the 1/local share crosses the network.
    steps = 2.0 if node.kind == "all_reduce" else 1.0
    intra = steps * (local - 1) / local * size / intra_bw if local > 1 else 0.0
    inter = steps * (nodes - 1) / nodes * (size / local) / inter_bw
    return latency + intra + inter


def node_time_s(node: ComputeNode | CommNode | StateNode, cluster: Cluster) -> float:
    """Duration of any node in seconds. KV reads and step boundaries are dependency markers: the
    attention node already pays for reading the cache."""
    if isinstance(node, ComputeNode):
        return compute_time_s(node, cluster)
    if isinstance(node, CommNode):
        return collective_time_s(node, cluster)
    if node.kind == "kv_write":
        bandwidth = cluster.gpu.memory_bandwidth_gb_per_s * 1e9 * profile_for(cluster.gpu).memory.efficiency
        return node.bytes / bandwidth + _launch_s(node, node.phase)
    return 0.0
