"""Weight formats per part of a model (``--weight-dtype-for``): memory, DAG formats, cost, the drafter, errors."""

from __future__ import annotations

import pytest
from cli_helpers import run_main
from mutation_cases import trimmed_model

from shardplan.contracts.arithmetic.model_math import expert_params, weight_bytes
from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.dag import ComputeNode
from shardplan.contracts.speculation import parse_speculation
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.api.arguments import RequestArgs
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.drafters import drafter_for
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.catalogs.weight_formats import parse_weight_formats, request_model, with_weight_formats
from shardplan.tools.cost.estimate import estimate_cost
from shardplan.tools.cost.measured.queries import mla_module_query
from shardplan.tools.cost.memory import drafter_bytes_per_gpu, weight_bytes_per_gpu

WORK = Workload(isl=512, osl=64, batch=1, batching="static")


def _routed_params(model) -> int:  # noqa: ANN001
    assert model.moe is not None
    moe_layers = model.num_layers - model.moe.first_dense_layers
    return moe_layers * model.moe.num_experts * expert_params(model)


def test_only_the_routed_experts_change_when_only_they_are_fp4() -> None:
    bf16 = load_model("deepseek-v3", weight_dtype="bf16")
    experts_fp4 = with_weight_formats(bf16, {"experts": "fp4"})
    saved = _routed_params(bf16) * (DTYPE_BYTES["bf16"] - DTYPE_BYTES["fp4"])
    assert weight_bytes(bf16) - weight_bytes(experts_fp4) == pytest.approx(saved)
    # Per GPU under EP: a rank holds num_experts / ep experts of each MoE layer, nothing else moves.
    layout = parse_strategy("tp=8,ep=8").decode
    local = saved / 8
    assert weight_bytes_per_gpu(bf16, layout) - weight_bytes_per_gpu(experts_fp4, layout) == pytest.approx(local)
    every_fp4 = load_model("deepseek-v3", weight_dtype="fp4")
    assert weight_bytes(every_fp4) < weight_bytes(experts_fp4) < weight_bytes(bf16)


def _decode_nodes(model, spec: str = "tp=2,ep=2", work: Workload = WORK):  # noqa: ANN001, ANN202
    cluster = make_cluster("B200", 2)
    dag = build_dag(model, cluster, parse_strategy(spec), work)
    return dag, cluster, [n for n in dag.nodes if isinstance(n, ComputeNode) and n.phase == "decode"]


def test_the_dag_carries_each_parts_format_and_the_step_cost_moves_with_the_experts_alone() -> None:
    bf16 = trimmed_model("deepseek-v3", 5).model_copy(update={"weight_dtype": "bf16"})
    experts_fp4 = with_weight_formats(bf16, {"experts": "fp4"})
    dag_bf16, cluster, nodes_bf16 = _decode_nodes(bf16)
    dag_fp4, _, nodes_fp4 = _decode_nodes(experts_fp4)
    by_id = {n.id: n for n in nodes_bf16}
    routed = [n for n in nodes_fp4 if n.op == "routed_experts"]
    assert routed and all(n.dtype == "fp4" for n in routed)
    for node in nodes_fp4:
        twin = by_id[node.id]
        if node.op == "routed_experts":
            assert node.bytes_read < twin.bytes_read
        else:  # attention, dense FFN, shared experts, router, head: as before
            assert (node.dtype, node.bytes_read) == (twin.dtype, twin.bytes_read)
    costs = [estimate_cost(dag, cluster, "roofline").decode.latency_ms for dag in (dag_bf16, dag_fp4)]
    assert costs[1] < costs[0]
    every_fp4 = bf16.model_copy(update={"weight_dtype": "fp4"})
    assert estimate_cost(_decode_nodes(every_fp4)[0], cluster, "roofline").decode.latency_ms < costs[1]


def test_attention_kept_in_bf16_under_fp4_weights() -> None:
    fp4 = trimmed_model("deepseek-v3", 4).model_copy(update={"weight_dtype": "fp4"})
    mixed = with_weight_formats(fp4, {"attention": "bf16", "router": "bf16", "lm_head": "bf16"})
    _, _, nodes = _decode_nodes(mixed)
    formats = {n.name: n.dtype for n in nodes}
    assert formats["qkv_proj"] == formats["o_proj"] == formats["router"] == formats["lm_head"] == "bf16"
    assert formats["experts"] == formats["shared_experts"] == formats["gate_up_proj"] == "fp4"
    attention = next(n for n in nodes if n.kind == "attention")
    # The measured MLA module is looked up under the attention's own GEMM format (the tables key bf16, not fp4).
    assert mla_module_query(attention, fp4) is None
    query = mla_module_query(attention, mixed)
    assert query is not None and query.args[2] == "bfloat16"
    layout = parse_strategy("tp=8").decode
    assert weight_bytes_per_gpu(mixed, layout) > weight_bytes_per_gpu(fp4, layout)


