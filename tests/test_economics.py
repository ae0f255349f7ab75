"""Prices, dollars and energy of a plan: the flags and files that give prices, the arithmetic, the terminal."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_here

from shardplan.contracts.economics import GpuPrice
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.catalogs.gpus import get_gpu
from shardplan.tools.catalogs.prices import bundled_prices, load_prices, parse_gpu_prices, price_for
from shardplan.tools.planning.planner import plan

# ------------------------------------------------------------------------------------------------- prices


def test_bundled_prices_are_dated_sourced_and_catalog_gpus():
    prices = bundled_prices()
    assert {"H100", "H200", "B200"} <= set(prices)
    for name, price in prices.items():
        assert get_gpu(name).name == name
        assert price.usd_per_gpu_hour > 0
        assert "editable default" in price.source and "read 20" in price.source and "https://" in price.source


def test_gpu_price_flag_reads_pairs_and_catalog_names():
    prices = parse_gpu_prices("h100=2.5, H200 = 3.6")
    assert prices["H100"].usd_per_gpu_hour == 2.5 and prices["H200"].usd_per_gpu_hour == 3.6
    assert prices["H100"].source == "--gpu-price"


@pytest.mark.parametrize("text, words", [
    ("H100", "cannot read"), ("H100=", "cannot read"), ("H100=abc", "not a number"), ("H100=-1", "positive"),
    ("H100=0", "positive"), ("H100=nan", "positive"), ("H100=1,h100=2", "twice"), ("XYZ9=1", "unknown GPU"),
    (",", "names no GPU"),
])
def test_gpu_price_flag_refuses_bad_text_naming_the_field(text, words):
    with pytest.raises(InputError) as caught:
        parse_gpu_prices(text)
    assert words in str(caught.value)
    assert caught.value.field in ("gpu_price", "gpu")


def test_prices_file_takes_numbers_or_mappings(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("prices:\n  H100: 2.25\n  b200: {usd_per_gpu_hour: 5.5, vendor: Acme, read_on: 2026-01-02}\n")
    prices = load_prices(path)
    assert prices["H100"].usd_per_gpu_hour == 2.25
    assert prices["B200"].usd_per_gpu_hour == 5.5 and "Acme" in prices["B200"].source


@pytest.mark.parametrize("text", ["prices: []\n", "other: 1\n", "prices:\n  H100: -2\n", "prices: {H100: x}\n"])
def test_prices_file_refuses_malformed_content(tmp_path, text):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(InputError):
        load_prices(path)


def test_a_given_price_wins_over_the_bundled_one():
    given = {"H100": GpuPrice(gpu="H100", usd_per_gpu_hour=1.0, source="test")}
    assert price_for("h100", given).usd_per_gpu_hour == 1.0
    assert price_for("H100") == bundled_prices()["H100"]
    assert price_for("L40S") is None  # no bundled price: the plan says so rather than inventing one


# --------------------------------------------------------------------------------------- dollars, energy


def _request(**workload) -> PlanRequest:
    return PlanRequest(model="meta-llama/Llama-3.1-70B", gpu="H100", gpus=8,
                       workload=Workload(isl=2048, osl=256, **workload))


@pytest.fixture(scope="module")
def priced_plan():
    price = GpuPrice(gpu="H100", usd_per_gpu_hour=2.0, source="--gpu-price")
    return plan(_request(rate=2.0, ttft_ms=2000, tpot_ms=50, objective="throughput").model_copy(
        update={"price": price}))


def test_plan_dollars_follow_from_gpus_price_and_tokens(priced_plan):
    p = priced_plan
    assert p.status == "ok" and p.economics is not None
    usd, f = p.economics.dollars, p.figures
    assert usd.price.source == "--gpu-price" and usd.gpus == p.deployment.gpus_used
    assert usd.usd_per_hour == pytest.approx(p.deployment.gpus_used * 2.0)
    assert usd.usd_per_million_output_tokens == pytest.approx(usd.usd_per_hour / (f.tokens_per_s * 3600) * 1e6)
    # The split prices input and output so that the hour is paid exactly once.
    input_per_hour = f.requests_per_s * 2048 * 3600 / 1e6
    output_per_hour = f.tokens_per_s * 3600 / 1e6
    paid = usd.usd_per_million_input_tokens * input_per_hour + usd.usd_per_million_output_tokens_decode * (
        output_per_hour)
    assert paid == pytest.approx(usd.usd_per_hour)
    assert 0 < usd.prefill_share < 1 and usd.split_basis


def test_plan_energy_is_board_power_over_tokens_and_an_upper_bound(priced_plan):
    energy, f = priced_plan.economics.energy, priced_plan.figures
    assert energy.upper_bound and "upper bound" in energy.basis
    assert energy.power_kw == pytest.approx(f.gpus_used * 700 / 1e3)  # H100 SXM board power in the catalog
    assert energy.joules_per_output_token * f.tokens_per_s == pytest.approx(energy.power_kw * 1e3)


def test_an_infeasible_plan_has_no_economics():
    p = plan(PlanRequest(model="meta-llama/Llama-3.1-405B", gpu="L40S", gpus=1, workload=Workload(isl=128, osl=16)))
    assert p.status == "infeasible" and p.economics is None


def test_a_gpu_without_a_price_gets_energy_and_a_note():
    p = plan(PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="L40S", gpus=1, workload=Workload(isl=512, osl=64)))
    assert p.economics.dollars is None and p.economics.energy is not None
    assert any("--gpu-price L40S=" in note for note in p.economics.notes)


# -------------------------------------------------------------------------------------------- the CLI


def test_cli_plan_shows_and_writes_the_given_price(tmp_path, capsys):
    args = ["plan", "--model", "meta-llama/Llama-3.1-70B", "--gpu", "H100", "--gpus", "8", "--isl", "2048",
            "--osl", "256", "--rate", "2", "--tpot-ms", "50", "--gpu-price", "H100=2,H200=3"]
    shown = run_here(capsys, *args)
    assert shown.returncode == 0, shown.stderr
    assert "at $2.00/GPU-h, --gpu-price" in shown.stdout and "J per output token" in shown.stdout
    out = tmp_path / "plan.json"
    assert run_here(capsys, *args, "-o", str(out), "--json").returncode == 0
    assert json.loads(out.read_text())["economics"]["dollars"]["price"]["usd_per_gpu_hour"] == 2.0


def test_cli_plan_refuses_a_bad_price_with_exit_2(capsys):
    done = run_here(capsys, "plan", "--model", "meta-llama/Llama-3.1-8B", "--gpus", "1", "--gpu-price", "H100=free")
    assert done.returncode == 2 and "price of H100 is not a number" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_report_shows_cost_and_energy_with_their_basis(priced_plan):
    from shardplan.tools.report.html import render_report

    page = render_report(priced_plan)
    assert 'id="economics"' in page and "at $2.00/GPU-h, --gpu-price" in page
    assert priced_plan.economics.dollars.split_basis.split(":")[0] in page and "upper bound" in page


def test_tools_api_plan_takes_a_gpu_price_and_answers_with_economics():
    from shardplan.tools.api.arguments import RequestArgs
    from shardplan.tools.api.capabilities import plan as plan_tool

    args = {"model": "meta-llama/Llama-3.1-70B", "gpu": "H100", "gpus": 8, "rate": 2.0, "tpot_ms": 50,
            "objective": "throughput", "gpu_price": 2.0}
    assert RequestArgs(**args).to_request().price.usd_per_gpu_hour == 2.0
    assert RequestArgs.from_request(RequestArgs(**args).to_request())["gpu_price"] == 2.0
    answer = plan_tool(**args)
    usd = answer.economics.dollars
    assert usd.price.usd_per_gpu_hour == 2.0 and usd.usd_per_hour == pytest.approx(2.0 * answer.figures.gpus_used)
