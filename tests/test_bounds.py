"""Bounds on hostile input, the same on the command line, the API and the MCP argument models: YAML aliases
counted as expanded, integers capped by digits, DAGs capped by nodes and edges (configurable), the schema check
walking only what the model refuses, strict MCP arguments, and one error line per malformed file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_cli, run_here

from shardplan.cli.files import read_dag, read_plan
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InputError
from shardplan.evals.cases import load_case
from shardplan.limits import MAX_DAG_EDGES, MAX_DAG_NODES, dag_edge_limit, dag_node_limit
from shardplan.reading import expanded_values, parse_yaml_text
from shardplan.tools.api import capabilities
from shardplan.tools.api.arguments import PlanArgs
from shardplan.tools.api.registry import error_dict
from shardplan.tools.catalogs.gpus import load_cluster
from shardplan.validators.schema_check import MAX_SCHEMA_VIOLATIONS, schema_violations, validate_json

BOMB = "".join(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}" if i else "lol"] * 9) + "]\n" for i in range(9))
BOMB += "gpu: H100\n"
"""Nine levels of nine aliases: 316 bytes that expand to 9**9 values."""


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


# -- YAML ------------------------------------------------------------------------------------------------
def test_shared_values_are_counted_at_each_use_and_walked_once() -> None:
    shared = [1, 2, 3]
    assert expanded_values({"a": shared, "b": [shared, shared]}) == 1 + 4 + (1 + 2 * 4)
    with pytest.raises(ValueError, match="expands to over 10 values"):
        expanded_values({"a": shared, "b": [shared, shared]}, limit=10)


@pytest.mark.parametrize(("text", "reason"), [
    (BOMB, "expands to over 100,000 values"),
    ("gpu: &a [H100, *a]\n", "holds itself through an alias"),
    ("a: &a {b: *a}\ngpu: H100\n", "holds itself through an alias"),
    ("gpu: H100\nx: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("gpu: H100\nnodes: 1" + "0" * 5000 + "\n", "not valid YAML"),
])
def test_hostile_cluster_yaml_is_one_input_error(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=reason) as caught:
        load_cluster(path)
    assert caught.value.field == "cluster" and "\n" not in str(caught.value)


def test_every_yaml_input_goes_through_the_bounded_loader(tmp_path: Path) -> None:
    case = tmp_path / "case.yaml"
    case.write_text(BOMB)
    with pytest.raises(InputError, match="expands to over"):
        load_case(case)
    case.write_text("id: x\n" + "#" * 200_000 + "\n")
    with pytest.raises(InputError, match="over the limit of 128,000"):
        load_case(case)
    aliases = "a: &a [1, 2]\nb: [*a, *a]\n"
    assert parse_yaml_text(aliases, what="t", field="t", fix="f") == {"a": [1, 2], "b": [[1, 2], [1, 2]]}


def test_the_alias_bomb_on_the_command_line_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    result = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--cluster", str(path), "--isl", "128", "--osl", "16")
    assert result.returncode == 2
    assert "expands to over 100,000 values" in _one_error_line(result.stderr)


def test_an_old_field_name_and_an_error_make_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("gpu: H100\nnodes: 0\nintra_node_bandwidth_gbps: 450\n")
    result = run_here(capsys, "build", "-m", "llama-3.1-8b", "--cluster", str(path), "--gpus", "1", "-s", "tp=1")
    assert result.returncode == 2
    line = _one_error_line(result.stderr)
    assert "nodes" in line and "note: " in line and "intra_node_bandwidth_gb_per_s" in line


# -- numbers ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["layers=" + "9" * 5000, "tp=" + "9" * 5000, "split=40/" + "4" * 30,
                                  "prefill:tp=" + "1" * 4301 + ";decode:tp=1"])
def test_huge_numbers_in_a_spec_are_refused_by_their_digits(spec: str) -> None:
    with pytest.raises(InputError, match="digits, more than 19") as caught:
        parse_strategy(spec)
    assert caught.value.field == "strategy" and len(str(caught.value)) < 400


def test_huge_numbers_on_the_command_line_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    spec = run_here(capsys, "cost", "-m", "qwen3-30b-a3b", "--gpus", "8", "-s", "layers=" + "9" * 5000, "--isl", "128",
                    "--osl", "16")
    assert spec.returncode == 2 and "5,000 digits" in _one_error_line(spec.stderr)
    flag = run_here(capsys, "build", "-m", "llama-3.1-8b", "--gpus", "8", "-s", "tp=1", "--isl", "9" * 4300)
    assert flag.returncode == 2 and "--isl has 4,300 digits" in _one_error_line(flag.stderr)


# -- DAGs ------------------------------------------------------------------------------------------------
def _dag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / "dag.json"
    result = run_here(capsys, "build", "-m", "llama-3.1-8b", "--gpus", "2", "-s", "tp=2", "--isl", "64", "--osl", "8",
                      "-o", str(path))
    assert result.returncode == 0, result.stderr
    return path, json.loads(path.read_text())


def test_node_and_edge_limits_are_one_setting_for_every_surface(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert (dag_node_limit(), dag_edge_limit()) == (MAX_DAG_NODES, MAX_DAG_EDGES)
    path, dag = _dag(tmp_path, capsys)
    nodes, edges = len(dag["nodes"]), len(dag["edges"])
    # The installed script reads the limit from the environment it is started with (one whole process; the
    # other commands run in this one, which reads the same variable on each call).
    whole = run_cli("validate", str(path), env={**os.environ, "SHARDPLAN_MAX_DAG_NODES": str(nodes - 1)})
    assert whole.returncode == 2, whole.stderr
    assert f"exceed the limit of {nodes - 1:,}" in _one_error_line(whole.stderr)
    for variable, limit, part in (("SHARDPLAN_MAX_DAG_NODES", nodes - 1, "nodes"),
                                  ("SHARDPLAN_MAX_DAG_EDGES", edges - 1, "edges")):
        monkeypatch.setenv(variable, str(limit))
        for command in (["validate", str(path)], ["cost", str(path)]):
            result = run_here(capsys, *command)
            assert result.returncode == 2, result.stderr
            line = _one_error_line(result.stderr)
            assert f"exceed the limit of {limit:,}" in line and variable in line
        with pytest.raises(InputError, match=f"{part} exceed the limit of {limit:,}") as caught:
            capabilities.validate_dag(dag_json=json.dumps(dag))
        assert caught.value.field == "dag_json"
        report = validate_json(dag)
        assert not report.valid and variable in report.violations[0].fix
        monkeypatch.delenv(variable)
    monkeypatch.setenv("SHARDPLAN_MAX_DAG_NODES", "many")
    with pytest.raises(InputError, match="SHARDPLAN_MAX_DAG_NODES='many' is not a positive whole number"):
        dag_node_limit()


def test_the_schema_check_reports_what_the_full_walk_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, dag = _dag(tmp_path, capsys)
    dag["nodes"][1]["kind"] = "compute"
    dag["nodes"][3]["flops"] = "many"
    dag["edges"][2]["src"] = 7
    full = [v.message for v in schema_violations(dag)]
    assert len(full) == 3
    assert [v.message for v in validate_json(dag).violations] == full


def test_a_dag_of_many_bad_nodes_lists_the_first_and_counts_the_rest() -> None:
    nodes = [{"id": f"n{i}", "kind": "compute", "op": "linear", "phase": "decode"} for i in range(1000)]
    report = validate_json({"schema_version": "1", "nodes": nodes, "edges": []})
    assert not report.valid and len(report.violations) == MAX_SCHEMA_VIOLATIONS + 1
    assert report.violations[0].message == "$: 'meta' is a required property"  # the document's own fields first
    assert report.violations[1].message.startswith("$.nodes[0].kind: \"compute\" is not a node kind")
    assert "more nodes or edges fail the schema" in report.violations[-1].message


def test_the_first_error_of_a_large_bad_dag_or_plan_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, dag = _dag(tmp_path, capsys)
    bad = [{"id": f"x{i}", "kind": "compute"} for i in range(100)]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**dag, "nodes": dag["nodes"] + bad}))
    with pytest.raises(InputError, match=rf"is not a DAG: nodes\.{len(dag['nodes'])}: Input tag 'compute'"):
        read_dag(path)
    path.write_text(json.dumps({k: v for k, v in dag.items() if k != "meta"} | {"nodes": bad}))
    with pytest.raises(InputError, match="is not a DAG: meta: Field required"):
        read_dag(path)
    path.write_text(json.dumps({"request": {}, "status": "ok", "dag": {**dag, "nodes": bad}}))
    with pytest.raises(InputError, match="is not a valid plan: shardplan_version: Field required"):
        read_plan(path)


# -- MCP and API arguments -------------------------------------------------------------------------------
@pytest.mark.parametrize(("field", "value", "says"), [
    ("gpus", True, "valid integer"), ("gpus", 8.0, "valid integer"), ("gpus", "8", "valid integer"),
    ("ttft_ms", "Infinity", "valid number"), ("ttft_ms", float("inf"), "finite number"),
    ("tpot_ms", float("nan"), "finite number"), ("isl", False, "valid integer"),
])
def test_arguments_are_taken_as_json_gives_them(field: str, value: Any, says: str) -> None:
    with pytest.raises(Exception) as caught:  # noqa: PT011  (pydantic's error, shaped as the CLI's below)
        PlanArgs.model_validate({"model": "llama-3.1-8b", "gpus": 8, field: value})
    error = error_dict(caught.value)
    assert error["error"] == "InputError" and error["field"] == field and says in error["message"]
    assert "\n" not in error["message"] and error["fix"]
    assert PlanArgs.model_validate({"model": "llama-3.1-8b", "gpus": 8, "ttft_ms": 200}).ttft_ms == 200.0


def test_a_capability_call_refuses_a_boolean_count() -> None:
    with pytest.raises(InputError, match="gpus: Input should be a valid integer") as caught:
        capabilities.plan(model="llama-3.1-8b", gpus=True)
    assert caught.value.field == "gpus" and "\n" not in str(caught.value)
