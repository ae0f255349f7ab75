"""What a request with two GPU types (prefill on one, decode on the other) must satisfy before any search.

Two pools of different GPUs serve only split deployments: a colocated replica would need one GPU to be both
types. The KV cache a prefill worker writes is read as it is by the decode worker (vLLM's NIXL connector and
SGLang's Mooncake transfer move the blocks without converting them), so both GPUs must run attention on the
model's KV-cache format: a GPU whose datasheet has no FP8 (or FP4) tensor rate, as the catalog records it
(A100: "No native FP8 on Ampere"), cannot hold an FP8 cache written by the other pool.
"""

from __future__ import annotations

from shardplan.contracts.constraints import Constraints
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError

__all__ = ["check_two_pools", "LOW_PRECISION_KV"]

LOW_PRECISION_KV = ("fp8", "fp4")
"""KV-cache formats a GPU must support natively to attend over them (the catalog lists them in dense_tflops)."""


def check_two_pools(model: ModelSpec, cluster: Cluster, workload: Workload, constraints: Constraints | None) -> None:
    """Refuse a two-GPU-type request that cannot run as split pools; nothing for one GPU type.

    Raises:
        InputError: colocated serving asked for, a workload that cannot split (static batching, one output
            token), or a KV-cache format one of the two GPUs lacks.
    """
    if cluster.decode_pool is None:
        return
    decode = cluster.decode_pool.gpu.name
    if constraints is not None and constraints.serving == "colocated":
        raise InputError(
            f"-C colocated with --decode-gpu {decode}: two GPU types serve only split pools",
            field="decode_gpu",
            fix="leave out -C colocated, or --decode-gpu to share GPUs",
        )
    if workload.batching != "continuous" or workload.osl <= 1:
        why = "static batching" if workload.batching != "continuous" else f"osl={workload.osl} (no decode step)"
        raise InputError(
            f"--decode-gpu {decode} with {why}: split pools need continuous batching and an output beyond the "
            "first token",
            field="decode_gpu",
            fix="leave out --decode-gpu, or use continuous batching with --osl above 1",
        )
    if model.kv_dtype in LOW_PRECISION_KV:
        for gpu in (cluster.gpu, cluster.decode_pool.gpu):
            if model.kv_dtype not in gpu.dense_tflops:
                raise InputError(
                    f"{gpu.name} has no {model.kv_dtype} support (GPU catalog), so it cannot read the "
                    f"{model.kv_dtype} KV cache the other pool writes",
                    field="kv_dtype",
                    fix=f"give --kv-dtype bf16, or a GPU with {model.kv_dtype} for both pools",
                )
