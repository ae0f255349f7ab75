"""Request traces: read strictly from CSV and JSON Lines with the column names of common exports, bundled samples
of the Azure LLM inference traces, and every malformed trace one error naming the field, row and column, in code
and on the command line."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import ROOT, run_here
from cli_helpers import run_cli as _cli

from shardplan.errors import InputError
from shardplan.tools.catalogs.trace_files import bundled_trace_name, bundled_traces
from shardplan.tools.traffic import traces
from shardplan.tools.traffic.traces import parse_trace_text, read_trace, trace_stats

ROWS = [(1000, 200, 0.0, "a"), (1200, 180, 0.5, "b"), (900, 220, 1.25, "a")]
"""Three requests: prompt tokens, output tokens, seconds from the first, prefix group."""


def _write(path: Path, header: tuple[str | None, ...], kind: str, time_scale: float = 1.0) -> Path:
    """ROWS as a CSV or JSON Lines file with these column names (None: the column left out)."""
    keep = [i for i, name in enumerate(header) if name is not None]
    records = [{header[i]: row[i] if i != 2 else row[i] / time_scale for i in keep} for row in ROWS]
    if kind == "csv":
        lines = [",".join(str(header[i]) for i in keep)] + [",".join(str(r[header[i]]) for i in keep) for r in records]
    else:
        lines = [json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
@pytest.mark.parametrize(("header", "time_scale"), [
    (("ContextTokens", "GeneratedTokens", "TIMESTAMP", None), 1.0),                  # Azure LLM inference traces
    (("input_tokens", "output_tokens", "timestamp", "prefix_group"), 1.0),
    (("prompt_tokens", "completion_tokens", "arrival_time", "session_id"), 1.0),     # OpenAI usage names
    (("input_length", "output_length", "timestamp_ms", "conversation_id"), 1e-3),    # Mooncake-style, in ms
    (("Input Len", "Output-Len", "Arrival_Time_us", "group_id"), 1e-6),
    (("ISL", "OSL", None, None), 1.0),
    (("num_prompt_tokens", "num_generated_tokens", "time", "prefix_id"), 1.0),
])
def test_each_recognised_column_spelling_is_read(tmp_path: Path, kind: str, header: tuple[str | None, ...],
                                                 time_scale: float) -> None:
    trace = read_trace(str(_write(tmp_path / f"t.{kind}", header, kind, time_scale)))
    assert trace.isl.tolist() == [1000, 1200, 900] and trace.osl.tolist() == [200, 180, 220]
    if header[2] is None:
        assert trace.arrival_s is None and trace.mean_rate is None
    else:
        assert np.allclose(trace.arrival_s, [0.0, 0.5, 1.25]) and trace.mean_rate == pytest.approx(2 / 1.25)
    assert trace.prefix_group.tolist() == ([0, 1, 0] if header[3] else [-1, -1, -1])


def test_iso_timestamps_become_seconds_from_the_earliest_and_rows_are_put_in_time_order() -> None:
    text = ("input_tokens,output_tokens,timestamp\n"
            "300,30,2024-05-01T12:00:02.5Z\n"             # aware, UTC
            "100,10,2024-05-01 14:00:00+02:00\n"          # the same day at 12:00:00 UTC: the earliest
            "200,20,2024-05-01 12:00:01.2500000\n")       # naive, read as UTC; seven fractional digits as Azure's
    trace = parse_trace_text(text, name="t.csv", kind="csv")
    assert trace.arrival_s.tolist() == [0.0, 1.25, 2.5]
    assert trace.isl.tolist() == [100, 200, 300] and trace.osl.tolist() == [10, 20, 30]


def test_json_arrays_and_vllm_saved_results_are_read() -> None:
    array = parse_trace_text('[{"input_tokens": 5, "output_tokens": 3}, {"input_tokens": 7, "output_tokens": 2}]',
                             name="a.json", kind="json")
    columns = parse_trace_text('{"date": ["x", "y"], "input_lens": [5, 7], "output_lens": [3, 2]}',
                               name="result.json", kind="json")
    for trace in (array, columns):
        assert trace.isl.tolist() == [5, 7] and trace.osl.tolist() == [3, 2] and trace.arrival_s is None


def test_bundled_traces_are_listed_read_by_name_and_shipped_with_their_source() -> None:
    assert bundled_traces() == {"azure-code": "azure-code-2023.csv", "azure-conv": "azure-conv-2023.csv"}
    assert bundled_trace_name("Azure-Conv-2023") == "azure-conv" and bundled_trace_name("conv") is None
    folder = ROOT / "tools" / "data" / "traces"
    for name, file_name in bundled_traces().items():
        assert (folder / file_name).stat().st_size < 300_000
        trace = read_trace(name)
        assert len(trace) == 5000 and trace.arrival_s is not None and np.all(np.diff(trace.arrival_s) >= 0)
        assert trace.isl.min() >= 1 and trace.osl.min() >= 1
    conv = trace_stats(read_trace("azure-conv"))
    assert (conv["isl_mean"], conv["osl_mean"], conv["rate_per_s"]) == (1161.1, 257.5, 4.885)
    readme = (folder / "README.md").read_text()
    assert "https://github.com/Azure/AzurePublicDataset" in readme and "CC BY 4.0" in readme
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "shardplan.tools.data.traces" in config["packages"]
    assert "*.csv" in config["package-data"]["shardplan.tools.data.traces"]


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("input_tokens,output_tokens\n100,10\n")
    assert read_trace(str(path)).isl.tolist() == [100]
    path.write_text("input_tokens,output_tokens\n100,10\n300,30\n")
    assert read_trace(str(path)).isl.tolist() == [100, 300]


def test_a_read_trace_cannot_be_changed_by_its_reader() -> None:
    with pytest.raises(ValueError, match="read-only"):
        read_trace("azure-code").isl[0] = 1


MALFORMED: list[tuple[str, str, str]] = [
    ("t.csv", "a,b\n1,2\n", "no prompt-token column (its columns: a, b)"),
    ("t.csv", "input_tokens,prompt_tokens,output_tokens\n1,2,3\n", "two prompt-token columns"),
    ("t.csv", "input_tokens,output_tokens\n5,3\n6,-4\n", "row 2 (line 3), column 'output_tokens': '-4' is not a "
                                                         "count of 1 or more"),
    ("t.csv", "input_tokens,output_tokens\n0,3\n", "row 1 (line 2), column 'input_tokens': '0'"),
    ("t.csv", "input_tokens,output_tokens\nmany,3\n", "column 'input_tokens': 'many' is not a number of tokens"),
    ("t.csv", "input_tokens,output_tokens\nnan,3\n", "'nan' is not a finite number"),
    ("t.csv", "input_tokens,output_tokens\n12.5,3\n", "'12.5' is not a whole number of tokens"),
    ("t.csv", "input_tokens,output_tokens\n99999999999,3\n", "exceeds the limit of 16,777,216 tokens"),
    ("t.csv", "input_tokens,output_tokens\n5,\n", "column 'output_tokens' is empty"),
    ("t.csv", "input_tokens,output_tokens\n5\n", "line 2 has 1 cell, the header 2"),
    ("t.csv", "input_tokens,output_tokens,timestamp\n5,3,0\n5,3,2024-01-01\n", "mixes seconds and datetimes"),
    ("t.csv", "input_tokens,output_tokens,timestamp\n5,3,yesterday\n", "neither seconds nor an ISO datetime"),
    ("t.csv", "input_tokens,output_tokens,timestamp\n5,3,inf\n", "'inf' is not a finite number"),
    ("t.csv", "input_tokens,output_tokens\n", "holds no requests"),
    ("t.csv", "", "is empty"),
    ("t.jsonl", '{"input_tokens": 5, "output_tokens": 3}\n{"input_tokens": NaN, "output_tokens": 3}\n',
     "line 2 is not valid JSON: NaN is not a finite number"),
    ("t.jsonl", '{"input_tokens": 5, "output_tokens": 3}\n{"input_tokens": 5,\n', "line 2 is not valid JSON"),
    ("t.jsonl", '{"input_tokens": 5, "output_tokens": 3}\n[1, 2]\n', "line 2 is not a JSON object"),
    ("t.jsonl", '{"input_tokens": 5, "output_tokens": 3}\n{"input_tokens": 5}\n', "row 2 (line 2), column "
                                                                                  "'output_tokens' is empty"),
    ("t.jsonl", '{"input_tokens": true, "output_tokens": 3}\n', "True is not a number of tokens"),
    ("t.json", '{"input_lens": [1, 2], "output_lens": [3]}', "arrays of different lengths"),
]


@pytest.mark.parametrize(("name", "text", "expected"), MALFORMED)
def test_a_malformed_trace_is_one_error_naming_the_field_and_where(tmp_path: Path, name: str, text: str,
                                                                   expected: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_trace(str(path))
    message = str(caught.value)
    assert caught.value.field == "workload" and caught.value.fix and "\n" not in message
    assert message.startswith(f"workload: trace '{path}'") and expected in message, message


def test_files_over_the_size_or_row_limit_are_refused_before_they_are_read(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.csv"
    path.write_text("input_tokens,output_tokens\n" + "100,10\n" * 50)
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 100)

    def no_reading(*_: Any, **__: Any) -> Any:
        raise AssertionError("an oversized trace was parsed")

    monkeypatch.setattr(traces, "parse_trace_text", no_reading)
    with pytest.raises(InputError, match=r"is 377 bytes, over the limit of 100") as caught:
        read_trace(str(path))
    assert caught.value.field == "workload"
    monkeypatch.undo()
    monkeypatch.setattr(traces, "MAX_TRACE_ROWS", 49)
    with pytest.raises(InputError, match="has more than 49 requests"):
        read_trace(str(path))


def test_a_missing_path_names_the_bundled_traces(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="neither a file nor a bundled trace") as caught:
        read_trace(str(tmp_path / "absent.csv"))
    assert caught.value.field == "workload" and "azure-code, azure-conv" in (caught.value.fix or "")


# ---------------------------------------------------------------------------------------------- the command line


def test_traces_command_lists_the_bundled_traces_with_their_figures() -> None:
    result = _cli("traces", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"azure-code", "azure-conv"}
    assert rows["azure-code"] == {**rows["azure-code"], "requests": 5000, "isl_mean": 2052.7, "isl_p50": 1473.0,
                                  "isl_p99": 7436.0, "osl_mean": 27.4, "file": "azure-code-2023.csv"}
    table = _cli("traces")
    assert table.returncode == 0 and "azure-conv" in table.stdout and "1161.1" in table.stdout


@pytest.mark.parametrize(("text", "expected"), [
    ("input_tokens,output_tokens\n5,3\n6,-4\n", "row 2 (line 3), column 'output_tokens'"),
    ("prompt,output_tokens\n5,3\n", "no prompt-token column"),
    ("input_tokens,output_tokens\nNaN,3\n", "'NaN' is not a finite number"),
])
def test_a_malformed_trace_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path, text: str, expected: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    for command in ("plan", "search"):
        result = run_here(capsys, command, "-m", "llama-3.1-8b", "--gpus", "1", "--workload", str(path))
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: workload: trace") and expected in result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr and not result.stdout


def test_an_oversized_trace_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "huge.csv"
    with path.open("w") as handle:
        handle.write("input_tokens,output_tokens\n")
        handle.truncate(64_000_001)
    result = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpus", "1", "--workload", str(path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "64,000,001 bytes, over the limit of 64,000,000" in result.stderr
