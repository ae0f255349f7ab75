"""DeepSeek-V3's block-scaled FP8 GEMMs under vLLM are priced at kernel time, not at the host dispatch that vLLM's
eagerly timed block-FP8 rows record (see ``_EAGER_BLOCK_FP8_GEMM_ENGINES`` in tools/cost/measured/queries.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from shardplan.contracts.dag import ComputeNode
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder import ops
from shardplan.tools.builder.build import build_phase_sample
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.measured.database import measured_available, measured_tables
from shardplan.tools.cost.measured.lookup import lookup_seconds
from shardplan.tools.cost.measured.queries import Query, node_query
from shardplan.tools.cost.pricing import make_pricer

needs_tables = pytest.mark.skipif(
    not measured_available(), reason="aiconfigurator-core is not installed (Linux x86-64 wheels only)"
)
MEASURED = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "gpu" / "kernels_h200.json"
DSV3 = "deepseek-ai/DeepSeek-V3"


def _gemm_node(m: int, n: int, k: int) -> ComputeNode:
    work = ops.gemm(m, n, k, 1, 2)
    return ComputeNode(id=f"decode/g{m}x{n}x{k}", name="gemm", kind="linear", op="gemm", phase="decode", ranks=[0],
                       dtype="fp8", shape=work.shape, flops=work.flops, bytes_read=work.bytes_read,
                       bytes_written=work.bytes_written)


def test_vllm_looks_block_fp8_gemms_up_per_tensor_and_keeps_the_moe_and_other_engines_block_scaled() -> None:
    model = load_model(DSV3)
    assert model.weight_dtype == "fp8" and model.mla is not None
    phase = parse_strategy("tp=8,ep=8").decode
    node = _gemm_node(16, 5120, 7168)
    vllm, sglang = node_query(node, model, phase, 8, "vllm"), node_query(node, model, phase, 8, "sglang")
    assert vllm is not None and vllm.args[2] == "fp8"
    assert sglang is not None and sglang.args[2] == "fp8_block"
    moe = model.moe
    assert moe is not None
    work = ops.expert_ffn(model, 16, moe.num_experts // 8, 8, 1)
    experts = ComputeNode(id="decode/e", name="experts", kind="expert", op="routed_experts", phase="decode",
                          ranks=[0], dtype="fp8", shape=work.shape, flops=work.flops, bytes_read=work.bytes_read,
                          bytes_written=work.bytes_written)
    query = node_query(experts, model, phase, 8, "vllm")
    assert query is not None and query.args[6] == "fp8_block"  # vLLM's MoE rows were timed in CUDA graphs


@needs_tables
def test_deepseek_decode_gemms_under_vllm_cost_what_an_h200_measured() -> None:
    """Every DeepSeek-V3 FP8 GEMM shape the H200 measured at decode sizes (1 to 128 tokens), priced as a plan prices
    its linear nodes under vLLM: at most twice the measured kernel time at the median (the host-timed rows cost
    2.6 times it: 55-89 us for kernels of 9-73 us)."""
    rows = [r for r in json.loads(MEASURED.read_text())["rows"]
            if r["kind"] == "gemm" and r["shape"] == "deepseek-v3 adp" and r["dtype"] == "fp8" and r["m"] <= 128]
    assert len(rows) > 40
    model, cluster = load_model(DSV3), make_cluster("H200", 8)
    pricer = make_pricer(cluster, model, {"decode": parse_strategy("tp=1").decode}, "vllm")
    nodes = [_gemm_node(r["m"], r["n"], r["k"]) for r in rows]
    pricer.prepare(nodes)
    assert all(node.id in pricer.measured for node in nodes)
    ratios = [pricer.node_time_s(node) * 1e6 / row["us"] for node, row in zip(nodes, rows, strict=True)]
    assert statistics.median(ratios) < 2.0


def _linear_seconds(tokens: int) -> tuple[float, list[tuple[int, int]]]:
    """One DeepSeek-V3 decode layer's GEMM time (tp=8, ep=8, H200, vLLM) at ``tokens`` sequences, and its shapes."""
    model, cluster = load_model(DSV3), make_cluster("H200", 8)
    strategy = parse_strategy("tp=8,ep=8")
    workload = Workload(isl=1024, osl=1024, batch=tokens, batching="static")
    graph, picks, _ = build_phase_sample(model, cluster, "decode", strategy.decode, workload)
    pricer = make_pricer(cluster, model, {"decode": strategy.decode}, "vllm")
    pricer.prepare(graph.nodes)
    gemms = [n for n in graph.nodes if isinstance(n, ComputeNode) and n.ranks[0] == 0 and n.layer is not None
             and n.dtype == "fp8" and (n.kind == "linear" or (n.kind == "expert" and n.op != "routed_experts"))]
    assert gemms and all(n.id in pricer.measured for n in gemms)
    seconds = sum(pricer.node_time_s(n) * picks[n.layer] for n in gemms if n.layer in picks)
    return seconds, sorted({(n.shape["n"], n.shape["k"]) for n in gemms})


@needs_tables
def test_deepseek_decode_linear_work_grows_from_16_to_32_tokens_as_its_graph_timed_kernels_do() -> None:
    """Between 16 and 32 tokens a decode step's GEMMs read the same weights: the step's linear time may grow no more
    than the fastest-growing of its shapes does in the graph-timed kernel rows (the eager block-FP8 rows grew 1.43x,
    from FlashInfer's dispatch to DeepGEMM's, where these rows grow at most 1.23x)."""
    at16, shapes = _linear_seconds(16)
    at32, _ = _linear_seconds(32)
    tables = measured_tables("H200", "vllm")
    assert tables is not None
    growth = []
    for n, k in shapes:
        answers = lookup_seconds(tables, [Query("gemm", (n, k, "fp8"), False, m) for m in (16, 32)])
        small, large = (answers[Query("gemm", (n, k, "fp8"), False, m)] for m in (16, 32))
        assert small is not None and large is not None
        growth.append(large / small)
    assert at32 / at16 <= max(growth) + 1e-9
