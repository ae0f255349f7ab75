"""Hostile and malformed input on the traffic, speculation and prefix surfaces: distribution and arrival strings,
``--spec``, trace files that are not files (a FIFO, a device, a folder) or hold odd values, and plan files edited
by hand for ``shardplan simulate``. Each is refused in one line naming the field (exit 2 on the command line),
never a traceback, a hang, a pydantic dump or a half-written output. ``benchmarks/fuzz_cli.py`` and
``benchmarks/fuzz_mcp.py`` keep fuzzing the same kinds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import run_main
from pydantic import ValidationError

from shardplan.contracts.deployment_checks import check_deployment
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.speculation import parse_speculation
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.traffic import GammaArrivals, LognormalLength, parse_arrival, parse_length
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.reading import read_text
from shardplan.tools.catalogs.drafters import check_drafter
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request
from shardplan.tools.traffic.traces import parse_trace_text

PYDANTIC_WORDS = ("validation error", "errors.pydantic.dev", "type=", "input_value")


def _one_line_naming(exc: InputError, field: str) -> str:
    text = str(exc)
    assert "\n" not in text and exc.field == field and exc.fix
    assert not any(word in text for word in PYDANTIC_WORDS), text
    return text


# ------------------------------------------------------------------------ distribution and arrival strings


@pytest.mark.parametrize(("text", "words"), [
    ("fixed:2.5", "'2.5' is not a whole number"),                        # was read as 2
    ("fixed:5,6", "'6' is one value too many"),                          # the 6 was dropped
    ("fixed:tokens=5,tokens=9", "given tokens twice"),
    ("lognormal:mean=2048,cv=0.8,foo=3", "'foo' is not a parameter of lognormal"),
    ("lognormal:mean=2048,cw=0.8", "'cw' is not a parameter"),
    ("lognormal:mean=100,cv=1,low=500,high=10", "low=500 is above high=10"),  # was accepted
    ("lognormal:mean=2048", "lognormal needs cv"),
    ("lognormal:mean=2048,cv=0", "cv should be greater than 0"),
    ("uniform:500,10", "low=500 is above high=10"),
    ("uniform:1,1e12", "high should be less than or equal to 16777216"),
    ("fixed:1e300", "tokens should be less than or equal to 16777216"),
    ("fixed:\u0661\u0662\u0663", "is not a number"),                     # Arabic-Indic digits: float() reads them
    ("fixed:nan", "is not a finite number"),
    ("weibull:2", "unknown length distribution 'weibull'"),
])
def test_a_malformed_length_distribution_is_one_line_naming_its_field(text: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_length(text, "osl_dist")
    assert words in _one_line_naming(caught.value, "osl_dist")


@pytest.mark.parametrize(("text", "words"), [
    ("closed:2.7", "'2.7' is not a whole number"),                       # was 2 clients
    ("closed:0.5", "'0.5' is not a whole number"),
    ("closed:0", "clients should be greater than or equal to 1"),
    ("closed:1e9", "clients should be less than or equal to 1000000"),
    ("closed:32,clients=4", "given clients twice"),
    ("gamma:cv=3,cv=4", "given cv twice"),
    ("gamma", "gamma needs cv"),
    ("gamma:cv=1e-300", "too small to draw gaps from"),                  # was a ZeroDivisionError in plan
    ("gamma:cv=1e-160", "too small to draw gaps from"),                  # was NaN arrival times
    ("gamma:cv=nan", "is not a finite number"),
    ("poisson:3", "one value too many: poisson takes no parameters"),
])
def test_a_malformed_arrival_process_is_one_line_naming_its_field(text: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_arrival(text)
    assert words in _one_line_naming(caught.value, "arrival")


@pytest.mark.parametrize(("text", "expected"), [
    (" fixed: 100 ", {"kind": "fixed", "tokens": 100}),
    ("fixed:100,", {"kind": "fixed", "tokens": 100}),
    ("Uniform:256,high=4096", {"kind": "uniform", "low": 256, "high": 4096}),
    ("lognormal:mean=2048,0.8,high=4096", {"kind": "lognormal", "mean": 2048.0, "cv": 0.8, "low": 1,
                                           "high": 4096}),
])
def test_harmless_spellings_still_read(text: str, expected: dict[str, Any]) -> None:
    assert parse_length(text).model_dump() == expected


def test_the_contracts_refuse_what_the_strings_refuse_in_a_plan_file_too() -> None:
    with pytest.raises(ValidationError, match="too small to draw gaps"):
        GammaArrivals.model_validate({"kind": "gamma", "cv": 1e-300})
    with pytest.raises(ValidationError, match="above high"):
        LognormalLength.model_validate({"kind": "lognormal", "mean": 100, "cv": 1, "low": 500, "high": 10})
    assert np.isfinite(1 / GammaArrivals(kind="gamma", cv=1e-6).cv ** 2)


# ---------------------------------------------------------------------------------------------- speculation


def test_a_superscript_draft_count_is_an_input_error_not_a_value_error() -> None:
    with pytest.raises(InputError) as caught:  # str.isdigit('²') is True, int('²') raises
        parse_speculation("mtp:\u00b2", 1.0)
    _one_line_naming(caught.value, "spec")


@pytest.mark.parametrize("draft", ["llama-3.1-70b", "llama-3.1-8b"])
def test_a_draft_model_no_smaller_than_the_target_is_refused(draft: str) -> None:
    with pytest.raises(InputError) as caught:
        check_drafter(load_model("llama-3.1-8b"), parse_speculation(f"draft:{draft}:3", 1.0))
    assert "not smaller than the target" in _one_line_naming(caught.value, "spec")
    check_drafter(load_model("llama-3.1-70b"), parse_speculation("draft:llama-3.1-8b:3", 1.0))


# ------------------------------------------------------------------------------------- files and traces


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)  # opening it would block until a writer came: the test would hang before the fix
    with pytest.raises(InputError, match="not a regular file") as caught:
        read_text(fifo, what="trace", field="workload", fix="give a file")
    _one_line_naming(caught.value, "workload")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_that_never_ends_is_refused_without_reading_it() -> None:
    with pytest.raises(InputError, match="not a regular file"):  # it was read until memory ran out
        read_text(Path("/dev/zero"), what="trace", field="workload", fix="give a file")


def test_a_folder_and_a_binary_file_say_what_they_are(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="it is a folder"):
        read_text(tmp_path, what="trace", field="workload", fix="give a file")
    binary = tmp_path / "trace.csv"
    binary.write_bytes(b"input_tokens,output_tokens\n\xff\xfe\n")
    with pytest.raises(InputError, match=r"not UTF-8 text \(invalid start byte at byte 27\)"):
        read_text(binary, what="trace", field="workload", fix="give a file")


def test_times_that_span_past_a_float_are_refused_not_replayed_as_nan() -> None:
    text = "timestamp,input_tokens,output_tokens\n1e308,512,128\n-1e308,100,10\n"
    with pytest.raises(InputError, match="spans more seconds than a float holds") as caught:
        parse_trace_text(text, name="t.csv", kind="csv")
    _one_line_naming(caught.value, "workload")


@pytest.mark.parametrize("group", [{"a": 1}, [1, 2]])
def test_a_json_object_or_array_is_no_prefix_group(group: Any) -> None:
    text = json.dumps({"input_tokens": 512, "output_tokens": 64, "session_id": group})
    with pytest.raises(InputError, match="column 'session_id' holds an"):
        parse_trace_text(text, name="t.jsonl", kind="json")


@pytest.mark.parametrize("text", ["", "\ufeff", " \r\n\t\n"])
def test_an_empty_trace_says_it_is_empty(text: str) -> None:
    with pytest.raises(InputError, match="'t.csv' is empty"):  # it said: no prompt-token column (its columns: none)
        parse_trace_text(text, name="t.csv", kind="csv")


def test_prefix_groups_are_read_by_their_text() -> None:
    text = "input_tokens,output_tokens,session_id\n512,64,\n512,64, a \n512,64,a\n512,64,7\n"
    assert parse_trace_text(text, name="t.csv", kind="csv").prefix_group.tolist() == [-1, 0, 0, 1]


# ------------------------------------------------------------------------------- plans edited by hand


@pytest.fixture(scope="module")
def plan_data() -> dict[str, Any]:
    workload = Workload(isl=512, osl=64, objective="throughput")
    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100", gpus=4, workload=workload)
    model, cluster = resolve_request(request)
    written = plan_for_strategy(request, model, cluster, parse_strategy("prefill:tp=1;decode:tp=2;disagg"))
    data: dict[str, Any] = json.loads(written.model_dump_json())
    return data


def _edited(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(data))
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(("path", "value", "field", "words"), [
    ("deployment.pools", [], "deployment.pools", "has roles none"),
    ("deployment.pools.1.role", "prefill", "deployment.pools", "needs a prefill and a decode pool"),
    ("strategy.disaggregated", False, "deployment.pools", "colocated strategy runs on replica pools only"),
    ("deployment.pools.1.layout", "zz", "deployment.pools[1].layout", "does not read as a layout"),
    ("deployment.pools.1.layout", "tp=64", "deployment.pools[1].gpus_per_worker", "runs on 64 GPUs"),
    ("deployment.pools.1.workers", 10**9, "deployment", "the pools use"),
    ("deployment.pools.1.concurrency_per_worker", 10**9, "deployment.pools[1].concurrency_per_worker",
     "sequences that fit a worker"),
    ("deployment.concurrency", 10**9, "deployment.concurrency", "sequences its pools hold"),
    ("request.gpus", 1, "deployment.gpu_budget", "more than the request's 1 GPUs"),
])
def test_a_deployment_edited_out_of_agreement_is_refused(plan_data: dict[str, Any], path: str, value: Any,
                                                          field: str, words: str) -> None:
    assert check_deployment(Plan.model_validate(plan_data)).deployment is not None  # as written, it agrees
    with pytest.raises(InputError) as caught:
        check_deployment(Plan.model_validate(_edited(plan_data, path, value)))
    assert words in _one_line_naming(caught.value, field)


@pytest.mark.parametrize("command", [["simulate", "--requests", "20"], ["export"], ["export", "--json"], ["report"]])
def test_every_command_refuses_an_edited_plan_and_writes_nothing(
    plan_data: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # The launch command would serve another deployment than the one priced, the report would draw one.
    edited = tmp_path / "plan.json"
    edited.write_text(json.dumps(_edited(plan_data, "deployment.pools", [])))
    out = tmp_path / "out.file"
    argv = [command[0], str(edited), *command[1:]] + (["-o", str(out)] if command[0] != "export" else [])
    assert run_main(argv) == 2
    captured = capsys.readouterr()
    assert "error: deployment.pools has roles none" in captured.err and not out.exists() and captured.out == ""


def test_simulate_checks_both_outputs_before_it_runs(plan_data: dict[str, Any], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    written = tmp_path / "plan.json"
    written.write_text(json.dumps(plan_data))
    out = tmp_path / "summary.json"
    argv = ["simulate", str(written), "--requests", "20", "-o", str(out), "--trace", str(tmp_path / "no" / "t.json")]
    assert run_main(argv) == 2  # the summary used to be written before the trace failed
    assert "folder" in capsys.readouterr().err and not out.exists() and list(tmp_path.iterdir()) == [written]


@pytest.mark.parametrize("rate", ["inf", "nan", "0", "1e-300", "5e-324", "1e300"])
def test_simulate_refuses_a_rate_outside_its_range(plan_data: dict[str, Any], tmp_path: Path,
                                                                 rate: str, capsys: pytest.CaptureFixture[str]) -> None:
    written = tmp_path / "plan.json"
    written.write_text(json.dumps(plan_data))
    assert run_main(["simulate", str(written), "--requests", "20", "--rate", rate]) == 2
    assert "requests/s lies outside the range" in capsys.readouterr().err
