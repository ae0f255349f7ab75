"""Planning across several GPU types (--gpu H100,H200,B200 or any): the cheapest that meets the targets wins."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_here

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.catalogs.prices import parse_gpu_prices, price_for
from shardplan.tools.planning.gpu_choice import parse_gpu_types, plan_gpu_types

MEETING = {"chosen", "costlier"}


def _plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    result = run_here(capsys, "plan", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_done_when_command_names_the_cheapest_type_that_meets_the_targets(capsys):
    types = ["H100", "H200", "B200"]
    data = _plan_json(capsys,
                      "-m", "meta-llama/Llama-3.1-70B", "--gpu", ",".join(types), "--rate", "20", "--isl", "2048",
                      "--osl", "256", "--ttft-ms", "2000", "--tpot-ms", "40")
    choice = data["gpu_choice"]
    rows = {row["gpu"]: row for row in choice["options"]}
    assert sorted(rows) == sorted(types)
    assert all(row["reason"] for row in rows.values())
    winner = choice["chosen"]
    assert winner is not None and data["request"]["gpu"] == winner and rows[winner]["status"] == "chosen"
    # The answer is the winner's plan: it meets the targets and serves the rate, at the price its row shows.
    assert data["status"] == "ok" and not data["misses"]
    assert data["figures"]["requests_per_s"] >= 20 * (1 - 1e-9)
    price = data["economics"]["dollars"]["usd_per_million_output_tokens"]
    assert rows[winner]["usd_per_million_output_tokens"] == pytest.approx(price)
    meeting = [row for row in rows.values() if row["status"] in MEETING]
    assert price == min(row["usd_per_million_output_tokens"] for row in meeting)
    for row in rows.values():
        if row["status"] == "misses_targets":
            assert row["reason"].startswith("misses: ")
        if row["status"] == "costlier":
            assert row["usd_per_million_output_tokens"] > price and winner in row["reason"]


def test_any_plans_every_priced_catalog_gpu_a_given_price_included(capsys):
    data = _plan_json(capsys, "-m", "llama-3.1-8b", "--gpu", "any", "--gpus", "1", "--isl", "512", "--osl", "64",
                      "--gpu-price", "L40S=0.9")
    given = parse_gpu_prices("L40S=0.9")
    priced = {name for name in gpu_catalog() if price_for(name, given) is not None}
    assert "L40S" in priced
    assert {row["gpu"] for row in data["gpu_choice"]["options"]} == priced
    assert data["gpu_choice"]["chosen"] in priced


def test_parse_gpu_types_reads_lists_and_any_and_refuses_unknown_names():
    assert parse_gpu_types("b200, h100 ,B200") == ["B200", "H100"]
    assert parse_gpu_types("any") == [name for name in gpu_catalog() if price_for(name) is not None]
    with pytest.raises(InputError) as error:
        parse_gpu_types("H100,H999")
    assert error.value.field == "gpu" and "H999" in str(error.value) and "H200" in str(error.value)


def test_an_unknown_gpu_in_the_list_exits_2_naming_gpu(capsys):
    result = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpu", "H100,H999", "--json")
    assert result.returncode == 2
    assert "--gpu" in result.stderr and "H999" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("extra", "named"), [(("-s", "tp=1"), "--gpu"), (("--policy", "openai:m"), "--policy")])
def test_several_types_refuse_a_review_and_another_policy(extra, named, capsys):
    result = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpu", "H100,H200", "--gpus", "1", *extra)
    assert result.returncode == 2 and named in result.stderr and "Traceback" not in result.stderr


def _request(**workload: float) -> PlanRequest:
    return PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=1, workload=Workload(isl=512, osl=64, **workload))


def test_a_type_without_a_price_is_listed_and_not_planned():
    unpriced = next(name for name in gpu_catalog() if price_for(name) is None)
    planned: list[str] = []

    def planner(request: PlanRequest):
        from shardplan.tools.planning.planner import plan
        planned.append(request.gpu)
        return plan(request)

    result = plan_gpu_types(_request(objective="throughput"), ["H100", unpriced], budget=1, planner=planner)
    rows = {row.gpu: row for row in result.gpu_choice.options}
    assert planned == ["H100"]
    assert rows[unpriced].status == "no_price" and "--gpu-price" in rows[unpriced].reason
    assert result.gpu_choice.chosen == "H100" and result.request.gpu == "H100"


def test_costlier_types_say_by_how_much_and_none_meeting_is_said():
    result = plan_gpu_types(_request(objective="throughput"), ["H100", "H200"], budget=1)
    choice = result.gpu_choice
    chosen = next(row for row in choice.options if row.status == "chosen")
    for row in choice.options:
        if row.status == "costlier":
            more = row.usd_per_million_output_tokens - chosen.usd_per_million_output_tokens
            assert f"+${more:,.3f}" in row.reason
    impossible = plan_gpu_types(_request(objective="throughput", tpot_ms=0.001), ["H100", "H200"], budget=1)
    assert impossible.gpu_choice.chosen is None and impossible.status != "ok"
    assert "meets the targets" in impossible.messages[0]
    assert all(row.status in {"misses_targets", "infeasible"} for row in impossible.gpu_choice.options)


def test_one_type_gets_no_choice_record(capsys):
    assert plan_gpu_types(_request(), ["H100"]).gpu_choice is None
    assert _plan_json(capsys, "-m", "llama-3.1-8b", "--gpu", "H100", "--gpus", "1")["gpu_choice"] is None


def test_the_plan_tool_takes_a_list_of_types_and_refuses_a_single_price():
    from shardplan.tools.api.capabilities import plan as plan_tool

    answer = plan_tool(model="llama-3.1-8b", gpu="H100,B200", gpus=1, isl=512, osl=64, objective="throughput")
    assert answer.gpu_choice is not None and answer.request.gpu == answer.gpu_choice.chosen
    assert {row.gpu for row in answer.gpu_choice.options} == {"H100", "B200"}
    with pytest.raises(InputError) as error:
        plan_tool(model="llama-3.1-8b", gpu="H100,B200", gpus=1, gpu_price=2.0)
    assert error.value.field == "gpu_price"