def test_the_mtp_layer_in_its_own_format() -> None:
    fp4 = load_model("deepseek-v3", weight_dtype="fp4")
    mixed = with_weight_formats(fp4, {"mtp": "bf16", "attention": "bf16"})
    speculation = parse_speculation("mtp:2", 1.5)
    plain_net, mtp_net = drafter_for(fp4, speculation).network, drafter_for(mixed, speculation).network
    assert (plain_net.weight_dtype, mtp_net.weight_dtype, mtp_net.expert_dtype) == ("fp4", "bf16", None)
    assert mtp_net.weight_format("lm_head") == "fp4"  # the pass ends in the target's head
    layout = parse_strategy("tp=8,ep=8").decode
    work = Workload(isl=512, osl=64, batch=1, speculation=speculation)
    assert drafter_bytes_per_gpu(mixed, layout, work, 576)[0] > drafter_bytes_per_gpu(fp4, layout, work, 576)[0]
    # The target's own layers keep their formats: only the MTP layer's are its own.
    assert mixed.weight_format("experts") == "fp4" and mixed.weight_format("mtp") == "bf16"


def test_parts_are_parsed_and_checked_against_the_model() -> None:
    assert parse_weight_formats(["attention=BF16", "mtp=bf16"]) == {"attention": "bf16", "mtp": "bf16"}
    assert parse_weight_formats(None) is None
    for bad, what in (("experts=fp5", "unknown format"), ("attn=bf16", "unknown part"), ("experts", "no '='"),
                      ("experts=fp4,experts=fp8", "twice")):
        with pytest.raises(InputError, match=what) as caught:
            parse_weight_formats(bad)
        assert caught.value.field == "weight_dtype_for"
    llama = load_model("llama-3.1-8b")
    for part in ("experts", "router", "shared_experts", "mtp"):
        with pytest.raises(InputError, match=f"has no {part}") as caught:
            with_weight_formats(llama, {part: "fp4"})  # type: ignore[dict-item]
        assert caught.value.field == "weight_dtype_for"
    with pytest.raises(InputError, match="no dense FFN"):
        with_weight_formats(load_model("qwen3-30b-a3b"), {"dense_ffn": "fp8"})
    assert with_weight_formats(llama, None) is llama


def test_a_request_without_parts_loads_the_model_as_before() -> None:
    request = RequestArgs(model="deepseek-v3", gpu="B200", gpus=8, weight_dtype="fp4").to_request()
    assert request.weight_formats is None
    assert request_model(request) == load_model("deepseek-v3", weight_dtype="fp4")
    mixed = RequestArgs(model="deepseek-v3", gpu="B200", gpus=8, weight_dtype="fp4",
                          weight_formats={"attention": "bf16"}).to_request()
    assert request_model(mixed).weight_format("attention") == "bf16"
    assert RequestArgs.from_request(mixed)["weight_formats"] == {"attention": "bf16"}
    with pytest.raises(InputError, match="has no experts"):
        RequestArgs(model="llama-3.1-8b", gpu="H100", gpus=1, weight_formats={"experts": "fp4"}).to_request()


@pytest.mark.parametrize("value", ["experts=fp5", "experts=fp4"])
def test_cli_refuses_a_bad_part_format_in_one_line(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_main(["plan", "-m", "llama-3.1-8b", "--gpu", "H100", "--gpus", "1", "--weight-dtype-for", value])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--weight-dtype-for" in err and "Traceback" not in err


def test_nvidias_fp4_deepseek_r1_is_loaded_with_the_parts_it_stores_apart() -> None:
    checkpoint = load_model("nvidia/DeepSeek-R1-FP4")
    assert checkpoint.weight_dtype == "fp4" and checkpoint.weight_format("experts") == "fp4"
    kept = ("attention", "router", "lm_head", "mtp")
    assert {part: checkpoint.weight_format(part) for part in kept} == dict.fromkeys(kept, "bf16")
    # A format override names another checkpoint; an architecture alias without a format stores none apart.
    assert load_model("nvidia/DeepSeek-R1-FP4", weight_dtype="fp8").weight_formats == {}
    assert load_model("deepseek-ai/DeepSeek-R1").weight_formats == {}


def test_a_follow_up_keeps_the_parts_a_request_given_whole_stated() -> None:
    from shardplan.agent.parse.plan_request import to_plan_request
    from shardplan.agent.parse.request import parse_request
    from shardplan.agent.understand import _given

    given = RequestArgs(model="deepseek-v3", gpu="B200", gpus=8, weight_dtype="fp4",
                        weight_formats={"attention": "bf16", "mtp": "bf16"}).to_request()
    follow_up = parse_request("now with 16 GPUs", _given(given))
    request = to_plan_request(follow_up)
    assert request.gpus == 16 and request.weight_formats == {"attention": "bf16", "mtp": "bf16"}
