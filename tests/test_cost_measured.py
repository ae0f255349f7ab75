"""The measured backend (aiconfigurator-core's kernel tables), its fallback to the roofline, and what
every cost report says about how it was priced."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shardplan.contracts.dag import CommNode
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.estimate import estimate_cost
from shardplan.tools.cost.exchange import engine_exchange
from shardplan.tools.cost.measured.database import measured_available, measured_tables
from shardplan.tools.cost.op_time import collective_time_s, engine_allreduce_s

needs_tables = pytest.mark.skipif(
    not measured_available(), reason="aiconfigurator-core is not installed (Linux x86-64 wheels only)"
)
QWEN32 = Workload(isl=1024, osl=128, batch=1)


def cost_of(model: str, gpu: str, gpus: int, spec: str, workload: Workload = QWEN32, backend: str = "auto"):
    cluster = make_cluster(gpu, gpus)
    dag = build_dag(load_model(model), cluster, parse_strategy(spec), workload)
    return estimate_cost(dag, cluster, backend)  # type: ignore[arg-type]


def aic_tpot_ms(model: str, tp: int) -> float:
    """AIConfigurator's own estimate of one decode step (its estimator over the same tables)."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    handle = EngineHandle.compile(model, "h200_sxm", "vllm", backend_version="current", tp_size=tp)
    _, decode_ms, _ = handle.run_static(batch_size=1, isl=1024, osl=128)
    return decode_ms / 127


@needs_tables
def test_qwen3_32b_tp8_beats_tp4_at_batch_1_and_matches_the_measured_estimate() -> None:
    tp8 = cost_of("Qwen/Qwen3-32B", "H200", 8, "tp=8")
    tp4 = cost_of("Qwen/Qwen3-32B", "H200", 4, "tp=4")
    assert tp8.figures.tpot_ms < tp4.figures.tpot_ms
    assert tp8.pricing is not None and tp8.pricing.backend == "measured"
    assert tp8.pricing.decode_measured_share > 0.5
    assert "h200_sxm/vllm" in (tp8.pricing.data or "")
    reference = aic_tpot_ms("Qwen/Qwen3-32B", 8)
    assert abs(tp8.figures.tpot_ms / reference - 1) < 0.15


@needs_tables
def test_the_engine_selects_its_own_tables() -> None:
    vllm = cost_of("Qwen/Qwen3-32B", "H200", 8, "tp=8")
    trtllm = cost_of("Qwen/Qwen3-32B", "H200", 8, "tp=8", QWEN32.model_copy(update={"engine": "trtllm"}))
    assert vllm.pricing is not None and trtllm.pricing is not None
    assert "/trtllm " in (trtllm.pricing.data or "") and "/vllm " in (vllm.pricing.data or "")
    assert trtllm.figures.tpot_ms != vllm.figures.tpot_ms


@needs_tables
def test_measured_and_roofline_reports_state_their_own_error() -> None:
    measured = cost_of("meta-llama/Llama-3.1-8B", "H100", 1, "tp=1")
    roofline = cost_of("meta-llama/Llama-3.1-8B", "H100", 1, "tp=1", backend="roofline")
    assert measured.pricing is not None and roofline.pricing is not None
    assert "measured backend" in measured.pricing.error and "roofline backend" in roofline.pricing.error
    assert roofline.pricing.prefill_measured_share == 0.0 and roofline.pricing.data is None
    assert any(note.startswith("priced from measured kernel data") for note in measured.notes)


