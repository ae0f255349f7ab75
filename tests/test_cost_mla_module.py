"""An MLA layer's attention block costs the engine's measured module where its tables hold it
(tools/cost/measured/mla_block.py): the whole block in decode and prefill, a verify step and a prefill behind a cached
prefix as the module plus what their extra positions or keys add by the model's own node pricing."""

from __future__ import annotations

import pytest

from shardplan.contracts.dag import CommNode, ComputeNode, StateNode
from shardplan.contracts.speculation import Speculation
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_phase_sample
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.measured.database import measured_available, measured_tables
from shardplan.tools.cost.measured.lookup import lookup_seconds
from shardplan.tools.cost.measured.mla_block import BLOCK_NODES, mla_block_seconds
from shardplan.tools.cost.measured.queries import Query, mla_module_query
from shardplan.tools.cost.pricing import Backend, make_pricer

needs_tables = pytest.mark.skipif(
    not measured_available(), reason="aiconfigurator-core is not installed (Linux x86-64 wheels only)"
)
DSV3 = "deepseek-ai/DeepSeek-V3"


def _block(phase_name: str, workload: Workload, backend: Backend = "auto") -> tuple[dict[str, float], ComputeNode]:
    """Seconds of each node of the first sampled layer's attention block, and its attention node."""
    model, cluster = load_model(DSV3), make_cluster("H200", 8)
    strategy = parse_strategy("tp=8,ep=8")
    phase = strategy.decode if phase_name == "decode" else strategy.prefill
    graph, picks, _ = build_phase_sample(model, cluster, phase_name, phase, workload)
    pricer = make_pricer(cluster, model, {phase_name: phase}, "vllm", backend)
    pricer.prepare(graph.nodes)
    layer = min(picks)
    block = [n for n in graph.nodes if n.layer == layer and n.name in BLOCK_NODES]
    attention = next(n for n in block if isinstance(n, ComputeNode) and n.kind == "attention")
    return {n.name: pricer.node_time_s(n) for n in block}, attention


def _module_s(attention: ComputeNode) -> float:
    tables = measured_tables("H200", "vllm")
    query = mla_module_query(attention, load_model(DSV3))
    assert tables is not None and query is not None
    seconds = lookup_seconds(tables, [query])[query]
    assert seconds is not None
    return seconds


@needs_tables
@pytest.mark.parametrize("batch", [1, 16, 32])
def test_deepseek_decode_attention_block_under_vllm_on_h200_costs_the_measured_module(batch: int) -> None:
    """The four nodes add up to vLLM's measured module (about 94 / 114 / 127 us at 1 / 16 / 32 sequences of 1.5k);
    they added up to 39 / 46 / 62 us before, without the module's norms, rotary, absorbed BMMs and quantisation."""
    prices, attention = _block("decode", Workload(isl=1536, osl=1, batch=batch, engine="vllm"))
    assert all(s >= 0 for s in prices.values())
    assert sum(prices.values()) == pytest.approx(_module_s(attention), rel=1e-9)
    assert sum(prices.values()) > 80e-6


@needs_tables
@pytest.mark.parametrize("batch", [1, 16, 64])
def test_a_verify_block_is_the_plain_module_plus_its_own_increments_never_less(batch: int) -> None:
    plain, attention = _block("decode", Workload(isl=1536, osl=1, batch=batch, engine="vllm"))
    module = _module_s(attention)
    for k in (1, 3):
        spec = Speculation(method="mtp", draft_tokens=k, accepted=0.9)
        verify, verify_attention = _block("decode", Workload(isl=1536, osl=1, batch=batch, engine="vllm",
                                                             speculation=spec))
        assert verify_attention.shape["q_len"] == k + 1
        assert all(s >= 0 for s in verify.values())
        assert sum(verify.values()) >= sum(plain.values()) == pytest.approx(module, rel=1e-9)
    # At 64 sequences the projections at 256 tokens cost more than at 64: the verify block grows.
    if batch == 64:
        assert sum(verify.values()) > 1.05 * module


@needs_tables
def test_prefill_block_costs_the_context_module_and_a_cached_prefix_adds_its_attention_and_up_projection() -> None:
    prompt, attention = _block("prefill", Workload(isl=1024, osl=1, batch=8, engine="vllm"))
    assert sum(prompt.values()) == pytest.approx(_module_s(attention), rel=1e-9)
    cached, cached_attention = _block("prefill", Workload(isl=4096, osl=1, batch=8, engine="vllm", prefix_hit=0.75))
    assert cached_attention.shape["q_len"] == 1024 and cached_attention.shape["kv_len"] == 4096
    # The same 1,024 computed tokens per prompt, now attending to 3,072 cached keys as well, whose latents vLLM
    # up-projects through kv_b_proj first: the GEMM tables' price of 8 x 3,072 tokens x 512 -> 16 heads x 256.
    tables = measured_tables("H200", "vllm")
    assert tables is not None
    gemm = Query("gemm", (16 * (128 + 128), 512, "fp8"), True, 8 * 3072)
    up_projection = lookup_seconds(tables, [gemm])[gemm]
    assert up_projection is not None
    assert sum(cached.values()) > sum(prompt.values()) + up_projection
    assert all(s >= 0 for s in cached.values())


