"""``shardplan build``: the DAG file it writes, the drawings it prints, the summary of a cluster file, and one
line with exit code 2 for a bad option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_here
from export_cases import SNAPSHOTS, _llama_tp2_pp2

from shardplan.contracts.dag import DAG
from shardplan.tools.views.exports import to_dot

# ------------------------------------------------------------------------------------ the command


def test_cli_build_writes_a_dag_file_that_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dag.json"
    result = run_here(
        capsys,
        "build",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "H100",
        "--gpus",
        "4",
        "--strategy",
        "tp=2,pp=2",
        "--isl",
        "512",
        "--osl",
        "64",
        "-o",
        str(out),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["written"] == str(out) and summary["format"] == "json"
    dag = DAG.model_validate_json(out.read_text())
    assert dag.model_dump() == _llama_tp2_pp2().model_dump()
    assert summary["nodes"] == len(dag.nodes) and summary["decode_step"]["collectives"] == 66
    assert [p.name for p in tmp_path.iterdir()] == ["dag.json"], "no temporary file is left behind"


def test_cli_build_prints_mermaid_and_infers_the_format_from_the_suffix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "build",
        "-m",
        "llama-3.1-8b",
        "--gpu",
        "H100",
        "--gpus",
        "4",
        "-s",
        "tp=2,pp=2",
        "--isl",
        "512",
        "--osl",
        "64",
    ]
    printed = run_here(capsys, *args, "--format", "mermaid")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == (SNAPSHOTS / "llama-3.1-8b_tp2_pp2.mmd").read_text()
    written = run_here(capsys, *args, "-o", str(tmp_path / "dag.dot"), "--full")
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "dag.dot").read_text() == to_dot(_llama_tp2_pp2(), collapsed=False)


def test_cli_build_summary_and_cluster_file(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = Path(__file__).resolve().parents[1] / "tools" / "data" / "clusters" / "h100-2x8-ib.yaml"
    result = run_here(
        capsys,
        "build",
        "-m",
        "llama-3.1-8b",
        "--cluster",
        str(cluster),
        "-s",
        "tp=8,pp=2",
        "--isl",
        "64",
        "--osl",
        "8",
    )
    assert result.returncode == 0, result.stderr
    assert "16x H100" in result.stdout and "2 send/recv, 2 cross nodes" in result.stdout
    half = run_here(
        capsys,
        "build",
        "-m",
        "llama-3.1-8b",
        "--cluster",
        str(cluster),
        "--gpus",
        "8",
        "-s",
        "tp=8",
        "--isl",
        "64",
        "--osl",
        "8",
        "--json",
    )
    assert half.returncode == 0, half.stderr
    assert json.loads(half.stdout)["gpus"] == 8


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu", "H100", "--gpus", "4", "--isl", "0"],
        ["--gpu", "H100"],
        ["--gpu", "H999", "--gpus", "4"],
        ["--gpu", "H100", "--gpus", "4", "--format", "svg"],
        ["--gpu", "H100", "--gpus", "4", "-o", "/no/such/folder/dag.json"],
    ],
    ids=["isl", "no-gpu-count", "unknown-gpu", "format", "folder"],
)
def test_cli_build_bad_options_give_one_line_and_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "build", "-m", "llama-3.1-8b", "-s", "tp=2,pp=2", *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