def test_without_the_package_everything_is_priced_by_the_roofline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide aiconfigurator-core (importing it then fails); the report says why the roofline priced it."""
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    measured_tables.cache_clear()
    try:
        assert not measured_available()
        report = cost_of("Qwen/Qwen3-32B", "H200", 8, "tp=8")
    finally:
        measured_tables.cache_clear()
    assert report.pricing is not None and report.pricing.backend == "roofline"
    assert "not installed" in report.pricing.why_roofline
    assert report.pricing.decode_measured_share == 0.0 and report.figures.tpot_ms > 0


def test_a_gpu_outside_the_database_inherits_the_closest_profile_and_says_so() -> None:
    report = cost_of("Qwen/Qwen3-32B", "MI300X", 8, "tp=8")
    assert report.pricing is not None and report.pricing.backend == "roofline"
    assert "MI300X is not in the measured database" in report.pricing.why_roofline
    assert any(note.startswith("priced by the") for note in report.notes)


def test_help_does_not_import_the_measured_database() -> None:
    code = (
        "import atexit, sys; atexit.register(lambda: print('imported:', 'aiconfigurator_core' in sys.modules)); "
        "sys.argv = ['shardplan', '--help']; from shardplan.cli.main import main; main()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert out.strip().endswith("imported: False")


def test_engine_allreduce_is_cheaper_than_a_ring_for_small_messages_only() -> None:
    cluster = make_cluster("H200", 8)
    bandwidth = cluster.intra_node_bandwidth_gb_per_s * 1e9
    small, large = 16 * 1024.0, 256 * 2**20
    ring_small = 2 * 7 / 8 * small / bandwidth + 8 * 5e-6  # a ring pays one step per rank
    assert engine_allreduce_s(small, 8, 5e-6, bandwidth) < ring_small
    # Large messages: one-shot reads every peer's whole buffer, so two-shot (bandwidth-optimal) wins.
    assert engine_allreduce_s(large, 8, 5e-6, bandwidth) == pytest.approx(2 * 5e-6 + 2 * 7 / 8 * large / bandwidth)
    node = CommNode(id="ar", name="ar", phase="decode", ranks=list(range(8)), kind="all_reduce", purpose="tp_reduce",
                    message_bytes=small)
    assert collective_time_s(node, cluster) > 0


def test_expert_exchange_follows_what_the_engines_run() -> None:
    model = load_model("Qwen/Qwen3-30B-A3B")
    dispatch = CommNode(id="d", name="dispatch", phase="decode", ranks=[0, 1, 2, 3], kind="all_to_all",
                        purpose="ep_dispatch", message_bytes=4 * 8 * 2048 * 2.0 / 4)
    tp_attention = parse_strategy("tp=4,ep=4").decode
    exchanged = engine_exchange(dispatch, model, tp_attention, 8)
    assert exchanged is not None and exchanged.message_bytes == 0.0  # every rank already holds every token
    combine = dispatch.model_copy(update={"purpose": "ep_combine"})
    reduced = engine_exchange(combine, model, tp_attention, 8)
    assert reduced is not None and reduced.kind == "all_reduce"
    assert reduced.message_bytes == pytest.approx(4 * 2048 * 2.0)  # the layer's output, not its top-k copies
    data_parallel = parse_strategy("adp=4,ep=4").decode
    gathered = engine_exchange(dispatch, model, data_parallel, 8)
    assert gathered is not None and gathered.kind == "all_gather"
    across = dispatch.model_copy(update={"ranks": [0, 8]})
    assert engine_exchange(across, model, tp_attention, 8) is None  # across nodes: a real all-to-all


def test_shared_experts_reduce_with_the_routed_experts_as_the_engines_do() -> None:
    model = load_model("deepseek-ai/DeepSeek-V3")
    shared = CommNode(id="s", name="s", phase="decode", ranks=list(range(8)),
                      kind="all_reduce", purpose="shared_expert_reduce", message_bytes=8 * 7168 * 2.0)
    fused = engine_exchange(shared, model, parse_strategy("tp=8").decode, 8)
    assert fused is not None and fused.message_bytes == 0.0
    in_node_ep = engine_exchange(shared, model, parse_strategy("tp=8,ep=8").decode, 8)
    assert in_node_ep is not None and in_node_ep.message_bytes == 0.0  # the combine became an all-reduce
    across = shared.model_copy(update={"ranks": list(range(16))})
    assert engine_exchange(across, model, parse_strategy("tp=16,ep=16").decode, 8) is None  # all-to-all combine
    attention = shared.model_copy(update={"name": "shared_experts.all_reduce", "purpose": "tp_reduce"})
    assert engine_exchange(attention, model, parse_strategy("tp=8").decode, 8) is None


@needs_tables
@pytest.mark.parametrize(
    ("weight_dtype", "gpu", "layout", "engine", "first", "other"),
    [
        # DeepSeek-V3's FP8 checkpoint is block-scaled; the SGLang tables hold its MoE shapes only that way.
        ("fp8", "H200", "tp=8", "sglang", "fp8", "fp8_block"),
        # NVIDIA's FP4 DeepSeek checkpoints are NVFP4; B200's TensorRT-LLM tables hold DeepSeek's MoE shapes only
        # under that scaling, so the MXFP4-first lookup falls back to it rather than to the roofline.
        ("fp4", "B200", "tp=8,ep=8", "trtllm", "w4a16_mxfp4", "nvfp4"),
    ],
)
def test_deepseek_experts_are_priced_from_the_scaling_its_tables_hold(
    weight_dtype: str, gpu: str, layout: str, engine: str, first: str, other: str
) -> None:
    from shardplan.tools.cost.measured.queries import Query, other_scaling
    from shardplan.tools.cost.pricing import make_pricer

    model = load_model("deepseek-ai/DeepSeek-V3", weight_dtype=weight_dtype)
    cluster = make_cluster(gpu, 8)
    strategy = parse_strategy(layout)
    dag = build_dag(model, cluster, strategy, Workload(isl=1024, osl=128, batch=8, engine=engine))
    pricer = make_pricer(cluster, model, {"prefill": strategy.prefill, "decode": strategy.decode}, engine)
    pricer.prepare(dag.nodes)
    experts = [n.id for n in dag.nodes if n.phase == "decode" and getattr(n, "op", "") == "routed_experts"]
    assert experts and all(e in pricer.measured for e in experts)
    query = Query("moe", (7168, 2048, 8, 256, 8, 1, first, "power_law_1.01"), False, 8)
    fallback = other_scaling(query)
    assert fallback is not None and fallback.args[6] == other and other_scaling(fallback) == query
    assert other_scaling(Query("gemm", (4096, 4096, "bfloat16"), False, 8)) is None
