"""The eval suite: golden cases load and cover the brief, checks judge plans, the runner survives being killed
and resumes without losing or repeating a case, two policies compare, and the reports and exit codes hold."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import SHARDPLAN, run_here
from fake_openai import FakeOpenAI, propose

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.evals.cases import CASES_DIR, Expectation, load_cases
from shardplan.evals.checks import CHECKS, CaseRun, run_checks
from shardplan.evals.report import below, summarize, write_report
from shardplan.evals.runner import RESULTS_FILE, read_results, run_eval
from shardplan.tools.planning.planner import plan, plan_for_strategy, resolve_request

ALL = {c.id: c for c in load_cases()}


def _copy_cases(tmp_path: Path, ids: list[str]) -> Path:
    """The bundled cases ``ids`` in a folder of their own, named so that they load in the given order."""
    folder = tmp_path / "cases"
    folder.mkdir()
    for i, case_id in enumerate(ids):
        shutil.copy(CASES_DIR / f"{case_id}.yaml", folder / f"{i:02d}-{case_id}.yaml")
    return folder


def _pairs(path: Path) -> list[tuple[str, str]]:
    return [(r["case"], r["policy"]) for r in read_results(path)]


# ------------------------------------------------------------------------------------------------ the cases


def test_bundled_cases_cover_every_combination_the_seed_published_layouts_and_negatives() -> None:
    assert len(ALL) >= 30
    wanted = {frozenset(c) for n in range(1, 5) for c in itertools.combinations(("tp", "sp", "pp", "ep"), n)}
    covered = set()
    for case in ALL.values():
        if "seed-combination" not in case.tags:
            continue
        strategy = parse_strategy(case.reference or "")
        used = {d for d in ("tp", "sp", "pp", "ep") for phase in (strategy.prefill, strategy.decode)
                if getattr(phase, d) > 1}
        kinds = {e.kind for e in case.expect}
        assert {"valid", "reference_valid", "no_sp_in_decode"} <= kinds, case.id
        covered.add(frozenset(used))
    assert covered == wanted  # all 15: four singles, six pairs, four triples, all four

    seed = ALL["seed-001-pp-over-tp"]
    assert (seed.request.model, seed.request.gpus, seed.request.gpus_per_node, seed.request.batch) == (
        "openai/gpt-oss-120b", 2, 1, 1)
    assert any(e.kind == "pp_over_tp" and e.value for e in seed.expect)
    published = [c for c in ALL.values() if "published" in c.tags]
    assert len(published) >= 5 and all(c.source and c.reference for c in published)
    assert {"meta-llama/Llama-3.1-405B", "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-235B-A22B",
            "openai/gpt-oss-120b"} <= {c.request.model for c in published}
    statuses = {e.value for c in ALL.values() for e in c.expect if e.kind == "status"}
    assert {"infeasible", "targets_missed", "ok"} <= statuses
    assert any(e.kind == "contradiction_detected" and e.value for c in ALL.values() for e in c.expect)
    for case in ALL.values():  # every structured request names a real model and GPU
        if case.request.prompt is None:
            resolve_request(case.request.to_plan_request())


def test_every_check_a_case_can_name_has_a_function() -> None:
    assert set(Expectation.model_fields) == set(CHECKS)


@pytest.mark.parametrize(("text", "where"), [
    ("expect:\n  - degrees: {decode: {tq: 8}}\n", "expect[0].degrees.decode.tq"),
    ("expect:\n  - valid: true\n    fits: true\n", "expect[0]: each expect item is one check"),
    ("expect:\n  - reference_valid: true\n", "need a 'reference' strategy"),
    ("reference: tp=four\nexpect:\n  - valid: true\n", "reference: cannot read 'tp=four'"),
    ("expect:\n  - valid: true\nextra_key: 1\n", "extra_key: Extra inputs are not permitted"),
    ("expect: []\n", "expect: List should have at least 1 item"),
    ("request: {model: llama-3.1-8b, gpu: H100, gpus: 1, isl_dist: 'lognormal:mean=big', osl: 8}\nexpect:\n"
     "  - valid: true\n", "request: isl_dist"),
    ("request: {model: llama-3.1-8b, gpu: H100, gpus: 1, isl: 8, osl: 8, slo_percentile: p42}\nexpect:\n"
     "  - simulated: true\n", "slo_percentile"),
])
def test_a_malformed_case_is_an_error_naming_the_file_and_the_field(tmp_path: Path, text: str, where: str) -> None:
    head = "id: bad\ndescription: d\n"
    if not text.startswith("request:"):
        head += "request: {model: llama-3.1-8b, gpu: H100, gpus: 1, isl: 8, osl: 8}\n"
    (tmp_path / "bad.yaml").write_text(head + text)
    with pytest.raises(InputError) as info:
        load_cases(str(tmp_path / "*.yaml"))
    assert str(tmp_path / "bad.yaml") in str(info.value) and where in str(info.value)


def test_unreadable_yaml_duplicate_ids_and_empty_globs_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("id: [unclosed\n")
    with pytest.raises(InputError, match=r"a\.yaml is not valid YAML: .* at line"):
        load_cases(tmp_path)
    shutil.copy(CASES_DIR / "combo-01-tp.yaml", tmp_path / "a.yaml")
    shutil.copy(CASES_DIR / "combo-01-tp.yaml", tmp_path / "b.yaml")
    with pytest.raises(InputError, match=r"b\.yaml: id 'combo-01-tp' is also the id of .*a\.yaml"):
        load_cases(tmp_path)
    with pytest.raises(InputError, match="no case files match"):
        load_cases(str(tmp_path / "none-*.yaml"))


# ----------------------------------------------------------------------------------------------- the checks


def test_checks_pass_pp_over_tp_for_the_seed_plan_and_fail_the_tp_alternative_with_reasons() -> None:
    case = ALL["seed-001-pp-over-tp"]
    request = case.request.to_plan_request()
    chosen = plan(request)
    run = CaseRun(case=case, plan=chosen, request=request, gpus_per_node=1)
    verdicts = {r.kind: r for r in run_checks(run)}
    assert verdicts["pp_over_tp"].passed and verdicts["degrees"].passed and verdicts["valid"].passed

    model, cluster = resolve_request(request)
    worse = plan_for_strategy(request, model, cluster, parse_strategy("tp=2"))
    run = CaseRun(case=case, plan=worse, request=request, gpus_per_node=1)
    assert CHECKS["pp_over_tp"](run, True) == (False, "pp_over_tp: expected true, got false (decode tp=2)")
    passed, message = CHECKS["degrees"](run, {"decode": {"pp": 2, "tp": 1}})
    assert not passed and "decode.pp=1 (expected 2)" in message and "decode.tp=2 (expected 1)" in message
    assert not CHECKS["tp_within_node"](run, True)[0]  # tp=2 spans the two single-GPU nodes
    assert CHECKS["strategy_uses"](run, ["tp"])[0] and not CHECKS["strategy_uses"](run, ["pp", "ep"])[0]
    assert not CHECKS["valid"](CaseRun(case=case, error="boom"), True)[0]


def test_traffic_cases_plan_their_traffic_and_the_simulation_checks_judge_it() -> None:
    traffic = [c for c in ALL.values() if "traffic" in c.tags]
    assert {"percentile", "trace", "bursty", "closed-loop"} <= {t for c in traffic for t in c.tags}
    case = ALL["traffic-bursty-p90-llama-8b"]
    request = case.request.to_plan_request()
    w = request.workload
    assert w.slo_percentile == "p90" and w.rate == 20 and w.batch is None
    assert 1000 < w.isl < 1024 and 250 < w.osl < 256  # the clipped lognormals' means
    assert w.traffic is not None and w.traffic.arrival.kind == "gamma"
    chosen = plan(request)
    run = CaseRun(case=case, plan=chosen, request=request, gpus_per_node=8)
    assert CHECKS["simulated"](run, True)[0] and CHECKS["min_goodput"](run, 0.9)[0]
    passed, message = CHECKS["min_goodput"](run, 1.01)
    assert not passed and "at least 101.0%" in message
    steady = case.model_copy(update={"request": case.request.model_copy(
        update={"isl_dist": None, "osl_dist": None, "arrival": None, "slo_percentile": None, "isl": w.isl,
                "osl": w.osl})})
    unsimulated = plan(steady.request.to_plan_request())
    run = CaseRun(case=steady, plan=unsimulated, request=steady.request.to_plan_request())
    assert CHECKS["simulated"](run, False)[0] and not CHECKS["min_goodput"](run, 0.5)[0]


# ----------------------------------------------------------------------------------------------- the runner


def test_runner_writes_a_line_per_pair_and_resume_drops_a_torn_line_and_skips_done_pairs(tmp_path: Path) -> None:
    cases = [ALL["pub-gpt-oss-120b-one-h100"], ALL["neg-405b-does-not-fit"], ALL["neg-prompt-length-contradiction"]]
    first = run_eval(cases, ["builtin"], tmp_path)
    assert [r["case"] for r in first] == [c.id for c in cases]
    assert all(r["passed"] for r in first), [r["failures"] for r in first]
    ok, infeasible, asked = first
    assert ok["status"] == "ok" and ok["valid_plan"] and ok["cost_gap"] == 0.0 and ok["iterations"] >= 1
    assert infeasible["status"] == "infeasible" and infeasible["min_gpus"] >= 16 and not infeasible["expects_plan"]
    assert asked["status"] == "asked_back" and "prompt lengths" in asked["asked_back"]

    # An interrupted run: the first line complete, the second torn mid-write.
    results = tmp_path / RESULTS_FILE
    lines = results.read_text().splitlines(keepends=True)
    results.write_text(lines[0] + lines[1][:40])
    resumed = run_eval(cases, ["builtin"], tmp_path, resume=True)
    assert [r["case"] for r in resumed] == [c.id for c in cases]
    text = results.read_text()
    assert text.startswith(lines[0]) and text.endswith("\n")
    assert sorted(_pairs(results)) == sorted((c.id, "builtin") for c in cases)
    assert all(json.loads(line) for line in text.splitlines())  # the torn line is gone, not glued to the next

    again = run_eval(cases, ["builtin"], tmp_path, resume=True)  # nothing left to do
    assert results.read_text() == text and again == resumed


def test_cli_killed_after_its_first_result_resumes_without_losing_or_repeating_a_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = ["pub-gpt-oss-120b-one-h100", "combo-01-tp", "combo-06-tp-pp", "seed-001-pp-over-tp"]
    folder = _copy_cases(tmp_path, ids)
    out = tmp_path / "out"
    results = out / RESULTS_FILE
    args = [SHARDPLAN, "eval", "--cases", str(folder), "--out", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not (results.exists() and results.read_text().count("\n") >= 1):
            assert proc.poll() is None, "the run ended before it wrote a result"
            assert time.monotonic() < deadline, "no result line within 90 s"
            time.sleep(0.01)
        proc.kill()
    finally:
        proc.wait(timeout=30)
    before = results.read_text()
    done = _pairs(results)
    assert 1 <= len(done) < len(ids), "the kill came too late to test resuming"

    resumed = run_here(capsys, "eval", "--cases", str(folder), "--out", str(out), "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    after = _pairs(results)
    assert sorted(after) == sorted((i, "builtin") for i in ids)  # none lost
    assert len(after) == len(set(after))  # none repeated
    assert results.read_text().startswith(before.rsplit("\n", 1)[0])  # finished lines kept as they were
    assert json.loads(resumed.stdout)["policies"]["builtin"]["cases"] == len(ids)


# ------------------------------------------------------------------------------------ two policies, reports


def test_builtin_and_a_scripted_openai_endpoint_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [ALL["seed-001-pp-over-tp"], ALL["pub-gpt-oss-120b-one-h100"]]
    # The scripted model proposes TP=2 for the seed case (valid but slower than PP=2) and TP=1 on one GPU.
    with FakeOpenAI([propose("tp=2"), propose("tp=1")]) as fake:
        fake.patch(monkeypatch)
        records = run_eval(cases, ["builtin", "openai:scripted"], tmp_path, workers=1)
        assert not fake.script.exhausted and len(fake.script.requests) == 2
    by = {(r["case"], r["policy"]): r for r in records}
    assert all(by[(c.id, "builtin")]["passed"] for c in cases)
    assert by[("pub-gpt-oss-120b-one-h100", "openai:scripted")]["passed"]
    seed = by[("seed-001-pp-over-tp", "openai:scripted")]
    assert seed["strategy"] == "tp=2" and seed["valid_plan"] and not seed["passed"]
    assert any(f.startswith("pp_over_tp: expected true, got false") for f in seed["failures"])
    assert seed["cost_gap"] > 0.05 and seed["best_strategy"] == "pp=2"
    assert (seed["iterations"], seed["tool_calls"], seed["tokens"]) == (1, 1, 15)
    assert by[("seed-001-pp-over-tp", "builtin")]["tokens"] is None

    summary = summarize(records)
    assert summary["builtin"]["expectations_rate"] == 1.0 and summary["openai:scripted"]["expectations_rate"] == 0.5
    assert summary["openai:scripted"]["tokens"] == 30 and summary["openai:scripted"]["failed_cases"] == [
        "seed-001-pp-over-tp"]
    assert below(summary, 0.9) == ["openai:scripted"]
    paths = write_report(records, tmp_path)
    markdown = paths["markdown"].read_text()
    assert "| builtin | 2 | 100% | 100% |" in markdown and "| openai:scripted | 2 | 100% | 50% |" in markdown
    assert "**seed-001-pp-over-tp** (openai:scripted): " in markdown
    assert json.loads(paths["json"].read_text())["policies"]["openai:scripted"]["median_cost_gap"] > 0
    assert paths["plot"].read_bytes().startswith(b"\x89PNG") and paths["plot"].stat().st_size > 5000


def test_cli_writes_reports_and_fail_under_sets_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy_cases(tmp_path, ["pub-gpt-oss-120b-one-h100"])
    failing = (CASES_DIR / "pub-gpt-oss-120b-one-h100.yaml").read_text().replace(
        "id: pub-gpt-oss-120b-one-h100", "id: wrong-degrees").replace("{prefill: {tp: 1, pp: 1}", "{prefill: {tp: 2}")
    (folder / "01-wrong-degrees.yaml").write_text(failing)
    out = tmp_path / "out"
    strict = run_here(capsys, "eval", "--cases", str(folder), "--out", str(out), "--fail-under", "0.9", "--json")
    assert strict.returncode == 1, strict.stderr
    assert "below --fail-under 90%: builtin 50%" in strict.stderr
    assert json.loads(strict.stdout)["below"] == ["builtin"]
    for name in ("report.md", "report.json", "report.png"):
        assert (out / name).stat().st_size > 0
    lines = (out / RESULTS_FILE).read_text()

    lenient = run_here(capsys, "eval", "--cases", str(folder), "--out", str(out), "--resume", "--fail-under", "0.5")
    assert lenient.returncode == 0, lenient.stderr
    assert (out / RESULTS_FILE).read_text() == lines  # everything was done: nothing ran twice
    assert "builtin" in lenient.stdout and "failed wrong-degrees" in lenient.stdout

    for bad in (["--cases", str(tmp_path / "nothing-*.yaml")], ["--policy", "nonsense"], ["--fail-under", "2"]):
        result = run_here(capsys, "eval", "--out", str(out), *bad)
        assert result.returncode == 2 and result.stderr.startswith("error: "), (bad, result.stderr)


def test_an_openai_policy_without_a_key_stops_before_any_case_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("OPENAI_")]:
        monkeypatch.delenv(name)
    result = run_here(capsys, "eval", "--policy", "openai:some-model", "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "OPENAI_API_KEY" in result.stderr
    assert not (tmp_path / "out" / RESULTS_FILE).exists()


def test_plain_request_workload_round_trips_through_a_case() -> None:
    request = ALL["combo-01-tp"].request.to_plan_request("openai:x")
    assert request == PlanRequest(model="meta-llama/Llama-3.1-70B", gpu="H100", gpus=8, policy="openai:x",
                                  workload=Workload(isl=2048, osl=256, batch=8))
