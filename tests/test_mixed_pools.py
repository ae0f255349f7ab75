"""Split pools on two GPU types (--decode-gpu, a cluster file's decode_pool): prefill workers on one type, decode
workers on the other, each pool priced and fitted on its own GPU, the KV cache moved over the network between them,
each pool on nodes of its own type (KV-5), and each pool's GPUs paid at their own price."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_main

from shardplan.cli.common import build_request
from shardplan.contracts.plan import Plan
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InputError
from shardplan.tools.api.arguments import RequestArgs
from shardplan.tools.catalogs.gpus import cluster_for, get_gpu, load_cluster, make_cluster, with_decode_pool
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.launch.commands import launch_command
from shardplan.tools.planning.planner import plan, plan_for_strategy, resolve_request
from shardplan.tools.serving.disaggregated import kv_transfer_s
from shardplan.tools.serving.placement import replica_strategy

DONE_WHEN = ["plan", "-m", "meta-llama/Llama-3.1-70B", "--gpu", "H200", "--decode-gpu", "H100", "--gpus", "16",
             "--rate", "20", "--isl", "2048", "--osl", "256", "--ttft-ms", "2000", "--tpot-ms", "40",
             "--gpu-price", "H200=3.6,H100=2.5"]


_run = run_main


@pytest.fixture(scope="module")
def mixed_plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    """The issue's done-when command, through the command line, its plan read back from the file it writes."""
    out = tmp_path_factory.mktemp("mixed") / "plan.json"
    assert _run([*DONE_WHEN, "--json", "-o", str(out)]) == 0
    return Plan.model_validate_json(out.read_text())


