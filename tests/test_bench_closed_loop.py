"""The closed-loop comparison's replay of SGLang ``bench_serving`` sweeps: the client's own requests, checked
against the totals it printed, and every request of the run counted (benchmarks/bench_closed_loop.py)."""

from __future__ import annotations

import doctest
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_closed_loop as loop  # noqa: E402
import closed_loop_figures as figures  # noqa: E402
import closed_loop_rows as rows  # noqa: E402


@pytest.mark.parametrize(("floor", "total_out"), [(0, 252162), (1, 252662)])
def test_lengths_are_the_clients_own(floor: int, total_out: int) -> None:
    # The SGLang cookbook's 1000/1000 runs at 100 clients printed 249,831 input tokens and, by release, 252,162
    # (outputs drawn from 0: Qwen3, DeepSeek-R1) or 252,662 (from 1: Llama-3.1) output tokens over 500 prompts.
    prompts, outputs = rows.bench_serving_lengths(1000, 1000, 500, 0.0, 1, floor)
    assert (int(prompts.sum()), int(outputs.sum())) == (249831, total_out)
    assert prompts.min() >= 1 and outputs.min() >= floor and max(prompts.max(), outputs.max()) <= 1000


def test_range_ratio_one_fixes_the_lengths() -> None:
    prompts, outputs = rows.bench_serving_lengths(3200, 800, 500, 1.0, 1, 1)
    assert set(prompts.tolist()) == {3200} and set(outputs.tolist()) == {800}


def test_every_bench_serving_row_matches_its_printed_totals() -> None:
    points = [p for p in rows.yaml_points() if p.requests is not None]  # raises on a row whose totals differ
    assert len(points) == 59
    # Outputs of 0 tokens are replayed as one (the simulator runs every request to its first token).
    assert all(p.requests is not None and p.requests[1].min() >= 1 for p in points)


def test_a_whole_run_replays_and_counts_every_request() -> None:
    point = next(p for p in rows.yaml_points() if p.id == "sglcookbook-llama31-70b-a100-tp8-1000-1000-conc16")
    assert point.requests is not None
    _, run = loop.simulate_point(point)
    record = run.requests
    assert np.array_equal(record.isl, point.requests[0]) and np.array_equal(record.osl, point.requests[1])
    row = loop.run_point(point)
    ttft = (record.first_token - record.arrival) * 1e3
    # The 16 clients' first requests (the cold start) weigh in the mean, unlike a steady-state row's.
    assert row.whole_run and row.simulated["ttft_ms"] == pytest.approx(float(ttft.mean()))
    assert row.simulated["ttft_ms"] > float(ttft[16:-16].mean())
    assert row.little_ttft_ms() is None
    # Its median and P99 are the client's over the same requests, each TPOT over an output of two tokens or more.
    tpot = (record.finish - record.first_token) / (record.osl - 1) * 1e3
    tpot = tpot[record.osl > 1]
    assert row.simulated["ttft_p50_ms"] == pytest.approx(float(np.median(ttft)))
    assert row.simulated["ttft_p99_ms"] == pytest.approx(float(np.percentile(ttft, 99)))
    assert row.simulated["tpot_p99_ms"] == pytest.approx(float(np.percentile(tpot, 99)))
    assert row.measured["ttft_p50_ms"] == 147.02 and row.error("ttft_p99_ms") is not None


def test_every_bench_serving_row_carries_the_client_s_medians_and_p99s() -> None:
    # Read from the same printed blocks and CSV rows as the means: for each statistic the median lies under the P99,
    # and the P99 above the mean's share of it (no column read in the wrong place).
    points = [p for p in rows.yaml_points() if p.requests is not None]
    for point in points:
        m = point.measured
        assert set(figures.PERCENTILES) <= set(m), point.id
        assert m["ttft_p50_ms"] <= m["ttft_p99_ms"] and m["tpot_p50_ms"] <= m["tpot_p99_ms"], point.id
        assert m["ttft_p99_ms"] >= m["ttft_ms"] * 0.9 and m["tpot_p99_ms"] >= m["tpot_ms"] * 0.9, point.id


