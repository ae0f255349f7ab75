"""The side-by-side benchmark's pure logic, on AIConfigurator output captured in tests/data/aiconfigurator/.

No AIConfigurator install is needed: the harness's parsers read the captured files, and the checks cross
one captured output against another (the search's headline against the parsed CSV rows, an estimate of the
search's best row against that row) rather than against numbers copied into the test.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import aiconfigurator_cli as aic  # noqa: E402
import compare_aiconfigurator as cmp  # noqa: E402
import shardplan_pick as picks  # noqa: E402

DATA = Path(__file__).parent / "data" / "aiconfigurator"


def _search(folder: str, total_gpus: int) -> aic.SearchResult:
    texts = {mode: (DATA / folder / mode / "best_config_topn.csv").read_text() for mode in ("agg", "disagg")}
    return aic.best_deployment(texts["agg"], texts["disagg"], total_gpus)


def _headline(folder: str) -> tuple[str, float]:
    text = (DATA / folder / "default_stdout.txt").read_text()
    match = re.search(r"Best Experiment Chosen: (\w+) at ([\d.]+) tokens/s/gpu", text)
    assert match, "the captured summary has a headline"
    return match.group(1), float(match.group(2))


@pytest.mark.parametrize(
    ("folder", "total_gpus"), [("llama8b-2xh100", 2), ("qwen3-30b-a3b-4xh200", 4), ("qwen3-235b-16xh200", 16)]
)
def test_best_deployment_is_the_one_aiconfigurator_announces(folder: str, total_gpus: int) -> None:
    mode, per_gpu = _headline(folder)
    result = aic.best_deployment(
        (DATA / folder / "agg" / "best_config_topn.csv").read_text(),
        (DATA / folder / "disagg" / "best_config_topn.csv").read_text(),
        total_gpus,
    )
    assert result.best.mode == mode
    assert result.tokens_per_s_per_budget_gpu == pytest.approx(per_gpu, abs=0.01)
    assert result.best.gpus_used <= total_gpus


def test_replicas_fill_the_budget_and_scale_concurrency() -> None:
    # The 8B search's best row is one 1-GPU worker; on 2 GPUs the deployment is two of them.
    result = _search("llama8b-2xh100", 2)
    with (DATA / "llama8b-2xh100" / "agg" / "best_config_topn.csv").open() as rows:
        row_concurrency = int(next(csv.DictReader(rows))["concurrency"])
    assert result.best.agg is not None and result.best.agg.gpus == 1
    assert result.best.replicas == 2
    assert result.best.concurrency == 2 * row_concurrency
    assert "Total GPUs: 2" in (DATA / "llama8b-2xh100" / "default_stdout.txt").read_text()


def test_disagg_best_counts_every_worker_of_both_pools() -> None:
    result = _search("qwen3-235b-16xh200", 16)
    best = result.best
    assert best.mode == "disagg" and best.prefill is not None and best.decode is not None
    assert best.gpus_used == best.prefill.gpus * best.prefill_workers + best.decode.gpus * best.decode_workers
    assert best.gpus_used <= 16


def test_no_rows_is_an_explained_error() -> None:
    header = (DATA / "llama8b-2xh100" / "agg" / "best_config_topn.csv").read_text().splitlines()[0]
    with pytest.raises(aic.AicError, match="no configuration"):
        aic.best_deployment(header + "\n", None, 2)


def test_estimate_of_the_best_row_matches_that_row() -> None:
    # The captured estimate re-scores the 8B search's best replica (tp1, batch 80): the same figures.
    estimate = aic.parse_estimate((DATA / "estimate_agg_llama8b_tp1_bs80.txt").read_text())
    result = _search("llama8b-2xh100", 2)
    assert estimate.ttft_ms == pytest.approx(result.ttft_ms, abs=1e-3)
    assert estimate.tpot_ms == pytest.approx(result.tpot_ms, abs=1e-3)
    assert estimate.tokens_per_s_per_gpu == pytest.approx(result.tokens_per_s_per_gpu, abs=0.01)
    assert estimate.concurrency * result.best.replicas == result.best.concurrency
    assert estimate.warnings == ()


def test_disagg_estimate_parses_the_pool_figures() -> None:
    estimate = aic.parse_estimate((DATA / "estimate_disagg_qwen3-30b.txt").read_text())
    disagg_rows = (DATA / "qwen3-30b-a3b-4xh200" / "disagg" / "best_config_topn.csv").read_text()
    best_disagg = aic.best_deployment(None, disagg_rows, 4)
    assert estimate.tokens_per_s_per_gpu == pytest.approx(best_disagg.tokens_per_s_per_gpu, abs=0.01)
    assert estimate.concurrency == best_disagg.best.concurrency
    assert estimate.tokens_per_s == pytest.approx(estimate.tokens_per_s_per_gpu * 4, rel=1e-4)


def test_kv_capacity_warning_is_kept() -> None:
    estimate = aic.parse_estimate((DATA / "estimate_agg_kv_warning.txt").read_text())
    assert len(estimate.warnings) == 1 and "batch_size (52)" in estimate.warnings[0]


@pytest.mark.parametrize(
    ("name", "reason"),
    [("estimate_oom_stderr.txt", "OOM: the model"), ("estimate_error_stderr.txt", "moe_tp_size or moe_ep_size")],
)
def test_failed_estimate_says_aiconfigurators_reason(name: str, reason: str) -> None:
    with pytest.raises(aic.AicError, match=reason):
        aic.parse_estimate("", (DATA / name).read_text())


def test_search_space_and_deployments_outside_it() -> None:
    space = aic.parse_search_space((DATA / "llama8b-2xh100" / "agg" / "exp_config.yaml").read_text())
    assert space["agg"]["pp"] == [1]
    inside = aic.Deployment("agg", 8, agg=aic.Worker(tp=2), replicas=1)
    assert aic.outside_search_space(inside, space, moe=False, gpus_per_node=8) == []
    with_pp = aic.Deployment("agg", 8, agg=aic.Worker(tp=1, pp=2), replicas=1)
    assert any("pp=2" in reason for reason in aic.outside_search_space(with_pp, space, False, 8))
    wide = aic.Deployment("agg", 8, agg=aic.Worker(tp=8, pp=2), replicas=1)
    assert any("spans 2 nodes" in reason for reason in aic.outside_search_space(wide, space, False, 8))


def test_estimate_args_give_per_rank_batches() -> None:
    agg = aic.Deployment("agg", 160, agg=aic.Worker(tp=1), replicas=2)
    args = aic.estimate_args(agg, moe=False)
    assert args[args.index("--batch-size") + 1] == "80" and "--ep" not in args
    disagg = aic.Deployment(
        "disagg", 128, prefill=aic.Worker(), prefill_workers=2, decode=aic.Worker(dp=2, moe_ep=2), decode_workers=1
    )
    args = aic.estimate_args(disagg, moe=True)
    assert args[args.index("--d-bs") + 1] == "64"
    assert args[args.index("--p-workers") + 1] == "2" and args[args.index("--d-ep") + 1] == "2"


def _plan(strategy: dict, deployment: dict | None = None, batch: int = 1) -> dict:
    phase = {"dp": 1, "pp": 1, "adp": 1, "sp": 1, "tp": 1, "ep": 1, "mb": 1}
    plan = {
        "status": "ok",
        "request": {"gpus": 8, "workload": {"batch": batch, "prefill_batch": None}},
        "strategy": {
            "prefill": {**phase, **strategy.get("prefill", strategy)},
            "decode": {**phase, **strategy.get("decode", strategy)},
            "disaggregated": strategy.get("disaggregated", False),
        },
        "figures": {"ttft_ms": 100.0, "tpot_ms": 10.0, "tokens_per_s_per_gpu": 500.0},
    }
    if deployment is not None:
        plan["deployment"] = deployment
    return plan


def test_todays_plan_means_batch_concurrency_and_dp_replicas() -> None:
    pick = picks.read_pick(_plan({"dp": 2, "tp": 4}, batch=32))
    assert pick.deployment is not None
    assert (pick.deployment.mode, pick.deployment.replicas, pick.deployment.concurrency) == ("agg", 2, 32)
    assert pick.deployment.agg == aic.Worker(tp=4, moe_tp=4)
    assert pick.batching == "static"


def test_deployment_section_wins_and_idle_gpus_count_as_zero() -> None:
    deployment = {"concurrency": 96, "replicas": 3, "gpus_used": 6, "idle_gpus": 2, "batching": "continuous"}
    pick = picks.read_pick(_plan({"dp": 3, "tp": 2}, deployment))
    assert pick.deployment is not None and pick.deployment.concurrency == 96 and pick.deployment.replicas == 3
    assert pick.batching == "continuous"
    assert pick.tokens_per_s_per_gpu == pytest.approx(500.0 * 6 / 8)


def test_disaggregated_pick_reads_both_pools() -> None:
    strategy = {"prefill": {"tp": 2, "dp": 2}, "decode": {"tp": 2, "ep": 2, "dp": 2}, "disaggregated": True}
    pools = [{"role": "prefill", "workers": 2, "concurrency_per_worker": 3}, {"role": "decode", "workers": 2}]
    # A split plan's replicas count its decode workers: the worker counts are already totals.
    deployment = {"concurrency": 64, "replicas": 2, "gpus_used": 8, "prefill_workers": 2, "decode_workers": 2}
    pick = picks.read_pick(_plan(strategy, {**deployment, "pools": pools}))
    got = pick.deployment
    assert got is not None and got.mode == "disagg"
    assert (got.prefill_workers, got.decode_workers, got.gpus_used) == (2, 2, 8)
    assert got.decode == aic.Worker(tp=2, moe_tp=1, moe_ep=2)
    assert got.prefill_batch == 3
    args = aic.estimate_args(got, moe=True)
    assert args[args.index("--d-bs") + 1] == "32" and args[args.index("--p-bs") + 1] == "3"


def test_a_split_picks_decode_slots_hold_its_decode_batches_not_the_prefill_queue() -> None:
    strategy = {"prefill": {"tp": 1, "dp": 2}, "decode": {"tp": 1, "dp": 2}, "disaggregated": True}
    pools = [{"role": "prefill", "workers": 2, "concurrency_per_worker": 1}, {"role": "decode", "workers": 2}]
    deployment = {"concurrency": 125, "gpus_used": 4, "prefill_workers": 2, "decode_workers": 2}
    # 125 in flight, 2 x 48 of them decoding: the other 29 wait for or run their prefill.
    pools[1]["concurrency_per_worker"] = 48
    got = picks.read_pick(_plan(strategy, {**deployment, "pools": pools})).deployment
    assert got is not None and got.concurrency == 125 and got.decoding == 96
    args = aic.estimate_args(got, moe=False)
    assert args[args.index("--d-bs") + 1] == "48"
    assert aic.slot_fill(got) == 1.0


def test_infeasible_plan_has_no_deployment() -> None:
    plan = {"status": "infeasible", "request": {"gpus": 1, "workload": {}}, "strategy": None, "messages": ["too big"]}
    pick = picks.read_pick(plan)
    assert pick.deployment is None and "too big" in pick.notes[0]


def test_ratio_and_targets_from_aiconfigurators_estimate() -> None:
    request = cmp.REQUESTS[1]
    search = _search("llama8b-2xh100", request.gpus)
    pick = picks.read_pick(_plan({"dp": 2}, batch=1))  # one sequence over two replicas: half the slots idle
    assert pick.deployment is not None and aic.slot_fill(pick.deployment) == 0.5
    estimate = aic.parse_estimate((DATA / "estimate_agg_llama8b_tp1_bs80.txt").read_text())
    row = cmp.compare(cmp.Row(request, aic=search, pick=pick, estimate=estimate))
    assert row.ratio == pytest.approx(0.5, rel=1e-4)  # the estimate prints 2 decimals, the CSV 3
    assert row.meets_targets is (estimate.ttft_ms <= request.ttft_ms and estimate.tpot_ms <= request.tpot_ms)
    assert "median 0.50, min 0.50" in cmp.summary([row])
    assert cmp.cells(row)["ratio"] == "0.50"


def test_a_pick_aiconfigurator_cannot_price_is_scored_by_the_pick_inside_its_space() -> None:
    request = cmp.REQUESTS[1]
    search = _search("llama8b-2xh100", request.gpus)
    estimate = aic.parse_estimate((DATA / "estimate_agg_llama8b_tp1_bs80.txt").read_text())
    unpriced = cmp.compare(cmp.Row(request, aic=search, pick=picks.read_pick(_plan({"dp": 2}, batch=1))))
    assert unpriced.ratio is None and unpriced.verified() is unpriced  # nothing to score it by yet
    inside = cmp.compare(cmp.Row(request, aic=search, pick=picks.read_pick(_plan({"dp": 2}, batch=1)),
                                 estimate=estimate, constrained=True))
    unpriced.in_space = inside
    assert unpriced.verified() is inside
    assert "(1 scored by the pick inside AIConfigurator's search space): median 0.50" in cmp.summary([unpriced])
    assert cmp.cells(inside)["request"].endswith(", in AIC's space")


def test_markdown_table_escapes_pipes() -> None:
    table = cmp.markdown_table([{"a": "x|y", "b": "1"}])
    assert table.splitlines()[0] == "| a | b |" and "x\\|y" in table


def test_without_aiconfigurator_the_benchmark_skips_cleanly(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    def cannot_install(venv_dir: Path) -> Path:
        raise aic.AicError("pip could not reach the package index")

    monkeypatch.setattr(cmp, "ensure_aiconfigurator", cannot_install)
    assert cmp.main(["--cases", "llama8b-*", "--shardplan", "shardplan"]) == 0
    assert "skipped: AIConfigurator is not available (pip could not reach" in capsys.readouterr().out


def test_unknown_case_names_the_labels() -> None:
    with pytest.raises(ValueError, match=f"matches no request; labels: {cmp.REQUESTS[0].label}"):
        cmp.select("no-such-case")
    with pytest.raises(SystemExit) as exit_info:
        cmp.main(["--cases", "no-such-case", "--shardplan", "shardplan"])
    assert exit_info.value.code == 2
    expected = [request for request in cmp.REQUESTS if request.label.startswith("qwen3-235b-")]
    assert expected and cmp.select("qwen3-235b-*") == expected
    assert cmp.select(f"{cmp.REQUESTS[0].label}, {cmp.REQUESTS[-1].label}") == [cmp.REQUESTS[0], cmp.REQUESTS[-1]]


def test_sequence_parallel_prefill_has_two_readings_on_the_same_gpus() -> None:
    strategy = {"prefill": {"sp": 4, "ep": 4}, "decode": {"tp": 4, "ep": 4}, "disaggregated": True}
    pick = picks.read_pick(_plan(strategy))
    first, second = pick.deployment, pick.fallback
    assert first is not None and second is not None
    assert first.prefill == aic.Worker(dp=4, moe_tp=1, moe_ep=4)  # SP ranks as attention DP, MoE group whole
    assert second.prefill == aic.Worker() and second.prefill_workers == 4 * first.prefill_workers
    assert first.gpus_used == second.gpus_used == 8
    assert any("sp=4" in reason for reason in pick.beyond_aic)


@pytest.mark.parametrize(
    ("folder", "total_gpus"), [("llama8b-2xh100", 2), ("qwen3-30b-a3b-4xh200", 4), ("qwen3-235b-16xh200", 16)]
)
def test_aiconfigurators_best_as_a_shardplan_spec_reads_back_the_same(folder: str, total_gpus: int) -> None:
    best = _search(folder, total_gpus).best
    spec = picks.shardplan_spec(best)
    phases: dict[str, dict[str, int]] = {}
    for part in spec.removesuffix(";disagg").split(";"):
        name, _, degrees = part.rpartition(":")
        for phase in [name] if name else ["prefill", "decode"]:
            phases[phase] = {key: int(value) for key, value in (item.split("=") for item in degrees.split(","))}
    strategy = {**phases, "disaggregated": spec.endswith(";disagg")}
    pick = picks.read_pick(_plan(strategy, {"concurrency": best.concurrency}))
    assert pick.deployment == best


def test_a_traceback_is_reduced_to_its_exception_line() -> None:
    output = "Traceback (most recent call last):\n  File 'x.py'\nKeyError: 'decode'\nDuring task with name 'plan'\n"
    assert aic.parse_error(output) == "KeyError: 'decode'"
    assert aic.parse_error("error: --gpus must be at least 1\n") == "error: --gpus must be at least 1"