def test_done_when_split_with_prefill_on_h200_and_decode_on_h100_validates(mixed_plan: Plan) -> None:
    p = mixed_plan
    assert p.status == "ok" and p.validation is not None and p.validation.valid
    assert p.strategy is not None and p.strategy.disaggregated
    assert p.request.decode_gpu == "H100" and p.request.gpu == "H200"
    assert p.deployment is not None
    pools = {pool.role: pool for pool in p.deployment.pools}
    assert (pools["prefill"].gpu, pools["decode"].gpu) == ("H200", "H100")
    # Each pool's memory against its own GPU's.
    assert pools["prefill"].capacity_gb == get_gpu("H200").memory_gb
    assert pools["decode"].capacity_gb == get_gpu("H100").memory_gb
    assert p.deployment.gpus_used <= 16
    # The DAG: the decode ranks on nodes of their own, and KV-5 checked.
    assert p.dag is not None and p.dag.meta.decode_gpu == "H100"
    per_node = p.dag.meta.gpus_per_node
    prefill_nodes = {r // per_node for r in p.dag.meta.rank_pools["prefill"]}
    decode_nodes = {r // per_node for r in p.dag.meta.rank_pools["decode"]}
    assert not prefill_nodes & decode_nodes
    assert "KV-5" in p.validation.rules_checked


def test_done_when_kv_transfer_is_priced_over_the_network_between_the_pools(mixed_plan: Plan) -> None:
    p = mixed_plan
    assert p.deployment is not None and p.strategy is not None
    model, cluster = resolve_request(p.request)
    replica = replica_strategy(p.strategy)
    network = kv_transfer_s(model, cluster, replica.prefill, replica.decode, p.request.workload.prefill_tokens,
                            same_node=False)
    assert p.deployment.kv_transfer_ms == pytest.approx(network * 1e3)
    assert p.deployment.kv_transfer_ms > 0
    # The DAG's KV handoff crosses nodes, and its time is in the static batch's TTFT.
    transfers = [n for n in p.dag.nodes if n.kind == "kv_transfer"] if p.dag else []
    assert transfers and all(n.scope == "inter_node" for n in transfers)
    assert p.dag_cost is not None and p.dag_cost.kv_transfer_ms > 0
    assert any("crosses the network" in line and "GB/s" in line for line in p.messages)


def test_each_pool_is_priced_on_its_own_gpu(mixed_plan: Plan) -> None:
    assert mixed_plan.dag_cost is not None and mixed_plan.dag_cost.pricing is not None
    pricing = mixed_plan.dag_cost.pricing
    assert "prefill h200" in pricing.roofline_profile and "decode h100" in pricing.roofline_profile
    if pricing.backend == "measured":
        assert "h200" in (pricing.data or "") and "h100" in (pricing.data or "")


def test_economics_sum_each_pool_at_its_own_price(mixed_plan: Plan) -> None:
    p = mixed_plan
    assert p.economics is not None and p.economics.dollars is not None and p.deployment is not None
    dollars = p.economics.dollars
    assert dollars.decode_price is not None
    assert (dollars.price.gpu, dollars.price.usd_per_gpu_hour) == ("H200", 3.6)
    assert (dollars.decode_price.gpu, dollars.decode_price.usd_per_gpu_hour) == ("H100", 2.5)
    gpus = {pool.role: pool.workers * pool.gpus_per_worker for pool in p.deployment.pools}
    assert dollars.usd_per_hour == pytest.approx(gpus["prefill"] * 3.6 + gpus["decode"] * 2.5)
    assert dollars.prefill_share == pytest.approx(gpus["prefill"] * 3.6 / dollars.usd_per_hour)
    assert p.figures is not None
    assert dollars.usd_per_million_output_tokens == pytest.approx(
        dollars.usd_per_hour / (p.figures.tokens_per_s * 3600) * 1e6)
    energy = p.economics.energy
    assert energy is not None
    watts = gpus["prefill"] * get_gpu("H200").tdp_w + gpus["decode"] * get_gpu("H100").tdp_w  # type: ignore[operator]
    assert energy.power_kw == pytest.approx(watts / 1e3)


def test_launch_commands_put_each_pool_on_nodes_of_its_type(mixed_plan: Plan) -> None:
    spec = launch_command(mixed_plan, "vllm")
    lines = spec.command.splitlines()
    heads = [line for line in lines if line.startswith("# node")]
    assert any("H200 node, prefill pool" in h for h in heads) and any("H100 node, decode pool" in h for h in heads)
    labels = {line.split()[2]: line for line in heads}
    assert not any("prefill" in text and "decode" in text for text in labels.values())
    assert any("two GPU types" in note for note in spec.notes)


def test_terminal_names_both_gpu_types(capsys: pytest.CaptureFixture[str], mixed_plan: Plan) -> None:
    from shardplan.cli.plan_text import print_plan

    capsys.readouterr()
    print_plan(mixed_plan)
    text = capsys.readouterr().out
    assert "prefill H200, decode H100" in text
    assert "prefill (H200)" in text and "decode (H100)" in text


def _two_pool_file(tmp_path: Path, decode_gpus: int) -> Path:
    # Link figures as with_decode_pool derives them from the catalog, so the file and the flags describe one cluster.
    flags = with_decode_pool(make_cluster("H200", 4, 2), "H100", decode_gpus)
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "name: h200-h100\ngpu: H200\ngpus_per_node: 2\nnodes: 2\n"
        f"inter_node_bandwidth_gb_per_s: {flags.inter_node_bandwidth_gb_per_s}\n"
        f"inter_node_latency_us: {flags.inter_node_latency_us}\n"
        f"decode_pool:\n  gpu: H100\n  gpus: {decode_gpus}\n"
    )
    return path


def test_a_cluster_file_with_two_pools_gives_the_same_plan_as_the_flags(tmp_path: Path) -> None:
    common: dict[str, Any] = {"isl": 1024, "osl": 128, "rate": 4.0, "ttft_ms": 2000.0, "tpot_ms": 50.0}
    by_file = build_request("llama-3.1-8b", cluster=_two_pool_file(tmp_path, 2), **common)
    by_flags = build_request("llama-3.1-8b", "H200", 4, 2, decode_gpu="H100", decode_gpus=2, **common)
    assert (by_file.decode_gpu, by_file.decode_gpus) == ("H100", 2)
    _, file_cluster = resolve_request(by_file)
    _, flag_cluster = resolve_request(by_flags)
    assert file_cluster.model_dump(exclude={"name"}) == flag_cluster.model_dump(exclude={"name"})
    a, b = plan(by_file), plan(by_flags)
    assert a.status == b.status == "ok"
    assert a.strategy == b.strategy and a.strategy is not None and a.strategy.disaggregated
    assert a.figures == b.figures
    assert a.deployment is not None and [p.gpu for p in a.deployment.pools] == ["H200", "H100"]


def test_decode_gpus_caps_the_decode_pool() -> None:
    # Uncapped, this request's decode pool takes 3 of the 8 GPUs (checked by hand: 32 s, too slow to repeat here).
    request = build_request("llama-3.1-8b", "H200", 8, decode_gpu="H100", decode_gpus=2, isl=1024, osl=128,
                            objective="throughput")
    result = plan(request)
    assert result.status == "ok" and result.deployment is not None
    decode = next(p for p in result.deployment.pools if p.role == "decode")
    assert decode.workers * decode.gpus_per_worker <= 2
    assert "up to 2 for decode" in request.gpu_words


def test_the_same_type_twice_plans_like_split_pools() -> None:
    request = build_request("llama-3.1-8b", "H100", 4, 2, decode_gpu="H100", isl=1024, osl=128, rate=4.0,
                            ttft_ms=2000, tpot_ms=50)
    result = plan(request)
    assert result.status == "ok" and result.strategy is not None and result.strategy.disaggregated
    assert result.validation is not None and result.validation.valid


def test_a_given_colocated_strategy_on_two_types_is_refused() -> None:
    request = build_request("llama-3.1-8b", "H200", 4, 2, decode_gpu="H100", isl=512, osl=64)
    model, cluster = resolve_request(request)
    with pytest.raises(InputError, match="KV-5"):
        plan_for_strategy(request, model, cluster, parse_strategy("tp=2"))


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--decode-gpu", "H10"], "decode GPU"),
        (["--decode-gpu", "H100", "-C", "colocated"], "-C colocated with --decode-gpu"),
        (["--decode-gpus", "2"], "decode_gpus without decode_gpu"),
        (["--decode-gpu", "H100", "--decode-gpus", "4"], "leaves no GPU"),
        (["--decode-gpu", "A100", "--kv-dtype", "fp8"], "A100 has no fp8"),
        (["--decode-gpu", "H100", "--batching", "static", "--batch", "4"], "static batching"),
        (["--gpu", "H100,H200", "--decode-gpu", "H100"], "with --decode-gpu"),
    ],
)
def test_bad_two_pool_input_ends_in_one_error_line(extra: list[str], named: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "-m", "llama-3.1-8b", "--gpus", "4", "--isl", "512", "--osl", "64", *extra]
    if "--gpu" not in extra:
        argv += ["--gpu", "H200"]
    capsys.readouterr()
    assert _run(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], lines


