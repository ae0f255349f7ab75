"""Traffic as people have it: length distributions, arrival processes and request traces, drawn with a seed; the
workload they imply; and the traffic options through plan, search, the MCP and LangChain tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from cli_helpers import ROOT, run_here
from mcp import Client

from shardplan.contracts.traffic import Traffic, arrival_text, length_text, parse_arrival, parse_length
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.api.arguments import RequestArgs
from shardplan.tools.surfaces.langchain_tools import shardplan_tools
from shardplan.tools.surfaces.mcp_server import build_server
from shardplan.tools.traffic.sizing import length_mean, parse_traffic, workload_fields
from shardplan.tools.traffic.stream import draw_lengths, request_stream
from shardplan.tools.traffic.traces import read_trace


def _workload(**traffic: object) -> Workload:
    return Workload(isl=2048, osl=256, rate=8.0, traffic=Traffic.model_validate(traffic))


def test_lengths_follow_their_distribution_and_a_seed_repeats_them() -> None:
    w = _workload(isl=parse_length("lognormal:mean=2048,cv=0.8"), osl=parse_length("uniform:100,300"))
    stream = request_stream(w, requests=20_000, seed=7)
    assert abs(stream.mean_isl / 2048 - 1) < 0.03 and abs(stream.isl.std() / stream.isl.mean() - 0.8) < 0.05
    assert stream.osl.min() >= 100 and stream.osl.max() <= 300 and abs(stream.mean_osl / 200 - 1) < 0.02
    again = request_stream(w, requests=20_000, seed=7)
    assert np.array_equal(stream.isl, again.isl) and np.array_equal(stream.arrival_s, again.arrival_s)
    other = request_stream(w, requests=20_000, seed=8)
    assert not np.array_equal(stream.isl, other.isl)


def test_arrivals_keep_the_rate_and_bursts_spread_the_gaps() -> None:
    poisson = request_stream(_workload(), requests=20_000, seed=1)
    bursty = request_stream(_workload(arrival=parse_arrival("gamma:cv=3")), requests=20_000, seed=1)
    for stream in (poisson, bursty):
        assert np.all(np.diff(stream.arrival_s) >= 0) and stream.arrival_s[0] == 0
        assert abs(len(stream) / stream.arrival_s[-1] / 8.0 - 1) < 0.1
    cv = lambda s: np.diff(s.arrival_s).std() / np.diff(s.arrival_s).mean()  # noqa: E731
    assert abs(cv(poisson) - 1) < 0.05 and abs(cv(bursty) - 3) < 0.3
    assert np.array_equal(poisson.isl, np.full(20_000, 2048)) and poisson.clients is None


def test_a_closed_loop_needs_no_rate_and_an_open_one_does() -> None:
    closed = request_stream(Workload(isl=512, osl=64, traffic=Traffic(arrival=parse_arrival("closed:16"))),
                            requests=100)
    assert closed.clients == 16 and not closed.arrival_s.any()
    with pytest.raises(InputError, match="rate") as caught:
        request_stream(Workload(isl=512, osl=64), requests=10)
    assert caught.value.field == "rate"


@pytest.mark.parametrize(("text", "parse", "field"), [
    ("lognormal:mean=abc", parse_length, "isl_dist"), ("weibull:2", parse_length, "isl_dist"),
    ("uniform:500,100", parse_length, "isl_dist"), ("gamma:cv=-1", parse_arrival, "arrival"),
    ("closed:0", parse_arrival, "arrival"), ("burst", parse_arrival, "arrival"),
    ("lognormal:mean=inf,cv=1", parse_length, "isl_dist"),
])
def test_malformed_traffic_is_one_error_naming_the_field(text: str, parse: object, field: str) -> None:
    with pytest.raises(InputError) as caught:
        parse(text)  # type: ignore[operator]
    assert caught.value.field == field and caught.value.fix and "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------------ traces replayed


def _trace_workload(trace: str, arrival: str = "poisson", rate: float | None = None) -> Workload:
    return Workload(isl=1161, osl=258, rate=rate, traffic=Traffic(trace=trace, arrival=parse_arrival(arrival)))


def test_a_trace_stream_is_the_trace_first_then_rows_drawn_with_the_seed() -> None:
    trace = read_trace("azure-conv")
    first = request_stream(_trace_workload("azure-conv", "trace"), requests=100)
    assert np.array_equal(first.isl, trace.isl[:100]) and np.array_equal(first.osl, trace.osl[:100])
    assert np.array_equal(first.arrival_s, trace.arrival_s[:100]) and (first.prefix_group == -1).all()
    longer = request_stream(_trace_workload("azure-conv", "trace"), requests=7000, seed=4)
    assert np.array_equal(longer.isl[:5000], trace.isl) and np.all(np.diff(longer.arrival_s) >= 0)
    assert set(zip(longer.isl[5000:].tolist(), longer.osl[5000:].tolist(), strict=True)) <= set(
        zip(trace.isl.tolist(), trace.osl.tolist(), strict=True))  # drawn rows keep their lengths together
    assert abs((7000 - 1) / longer.arrival_s[-1] / trace.mean_rate - 1) < 0.05
    again = request_stream(_trace_workload("azure-conv", "trace"), requests=7000, seed=4)
    other = request_stream(_trace_workload("azure-conv", "trace"), requests=7000, seed=5)
    assert np.array_equal(longer.isl, again.isl) and not np.array_equal(longer.isl[5000:], other.isl[5000:])


def test_trace_times_are_scaled_to_a_rate_and_other_processes_draw_their_own() -> None:
    trace = read_trace("azure-code")
    own = request_stream(_trace_workload("azure-code", "trace"), requests=5000).arrival_s
    doubled = request_stream(_trace_workload("azure-code", "trace", rate=2 * trace.mean_rate), requests=5000)
    assert np.allclose(doubled.arrival_s, own / 2)
    assert abs((len(own) - 1) / doubled.arrival_s[-1] / trace.mean_rate - 2) < 1e-9
    poisson = request_stream(_trace_workload("azure-code", rate=2.0), requests=5000, seed=1)
    assert np.array_equal(poisson.isl, trace.isl) and abs(5000 / poisson.arrival_s[-1] / 2.0 - 1) < 0.05
    closed = request_stream(_trace_workload("azure-code", "closed:8"), requests=50)
    assert closed.clients == 8 and not closed.arrival_s.any() and np.array_equal(closed.osl, trace.osl[:50])


def test_replaying_a_trace_without_times_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "lengths.jsonl"
    path.write_text('{"prompt_tokens": 10, "completion_tokens": 2}\n{"prompt_tokens": 20, "completion_tokens": 4}\n')
    with pytest.raises(InputError, match="has none") as caught:
        request_stream(_trace_workload(str(path), "trace"), requests=4)
    assert caught.value.field == "arrival"
    assert request_stream(_trace_workload(str(path), rate=1.0), requests=4).isl.tolist()[:2] == [10, 20]


# ------------------------------------------------------------------------------------------ the workload they imply


def test_lengths_left_out_are_the_means_and_given_ones_must_agree_within_ten_percent() -> None:
    fields = workload_fields(parse_traffic(None, None, "azure-conv", None), isl=None, osl=None, batch=None, rate=None)
    assert (fields["isl"], fields["osl"], fields["rate"]) == (1161, 258, None)
    assert workload_fields(parse_traffic("uniform:1000,3000", None, None, None), isl=1900, osl=None, batch=None,
                           rate=None)["isl"] == 1900  # 5% from the mean of 2000: kept
    with pytest.raises(InputError) as caught:
        workload_fields(parse_traffic(None, None, "azure-conv", None), isl=2048, osl=None, batch=None, rate=None)
    assert caught.value.field == "isl" and "isl 2048" in str(caught.value) and "(1161)" in str(caught.value)
    clipped = parse_length("lognormal:mean=2048,cv=0.8,high=4096")
    drawn = draw_lengths(clipped, 400_000, np.random.default_rng(0)).mean()
    assert abs(length_mean(clipped) / drawn - 1) < 0.005 and length_mean(clipped) < 1900


def test_a_closed_loop_sets_the_sequences_in_flight_and_a_replayed_trace_its_rate() -> None:
    closed = workload_fields(parse_traffic(None, None, None, "closed:32"), isl=None, osl=None, batch=None, rate=None)
    assert closed["batch"] == 32 and (closed["isl"], closed["osl"]) == (2048, 256)
    with pytest.raises(InputError, match="batch 64 exceeds the 32 clients") as caught:
        workload_fields(parse_traffic(None, None, None, "closed:32"), isl=None, osl=None, batch=64, rate=None)
    assert caught.value.field == "batch"
    replayed = workload_fields(parse_traffic(None, None, "azure-code", "trace"), isl=None, osl=None, batch=None,
                               rate=None)
    assert replayed["rate"] == pytest.approx(read_trace("azure-code").mean_rate)


@pytest.mark.parametrize(("options", "field", "words"), [
    ((None, None, None, "trace"), "arrival", "no trace is given"),
    (("uniform:1,2", None, "azure-conv", None), "isl_dist", "both give the lengths"),
    ((None, "lognormal:cv=1", None, None), "osl_dist", "lognormal needs mean"),
    ((None, None, None, "bursty"), "arrival", "unknown arrival process"),
])
def test_contradicting_or_malformed_traffic_options_are_one_error(options: tuple[str | None, ...], field: str,
                                                                  words: str) -> None:
    with pytest.raises(InputError, match=words) as caught:
        parse_traffic(*options)
    assert caught.value.field == field and "\n" not in str(caught.value)


def test_texts_read_back_into_the_same_traffic() -> None:
    for text in ("lognormal:mean=2048.5,cv=0.8,low=16,high=8192", "uniform:256,4096", "fixed:7"):
        assert parse_length(length_text(parse_length(text))) == parse_length(text)
    for text in ("poisson", "gamma:cv=3", "closed:32", "trace"):
        assert arrival_text(parse_arrival(text)) == text


# ------------------------------------------------------------------------------------------ every entry point


def _plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    result = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--json", *args)
    assert result.returncode == 0, result.stderr
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def test_plan_with_a_bundled_trace_plans_its_means_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan_json(capsys, "--gpus", "8", "--workload", "azure-conv", "--rate", "2")
    workload, assumptions = plan["request"]["workload"], plan["assumptions"]
    assert (workload["isl"], workload["osl"], workload["rate"]) == (1161, 258, 2.0)
    assert workload["traffic"]["trace"] == "azure-conv" and plan["status"] == "ok"
    assert "prompt length 1161 tokens: the mean of trace 'azure-conv', not given" in assumptions
    assert "output length 258 tokens: the mean of trace 'azure-conv', not given" in assumptions


def test_plan_with_a_length_distribution_and_a_closed_loop(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan_json(capsys,
                      "--gpus", "1", "--isl-dist", "uniform:1000,3000", "--osl", "128", "--arrival", "closed:16")
    workload = plan["request"]["workload"]
    assert (workload["isl"], workload["osl"], workload["batch"]) == (2000, 128, 16)
    assert workload["traffic"]["isl"] == {"kind": "uniform", "low": 1000, "high": 3000}
    assert plan["deployment"]["concurrency"] == 16
    assert "prompt length 2000 tokens: the mean of uniform:1000,3000, not given" in plan["assumptions"]
    assert "16 sequences in flight: the 16 clients of arrival closed:16, no batch given" in plan["assumptions"]


@pytest.mark.parametrize(("args", "words"), [
    (("--workload", "azure-conv", "--isl", "4096"), "isl 4096 and the mean prompt length of trace 'azure-conv' (1161)"),
    (("--arrival", "trace"), "arrival 'trace' replays a trace's timestamps, and no trace is given"),
    (("--isl-dist", "weibull:2"), "unknown length distribution 'weibull'"),
])
def test_contradicting_traffic_options_exit_2_with_one_line(
    args: tuple[str, ...], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_here(capsys, "search", "-m", "llama-3.1-8b", "--gpus", "1", *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and words in result.stderr, result.stderr


def test_the_plan_tool_takes_traffic_over_mcp_and_langchain() -> None:
    server = build_server()
    args = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 1, "osl": 64, "isl_dist": "uniform:1000,3000",
            "arrival": "gamma:cv=3", "rate": 1.0}

    async def call() -> Any:
        async with Client(server) as client:
            return await client.call_tool("plan", args)

    over_mcp = anyio.run(call)
    assert not over_mcp.is_error, over_mcp.content
    assumptions = over_mcp.structured_content["assumptions"]
    assert "prompt length 2000 tokens: the mean of uniform:1000,3000, not given" in assumptions
    queued = "arrivals gamma:cv=3: the analytic model queues them as Poisson arrivals at the same mean rate"
    assert queued in assumptions
    [tool] = shardplan_tools(["plan"])
    over_langchain = tool.invoke({**args, "detail": True})
    assert over_langchain["plan"]["request"]["workload"]["isl"] == 2000
    assert over_langchain["plan"]["request"]["workload"]["traffic"]["arrival"] == {"kind": "gamma", "cv": 3.0}


def test_tool_arguments_keep_trace_paths_under_the_allowed_folders(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("input_tokens,output_tokens\n1000,100\n3000,300\n")
    args = RequestArgs(model="llama-3.1-8b", gpus=1, workload=str(path))
    monkeypatch.setenv("SHARDPLAN_ALLOWED_ROOTS", str(ROOT))
    with pytest.raises(InputError, match="outside the allowed folders") as caught:
        args.to_request()
    assert caught.value.field == "workload" and "azure-code, azure-conv" in (caught.value.fix or "")
    assert RequestArgs(model="llama-3.1-8b", gpus=1, workload="azure-code").to_request().workload.isl == 2053
    monkeypatch.setenv("SHARDPLAN_ALLOWED_ROOTS", str(tmp_path))
    request = args.to_request()
    assert (request.workload.isl, request.workload.osl) == (2000, 200)
    assert RequestArgs(**RequestArgs.from_request(request)).to_request().workload == request.workload


def test_the_workload_contract_s_examples_hold() -> None:
    import doctest

    from shardplan.contracts import workload

    assert doctest.testmod(workload).failed == 0
