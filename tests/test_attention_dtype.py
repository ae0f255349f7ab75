"""FP8 attention (``--attention-dtype fp8``): the attention kernels multiply an FP8 KV cache on FP8 tensor cores, as
FlashMLA's FP8 decode kernel and TensorRT-LLM's FP8 context FMHA do. It needs an FP8 KV cache and FP8 tensor cores,
and it prices decode attention at the format's own peak and efficiency."""

from __future__ import annotations

import pytest
from cli_helpers import run_cli

from shardplan.contracts.dag import ComputeNode
from shardplan.errors import InputError
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.catalogs.weight_formats import with_attention_dtype
from shardplan.tools.cost import op_time
from shardplan.tools.cost.measured.queries import _attention_query
from shardplan.tools.cost.profiles import profile_for


def _decode_attention(dtype: str, q_len: int = 2, heads: int = 128, batch: int = 48, kv_len: int = 4864) -> ComputeNode:
    flops = 2.0 * batch * q_len * kv_len * heads * (2 * 512 + 64)
    return ComputeNode(id="a", name="attention", phase="decode", ranks=[0], kind="attention", op="attention",
                       dtype=dtype, shape={"batch": batch, "q_len": q_len, "kv_len": kv_len, "heads": heads},
                       flops=flops, bytes_read=batch * kv_len * 576.0, bytes_written=0.0)


def test_fp8_attention_needs_an_fp8_kv_cache_and_fp8_tensor_cores() -> None:
    with pytest.raises(InputError) as raised:
        with_attention_dtype(load_model("deepseek-ai/DeepSeek-V3"), "fp8", "H20")
    assert raised.value.field == "attention_dtype" and "--kv-dtype fp8" in str(raised.value)
    with pytest.raises(InputError, match="no FP8 tensor cores"):
        with_attention_dtype(load_model("llama-3.1-8b", kv_dtype="fp8"), "fp8", "A100")
    spec = with_attention_dtype(load_model("deepseek-ai/DeepSeek-V3", kv_dtype="fp8"), "fp8", "H20")
    assert spec.attention_dtype == "fp8"
    with pytest.raises(ValueError, match="kv_dtype is bf16"):
        type(spec).model_validate({**load_model("llama-3.1-8b").model_dump(), "attention_dtype": "fp8"})


def test_the_cli_names_the_option_and_exits_2() -> None:
    result = run_cli("plan", "-m", "llama-3.1-8b", "--gpu", "H100", "--gpus", "1", "--attention-dtype", "fp8")
    assert result.returncode == 2
    assert "--kv-dtype fp8" in result.stderr and "Traceback" not in result.stderr


def test_decode_attention_on_the_h20_runs_at_its_measured_kernel_efficiency_per_format() -> None:
    cluster = make_cluster("H20", 1)
    gpu = cluster.gpu
    efficiency = profile_for(gpu).attention.decode_max_efficiency
    assert efficiency is not None
    bf16, fp8 = (op_time.compute_time_s(_decode_attention(d), cluster) for d in ("bf16", "fp8"))
    # compute-bound at this batch: the time ratio is that of peak x efficiency
    expected = (gpu.peak_flops("fp8") * efficiency["fp8"]) / (gpu.peak_flops("bf16") * efficiency["bf16"])
    assert bf16 / fp8 == pytest.approx(expected, rel=0.02)
    # a query tile part empty (16 rows of FlashMLA's 64) reaches a quarter of the full tile's share
    small = _decode_attention("bf16", q_len=1, heads=16)
    full = _decode_attention("bf16", q_len=1, heads=64)
    assert op_time.compute_time_s(small, cluster) == pytest.approx(op_time.compute_time_s(full, cluster), rel=0.05)


def test_without_a_measured_decode_kernel_fp8_takes_the_gemm_curve_at_the_fp8_peak() -> None:
    cluster = make_cluster("H100", 1)
    assert profile_for(cluster.gpu).attention.decode_max_efficiency is None
    bf16, fp8 = (op_time.compute_time_s(_decode_attention(d), cluster) for d in ("bf16", "fp8"))
    rows = 2 * 128
    expected = (cluster.gpu.peak_flops("fp8") * op_time.gemm_efficiency(rows, "fp8", gpu=cluster.gpu)) / (
        cluster.gpu.peak_flops("bf16") * op_time.gemm_efficiency(rows, "bf16", gpu=cluster.gpu))
    assert bf16 / fp8 == pytest.approx(expected, rel=0.05)
    # a GPU without FP8 tensor cores multiplies in bf16 whatever the node says
    a100 = make_cluster("A100", 1)
    assert op_time.compute_time_s(_decode_attention("fp8"), a100) == op_time.compute_time_s(
        _decode_attention("bf16"), a100)


def test_the_measured_tables_time_fp8_prompts_with_the_fp8_context_fmha() -> None:
    spec = load_model("llama-3.1-8b", kv_dtype="fp8")
    prefill = ComputeNode(id="p", name="attention", phase="prefill", ranks=[0], kind="attention", op="attention",
                          dtype="fp8", shape={"batch": 1, "q_len": 1024, "kv_len": 1024, "heads": 32},
                          flops=1.0, bytes_read=1.0, bytes_written=0.0)
    query = _attention_query(prefill, spec)
    assert query is not None and query.op == "context_attention" and query.args[3] == "fp8"
    plain = _attention_query(prefill.model_copy(update={"dtype": "bf16"}), spec)
    assert plain is not None and plain.args[3] == "bfloat16"


def test_the_builder_marks_the_attention_nodes_with_the_format() -> None:
    from shardplan.contracts.strategy import parse_strategy
    from shardplan.contracts.workload import Workload
    from shardplan.tools.builder.build import build_dag

    spec = with_attention_dtype(load_model("llama-3.1-8b", kv_dtype="fp8"), "fp8", "H100")
    dag = build_dag(spec, make_cluster("H100", 1), parse_strategy("tp=1"), Workload(isl=128, osl=16, batch=1))
    kinds = {node.dtype for node in dag.nodes if getattr(node, "kind", None) == "attention"}
    assert kinds == {"fp8"}


def test_the_api_takes_it_and_a_chat_follow_up_keeps_it() -> None:
    from shardplan.agent.parse.plan_request import to_plan_request
    from shardplan.agent.parse.request import parse_request
    from shardplan.agent.understand import _given
    from shardplan.tools.api.arguments import RequestArgs

    given = RequestArgs(model="deepseek-v3", gpu="H20", gpus=16, kv_dtype="fp8", attention_dtype="fp8").to_request()
    assert given.attention_dtype == "fp8"
    request = to_plan_request(parse_request("now with 32 GPUs", _given(given)))
    assert request.gpus == 32 and request.attention_dtype == "fp8" and request.kv_dtype == "fp8"


def test_the_plan_says_where_fp8_attention_is_priced() -> None:
    from shardplan.contracts.plan import PlanRequest
    from shardplan.contracts.workload import Workload
    from shardplan.tools.planning.assumptions import request_assumptions

    given = {"isl", "osl", "gpu", "batch", "objective", "weight_dtype", "kv_dtype"}
    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=1, kv_dtype="fp8", attention_dtype="fp8",
                          workload=Workload(isl=512, osl=64, batch=1))
    lines = request_assumptions(request, given)
    assert any(line.startswith("attention in FP8") and "bf16 math" in line for line in lines)
    plain = request.model_copy(update={"attention_dtype": None})
    assert not any("attention in FP8" in line for line in request_assumptions(plain, given))