def test_cluster_file_decode_pool_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("gpu: H200\nnodes: 2\ndecode_pool:\n  gpus: 8\n")
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert caught.value.field == "cluster.decode_pool.gpu"
    path.write_text("gpu: H200\nnodes: 2\ndecode_pool:\n  gpu: H100\n  gpus: 12\n")
    with pytest.raises(InputError, match="whole nodes"):
        load_cluster(path)


def test_cluster_views_keep_each_pools_gpu_and_share_the_network() -> None:
    mixed = cluster_for("H200", 16, None, None, "H100", 8)
    prefill, decode = mixed.pool("prefill"), mixed.pool("decode")
    assert (prefill.gpu.name, decode.gpu.name) == ("H200", "H100")
    assert (prefill.world_size, decode.world_size) == (8, 8)
    assert decode.intra_node_bandwidth_gb_per_s == get_gpu("H100").intra_node_bandwidth_gb_per_s
    assert prefill.inter_node_bandwidth_gb_per_s == decode.inter_node_bandwidth_gb_per_s == min(
        get_gpu("H200").inter_node_bandwidth_gb_per_s, get_gpu("H100").inter_node_bandwidth_gb_per_s)
    assert prefill.decode_pool is None and decode.decode_pool is None
    one = make_cluster("H100", 8)
    assert one.pool("decode") is one and not one.mixed


def test_api_arguments_carry_the_decode_pool() -> None:
    args = RequestArgs(model="llama-3.1-8b", gpu="H200", gpus=16, decode_gpu="H100", decode_gpus=8,
                       decode_gpu_price=2.5, isl=512, osl=64)
    request = args.to_request()
    assert (request.decode_gpu, request.decode_gpus) == ("H100", 8)
    assert request.decode_price is not None and request.decode_price.usd_per_gpu_hour == 2.5
    again = RequestArgs(**RequestArgs.from_request(request)).to_request()
    assert (again.decode_gpu, again.decode_gpus, again.decode_price) == (
        request.decode_gpu, request.decode_gpus, request.decode_price)
    assert json.loads(request.model_dump_json())["decode_gpu"] == "H100"


def test_mixed_memory_fit_uses_the_decode_gpu() -> None:
    """A decode worker that fits on an H200 but not on an L40S is refused on an L40S decode pool."""
    model = load_model("llama-3.1-70b")
    request = build_request("llama-3.1-70b", "H200", 16, decode_gpu="L40S", decode_gpus=8, isl=1024, osl=128,
                            objective="throughput")
    _, cluster = resolve_request(request)
    from shardplan.tools.planning.deployment import best_option

    split = parse_strategy("prefill:tp=2;decode:tp=2;disagg")
    on_h200 = best_option(model, cluster.model_copy(update={"decode_pool": None}), split, request.workload)
    on_l40s = best_option(model, cluster, split, request.workload)
    assert on_h200 is not None and on_h200.figures.fits
    assert on_l40s is None or not on_l40s.figures.fits


def test_doctests_of_the_modules_that_know_two_pools() -> None:
    import doctest

    from shardplan.contracts import economics as economics_contract
    from shardplan.contracts import plan as plan_contract
    from shardplan.contracts import strategy as strategy_contract
    from shardplan.tools.catalogs import gpus as gpu_catalog
    from shardplan.tools.planning import economics as planning_economics
    from shardplan.tools.serving import placement

    for module in (economics_contract, plan_contract, strategy_contract, gpu_catalog, planning_economics, placement):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_an_infeasible_two_pool_request_names_both_gpus_and_each_pools_need() -> None:
    result = plan(build_request("llama-3.1-405b", "H200", 4, decode_gpu="H100", isl=1024, osl=128,
                                objective="throughput"))
    assert result.status == "infeasible"
    assert "H200 prefill and H100 decode" in result.explanation
    assert result.min_gpus is not None and result.min_gpus > 4
    assert not result.hints  # the one-type hints (a count of one type, a format on tp=N) do not apply
