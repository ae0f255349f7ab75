"""The malformed inputs of the reliability probe, through the CLI entry point in-process: each ends in exit 2 and
one ``error:`` line that names the field and the fix, never a traceback, a usage block or a raw control
character, and within the bounds of :mod:`shardplan.limits`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import run_main
from test_mcp import BUNDLED

CONFIG = json.loads(BUNDLED.read_text())


def _config(tmp: Path, text: str) -> str:
    path = tmp / "config.json"
    path.write_text(text)
    return str(path)


def _yaml(tmp: Path, text: str) -> str:
    path = tmp / "cluster.yaml"
    path.write_text(text)
    return str(path)


def _cycle_dag(tmp: Path) -> str:
    dag_file = tmp / "dag.json"
    _run(["build", "-m", str(BUNDLED), "--gpus", "1", "-s", "tp=1", "--isl", "64", "--osl", "8", "-o", str(dag_file)])
    dag = json.loads(dag_file.read_text())
    dag["edges"].append({"src": dag["edges"][-1]["dst"], "dst": dag["edges"][0]["src"], "kind": "data"})
    dag_file.write_text(json.dumps(dag))
    return str(dag_file)


_run = run_main


PLAN = ["plan", "--isl", "64", "--osl", "8"]
CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "config key of the wrong type": (lambda t: ["show-model", _config(t, json.dumps(
        {**CONFIG, "quantization_config": "fp8"}))], "quantization_config"),
    "config count that is text": (lambda t: ["show-model", _config(t, json.dumps(
        {**CONFIG, "num_key_value_heads": "abc"}))], "num_key_value_heads"),
    "Infinity": (lambda t: ["show-model", _config(t, json.dumps(CONFIG).replace('"vocab_size": 128256',
                                                                                '"vocab_size": Infinity'))],
                 "Infinity"),
    "huge integer": (lambda t: ["show-model", _config(t, json.dumps(CONFIG).replace(
        '"vocab_size": 128256', '"vocab_size": 1' + "0" * 5000))], "digits"),
    "deeply nested JSON": (lambda t: ["show-model", _config(t, "[" * 100_000 + "]" * 100_000)], "nested"),
    "a million layers": (lambda t: ["show-model", _config(t, json.dumps(
        {**CONFIG, "num_hidden_layers": 1_000_000}))], "num_hidden_layers"),
    "YAML syntax error": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--cluster", _yaml(t, "gpu: H100\nnodes: [1\n")],
                          "line 3"),
    "deeply nested YAML": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--cluster", _yaml(
        t, "a: " + "[" * 50_000 + "]" * 50_000)], "nested"),
    "a million nodes": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--cluster", _yaml(t, "gpu: H100\nnodes: 1000000\n")],
                        "nodes"),
    "infinite bandwidth": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--cluster", _yaml(
        t, "gpu: H100\nnodes: 2\ninter_node_bandwidth_gb_per_s: .inf\n")], "inter_node_bandwidth_gb_per_s"),
    "a trillion GPUs": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--gpus", "1000000000000"], "gpus"),
    "zero GPUs per node": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--gpus", "2", "--gpus-per-node", "0"],
                           "gpus_per_node"),
    "empty GPU name": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--gpus", "2", "--gpu", ""], "GPU"),
    "flag value of the wrong type": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--gpus", "many"], "--gpus"),
    "unknown option": (lambda t: [*PLAN, "-m", "llama-3.1-8b", "--bogus"], "--bogus"),
    "newline and bidi in a name": (lambda t: [*PLAN, "-m", "x\u202ey\nz", "--gpus", "2"], "x\\u202ey\\nz"),
    "cost of a DAG with a cycle": (lambda t: ["cost", _cycle_dag(t)], "fails validation"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_malformed_input_ends_in_one_error_line(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make, named = CASES[name]
    argv = make(tmp_path)
    capsys.readouterr()
    began = time.monotonic()
    code = _run(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "; " in lines[0], err
    assert named in lines[0]
    assert "Traceback" not in err and "Usage:" not in err
    assert not any(ord(c) < 32 or c == "\u202e" for c in lines[0])
    assert time.monotonic() - began < 20