@needs_tables
def test_the_roofline_backend_keeps_its_node_prices() -> None:
    prices, _ = _block("decode", Workload(isl=1536, osl=1, batch=16, engine="vllm"), backend="roofline")
    assert sum(prices.values()) < 60e-6  # the four nodes' own roofline prices, no module


def _fake_block() -> list[ComputeNode | StateNode]:
    model = load_model(DSV3)
    graph, picks, _ = build_phase_sample(model, make_cluster("H200", 8), "decode", parse_strategy("tp=8").decode,
                                         Workload(isl=1024, osl=1, batch=4, engine="vllm"))
    return [n for n in graph.nodes if n.layer == min(picks) and n.name in BLOCK_NODES and not isinstance(n, CommNode)]


@pytest.mark.parametrize("module_us", [200.0, 25.0])
def test_the_block_shares_the_module_with_non_negative_nodes_that_add_up_to_it(module_us: float) -> None:
    """With a module above the other nodes' prices the attention node carries the rest; below them (25 us against
    10 + 10 + 10 us of projections and KV write) every node is scaled to the module instead of going negative."""
    block = _fake_block()
    own = {n.id: 10e-6 for n in block}

    def module(queries: list[Query]) -> dict[Query, float | None]:
        return {q: module_us * 1e-6 for q in queries}

    shared = mla_block_seconds(block, load_model(DSV3), lambda nodes: {n.id: own[n.id] for n in nodes}, module)
    total = sum(shared.get(n.id, own[n.id]) for n in block)
    assert total == pytest.approx(module_us * 1e-6)
    assert all(seconds >= 0 for seconds in shared.values())
    attention = next(n for n in block if n.name == "attention")
    assert (set(shared) == {attention.id}) == (module_us > 30.0)


def test_models_without_mla_and_blocks_without_a_module_row_keep_their_prices() -> None:
    block = _fake_block()
    assert mla_block_seconds(block, load_model("meta-llama/Llama-3.1-8B-Instruct"), lambda n: {}, lambda q: {}) == {}
    assert mla_block_seconds(block, load_model(DSV3), lambda nodes: {n.id: 1e-6 for n in nodes},
                             lambda queries: {q: None for q in queries}) == {}


@pytest.mark.parametrize("hit", [0.5, 0.75])
def test_a_cached_prefix_adds_the_up_projection_of_its_latents_to_the_block(hit: float) -> None:
    """Behind a cached prefix the block is the module at the uncached tokens, the attention's increment, and the
    kv_b_proj GEMM over every cached token (priced like any node: here its FLOPs at 1 PFLOP/s)."""
    model = load_model(DSV3)
    graph, picks, _ = build_phase_sample(model, make_cluster("H200", 8), "prefill", parse_strategy("tp=8").prefill,
                                         Workload(isl=2048, osl=1, batch=4, engine="vllm", prefix_hit=hit))
    block = [n for n in graph.nodes if n.layer == min(picks) and n.name in BLOCK_NODES and not isinstance(n, CommNode)]
    priced: dict[str, ComputeNode | StateNode | CommNode] = {}

    def price(nodes: list[ComputeNode | CommNode | StateNode]) -> dict[str, float]:
        priced.update({n.id: n for n in nodes})
        return {n.id: (n.flops if isinstance(n, ComputeNode) else 0.0) / 1e15 + 1e-6 for n in nodes}

    shared = mla_block_seconds(block, model, price, lambda queries: {q: 500e-6 for q in queries})
    up = [n for n in priced.values() if isinstance(n, ComputeNode) and n.op == "kv_b_proj"]
    assert len(up) == 1 and up[0].id not in {n.id for n in graph.nodes}  # priced, never added to the DAG
    cached = round(2048 * hit)
    assert up[0].shape == {"m": 4 * cached, "n": 16 * (128 + 128), "k": 512}
    attention = next(n for n in block if n.name == "attention")
    plain = next(n for n in priced.values() if n.id == attention.id + "#plain")
    own = price(block)
    increment = own[attention.id] - price([plain])[plain.id]
    total = sum(shared.get(n.id, own[n.id]) for n in block)
    assert total == pytest.approx(500e-6 + increment + up[0].flops / 1e15 + 1e-6)
