"""What a person reads on the terminal: cost columns that cannot contradict each other, rejections in words,
a review table that says its reason once, rankings flagged when inside the model's error, and a spinner that
keeps off stdout. Run in-process through typer's CliRunner."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from shardplan.cli.app import app
from shardplan.contracts.figures import Figures, make_figures
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import Workload
from shardplan.tools.cost.calibration import calibration
from shardplan.tools.planning.rejections import rejection_phrase, rejection_summary
from shardplan.tools.search.ranking import near_tie
from shardplan.tools.views.phase_columns import PHASE_COLUMNS, column_label

LLAMA_8 = ["-m", "llama-3.1-70b", "--gpus", "8"]


@pytest.fixture(scope="module")
def cli() -> Any:
    runner = CliRunner()

    def run(*args: str) -> Any:
        result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result

    return run


def _flat(text: str) -> str:
    """Table text with its cell borders and line breaks folded into single spaces."""
    return re.sub(r"[\s│┃]+", " ", text)


# ------------------------------------------------------------------------------------------ cost columns


def test_cost_columns_have_distinct_names_explained_in_help(cli: Any) -> None:
    labels = [column_label(c) for c in PHASE_COLUMNS]
    assert len(set(labels)) == len(labels)
    table = cli("cost", *LLAMA_8, "-s", "tp=8", "-b", "4")
    assert table.exit_code == 0, table.stderr
    flat = _flat(table.stdout)
    for label in labels:
        assert label in flat
    assert "exposed comm" not in flat and " comm ms " not in flat
    helped = _flat(cli("cost", "--help").stdout)
    for column in PHASE_COLUMNS:
        assert f"{column_label(column)}: {_flat(column.meaning)}" in helped


def test_the_report_uses_the_cost_command_column_names() -> None:
    from shardplan.tools.planning.planner import plan
    from shardplan.tools.report.html import render_report

    page = render_report(plan(PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=2,
                                          workload=Workload(isl=512, osl=32, batch=4))))
    for column in PHASE_COLUMNS:
        assert f">{column_label(column, with_unit=False)}</th>" in page
    assert "exposed communication" not in page and "busiest comm. stream" not in page


# ------------------------------------------------------------------------------------------ rejections


def test_rejections_read_as_phrases_with_their_rule() -> None:
    assert rejection_phrase("MEM-1", 91) == "91 did not fit in memory (MEM-1)"
    assert rejection_phrase("constraint tp<=4", 2) == "2 broke the constraint tp<=4"
    # A rule the search does not word itself is quoted from the knowledge base.
    from shardplan.knowledge.rules import get_rule

    assert get_rule("TP-5").text.rstrip(".")[1:] in rejection_phrase("TP-5", 1)
    assert rejection_summary({"constraints": 1, "MEM-1": 7}).startswith("7 did not fit in memory (MEM-1), 1 ")


def test_search_prints_rejections_in_words_and_keeps_stdout_json(cli: Any) -> None:
    data = cli("search", *LLAMA_8, "--json")
    rejected = json.loads(data.stdout)["rejected"]  # the spinner stays off stdout
    assert rejected.get("MEM-1"), "llama-3.1-70b on 8 H100 has layouts that do not hold its weights"
    shown = cli("search", *LLAMA_8).stdout
    assert f"{rejected['MEM-1']} did not fit in memory (MEM-1)" in shown
    assert "rejected:" not in shown


# ------------------------------------------------------------------------------------------ review table


def test_review_says_its_shared_reason_once_and_titles_the_reviewed_strategy(cli: Any) -> None:
    result = cli("plan", *LLAMA_8, "--tpot-ms", "12", "-s", "tp=4")
    assert result.exit_code == 0, result.stderr
    out = _flat(result.stdout)
    assert "strategies that beat the reviewed strategy tp=4" in out
    assert "(the reviewed strategy shown)" in out and "best deployment shown" not in out
    miss = re.search(r"misses TPOT [\d.]+ ms > target 12 ms \(\+[\d.]+ ms\)", out)
    assert miss is not None and out.count(miss.group(0)) == 2  # once under the table, once in the explanation
    assert "beats the given strategy" not in out


# ------------------------------------------------------------------------------------------ near ties


def _figures(*tokens_per_s: float, tpot_ms: float = 20.0, gpus: int = 8) -> list[Figures]:
    return [make_figures("steady_state", ttft_ms=100.0, tpot_ms=tpot_ms, osl=256, tokens_per_s=t,
                         requests_per_s=t / 256,
                         memory_per_gpu_gb=40.0, gpu_memory_gb=80.0, fits=True, gpus_used=gpus, gpu_budget=16)
            for t in tokens_per_s]


def test_near_tie_counts_the_leaders_within_the_stated_error() -> None:
    workload = Workload(isl=1024, osl=256, objective="throughput")
    error = calibration().held_out_error["roofline"].throughput_median_pct
    inside = 1000 * (1 - error / 200)  # half the error below the best
    tie = near_tie(_figures(inside, 1000.0, 1000 * (1 - 2 * error / 100)), workload, "roofline")
    assert tie is not None and tie.top == 2 and tie.model_error_pct == error
    assert tie.spread_pct == pytest.approx(error / 2, abs=0.01)
    assert f"within {tie.spread_pct:.1f}%" in tie.note and f"stated error of {error:.1f}%" in tie.note
    assert near_tie(_figures(1000.0, 1000 * (1 - 2 * error / 100)), workload, "roofline") is None


def test_near_tie_stops_where_the_targets_or_the_gpu_count_split_the_ranking() -> None:
    workload = Workload(isl=1024, osl=256, objective="throughput", tpot_ms=25)
    meets, misses = _figures(1000.0)[0], _figures(1001.0, tpot_ms=30)[0]
    assert near_tie([meets, misses], workload, "measured") is None
    larger = _figures(999.0, gpus=16)[0]
    assert near_tie([meets, larger], workload, "measured") is None


def test_search_and_plan_flag_their_near_ties(cli: Any) -> None:
    data = json.loads(cli("search", *LLAMA_8, "--tpot-ms", "40", "--json").stdout)
    tie = data["near_tie"]
    assert tie is not None, "the best deployments of this request are a few percent apart"
    best = data["candidates"][0]["figures"]["tokens_per_s"]
    for c in data["candidates"][: tie["top"]]:
        assert abs(1 - c["figures"]["tokens_per_s"] / best) * 100 <= tie["model_error_pct"]
    assert tie["note"] in _flat(cli("search", *LLAMA_8, "--tpot-ms", "40").stdout)
    plan = json.loads(cli("plan", *LLAMA_8, "--tpot-ms", "40", "--json").stdout)
    assert plan["near_tie"] is not None and plan["near_tie"]["top"] <= 1 + len(plan["alternatives"])
    assert plan["near_tie"]["backend"] == plan["dag_cost"]["pricing"]["backend"]


# ------------------------------------------------------------------------------------------ progress


def test_working_draws_a_spinner_on_a_terminal_and_nothing_when_quiet() -> None:
    from rich.console import Console

    from shardplan.cli.progress import working

    screen = io.StringIO()
    with working("searching deployments", console=Console(file=screen, force_terminal=True, width=100)) as step:
        step.status("priced 12")
        step.line("kept line")
    assert "searching deployments" in screen.getvalue() and "kept line" in screen.getvalue()
    silent = io.StringIO()
    with working("searching", quiet=True, console=Console(file=silent, force_terminal=True)) as step:
        step.line("hidden")
    assert silent.getvalue() == ""
