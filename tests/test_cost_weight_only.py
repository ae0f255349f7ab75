"""Weight-only formats: 4-bit weights on a GPU without FP4 tensor cores multiply at the bf16 rate."""

from __future__ import annotations

from shardplan.contracts.dag import ComputeNode
from shardplan.tools.builder import ops
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.cost.op_time import compute_dtype, compute_time_s


def _gemm(m: int, weight_dtype: str, weight_bytes: float) -> ComputeNode:
    work = ops.gemm(m, 8192, 8192, weight_bytes, 2.0)
    return ComputeNode(id=f"t/{weight_dtype}/{m}", name="gemm", phase="prefill", ranks=[0], kind="linear",
                       op="gemm", dtype=weight_dtype, shape=dict(work.shape), flops=work.flops,
                       bytes_read=work.bytes_read, bytes_written=m * 8192 * 2.0)


def test_a_format_the_tensor_cores_lack_computes_at_the_activations_precision() -> None:
    assert compute_dtype("fp4", make_cluster("H100", 1).gpu) == "bf16"
    assert compute_dtype("fp4", make_cluster("MI300X", 1).gpu) == "bf16"
    assert compute_dtype("fp8", make_cluster("A100", 1).gpu) == "bf16"
    assert compute_dtype("fp8", make_cluster("H100", 1).gpu) == "fp8"
    assert compute_dtype("fp4", make_cluster("B200", 1).gpu) == "fp4"


def test_a_compute_bound_4bit_gemm_is_no_faster_than_bf16_without_fp4_tensor_cores() -> None:
    """At 8192 rows the GEMM is compute-bound: on Hopper and MI300X the 4-bit weights save bytes, not
    FLOP time (weight-only, W4A16); on Blackwell the FP4 tensor cores make it faster."""
    for gpu in ("H100", "MI300X"):
        cluster = make_cluster(gpu, 1)
        four_bit = compute_time_s(_gemm(8192, "fp4", 0.5), cluster)
        sixteen_bit = compute_time_s(_gemm(8192, "bf16", 2.0), cluster)
        assert four_bit >= 0.99 * sixteen_bit
    blackwell = make_cluster("B200", 1)
    assert compute_time_s(_gemm(8192, "fp4", 0.5), blackwell) < 0.75 * compute_time_s(_gemm(8192, "bf16", 2.0),
                                                                                       blackwell)


def test_a_one_row_4bit_gemm_still_gains_from_reading_fewer_bytes() -> None:
    cluster = make_cluster("H100", 1)
    assert compute_time_s(_gemm(1, "fp4", 0.5), cluster) < 0.8 * compute_time_s(_gemm(1, "bf16", 2.0), cluster)