def test_the_percentile_table_sums_each_statistic_per_source() -> None:
    def row(source: str, measured: float, simulated: float) -> figures.Row:
        stats = dict.fromkeys(figures.PERCENTILES, measured)
        return figures.Row("r-conc1", 1, 10, False, 9, {"ttft_ms": measured, "tpot_ms": measured, **stats},
                           {"ttft_ms": simulated, "tpot_ms": simulated, **dict.fromkeys(figures.PERCENTILES,
                                                                                         simulated)},
                           {}, "mean", source, whole_run=True)

    found = loop.print_percentiles([row("a", 100.0, 110.0), row("b", 100.0, 50.0), row("b", 100.0, 70.0)])
    assert found["a"]["ttft_p99_ms_median_abs_pct"] == pytest.approx(10.0)
    assert found["b"]["tpot_p50_ms_median_abs_pct"] == pytest.approx(40.0)
    assert found["all"]["ttft_ms_median_abs_pct"] == pytest.approx(30.0)
    # Rows without the client's statistics (NIM's means) are left out.
    assert loop.print_percentiles([figures.Row("n-conc1", 1, 10, False, 9, {"ttft_ms": 1.0}, {"ttft_ms": 1.0}, {},
                                               "mean", "nim")]) == {}


def _row(sweep: str, clients: int, measured: float, simulated: float, source: str = "src") -> figures.Row:
    return figures.Row(f"{sweep}-conc{clients}", clients, 100, False, 50, {"ttft_ms": measured},
                    {"ttft_ms": simulated}, {}, "mean", source)


def test_growth_is_apart_from_the_base() -> None:
    # A sweep simulated at half the measured TTFT at every concurrency: all of its error is the base's (the step
    # prices), none the growth's (queueing, how the clients meet).
    scaled = [_row("a", n, 100.0 * n, 50.0 * n) for n in (1, 4, 16)]
    # A sweep right at one client whose simulated TTFT grows 3 times as fast as the measured one.
    steep = [_row("b", 1, 100.0, 100.0, "other"), _row("b", 10, 200.0, 600.0, "other")]
    found = figures.base_and_growth(scaled + steep, "ttft_ms")
    assert found["src"][0] == pytest.approx([50.0]) and found["src"][1] == pytest.approx([0.0, 0.0])
    assert found["other"] == ([0.0], [pytest.approx(200.0)])
    # A sweep with one row has no growth, and rows without the metric are left out.
    assert figures.base_and_growth([_row("c", 8, 10.0, 12.0)], "ttft_ms") == {}
    assert figures.base_and_growth(scaled, "tpot_ms") == {}


def test_the_figures_examples_hold() -> None:
    assert doctest.testmod(figures).failed == 0


def test_the_cookbook_runs_find_the_prompts_their_server_kept() -> None:
    points = {p.id: p for p in rows.yaml_points()}
    name = "sglcookbook-llama31-70b-a100-tp8"

    def warm(row: str) -> dict[int, int]:
        return dict(points[f"{name}-{row}"].warm_prefixes)

    def prompts(row: str) -> list[int]:
        found = points[f"{name}-{row}"].requests
        assert found is not None
        return found[0].tolist()

    # A new server: only the warm-up request's prompt (the first) before the first run.
    assert warm("1000-1000-conc1") == {0: prompts("1000-1000-conc1")[0]}
    # Each later run finds the earlier runs' prompts, as long as they were sent.
    assert warm("1000-1000-conc16") == dict(enumerate(prompts("1000-1000-conc1")))
    assert warm("1000-1000-conc100") == dict(enumerate(prompts("1000-1000-conc16")))
    # The summarisation runs ran on the same server: they find the 1000-token runs' prompts (which share their first
    # tokens with theirs), and the warm-up's 8,000-token one.
    before, short, long = warm("8000-1000-conc1"), prompts("1000-1000-conc100"), prompts("8000-1000-conc1")
    assert len(before) == 500 and before[3] == short[3] and before[0] == max(short[0], long[0])
    # The Qwen3 page deploys anew before its reasoning runs; dstack's client flushed SGLang's cache before each run.
    assert dict(points["sglcookbook-qwen3-235b-b200-tp8-1000-8000-conc1"].warm_prefixes).keys() == {0}
    dstack = [p for p in points.values() if p.id.startswith("dstack")]
    assert dstack and not any(p.warm_prefixes for p in dstack)
    assert doctest.testmod(rows).failed == 0


def test_a_run_on_a_warm_server_skips_the_prefill_of_the_prompts_it_kept() -> None:
    point = next(p for p in rows.yaml_points() if p.id == "sglcookbook-llama31-70b-a100-tp8-8000-1000-conc64")
    warm = loop.run_point(point)
    cold = loop.run_point(replace(point, warm_prefixes=()))
    # The 64 clients' first prompts are all among the 80 the 16-client run sent: the cold start is spared.
    assert warm.cold_ttft_ms < 0.25 * cold.cold_ttft_ms
    assert warm.simulated["ttft_ms"] < cold.simulated["ttft_ms"]
