"""The published JSON Schemas: committed copies match the contracts, and they check real documents."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli_helpers import ROOT
from cli_helpers import run_cli as _cli
from jsonschema import Draft202012Validator

from shardplan.contracts.dag import DAG
from shardplan.contracts.schemas import SCHEMA_NAMES, json_schema


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_committed_schema_matches_the_contract(name: str) -> None:
    path = ROOT / "schemas" / f"{name}.schema.json"
    regenerate = "run `python -m shardplan.contracts.schemas schemas` and commit the result"
    assert path.is_file(), f"{path} is missing; {regenerate}"
    committed = json.loads(path.read_text())
    current = json.loads(json.dumps(json_schema(name)))
    assert committed == current, f"{path} drifted from the contract; {regenerate}"


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    schema = json_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def _hand_written_dag() -> dict[str, Any]:
    """One decode layer of a 2-layer toy model on TP=2: KV read, attention, o_proj and its all-reduce."""
    model = {
        "name": "toy/2-layer", "architecture": "llama", "hidden_size": 256, "num_layers": 2,
        "num_attention_heads": 4, "num_kv_heads": 2, "head_dim": 64, "intermediate_size": 512,
        "vocab_size": 1000, "layer_types": ["full", "full"],
    }
    where = {"phase": "decode", "layer": 0, "ranks": [0, 1]}
    return {
        "schema_version": "1",
        "meta": {
            "model": model, "gpu": "H100", "gpus": 2, "gpus_per_node": 8,
            "strategy": {"prefill": {"tp": 2}, "decode": {"tp": 2}},
            "workload": {"isl": 128, "osl": 16, "batch": 1},
            "stage_layers": {"prefill": [[0, 1]], "decode": [[0, 1]]},
            "rank_pools": {"prefill": [0, 1], "decode": [0, 1]},
        },
        "nodes": [
            {**where, "id": "decode/L0/kv_read", "name": "kv read", "kind": "kv_read", "kv_state": "mb0/L0",
             "tokens": 128, "bytes": 32768.0},
            {**where, "id": "decode/L0/attn", "name": "attention", "kind": "attention", "op": "attention",
             "parallel": "column", "shape": {"q_len": 1, "kv_len": 129, "heads": 2}, "flops": 66048.0},
            {**where, "id": "decode/L0/attn.o_proj", "name": "o_proj", "kind": "linear", "op": "o_proj",
             "parallel": "row", "partial": True, "shape": {"m": 1, "n": 256, "k": 128}, "flops": 65536.0},
            {**where, "id": "decode/L0/attn.ar", "name": "all-reduce", "kind": "all_reduce",
             "purpose": "tp_reduce", "message_bytes": 512.0, "scope": "intra_node"},
        ],
        "edges": [
            {"src": "decode/L0/kv_read", "dst": "decode/L0/attn", "kind": "state"},
            {"src": "decode/L0/attn", "dst": "decode/L0/attn.o_proj", "kind": "data"},
            {"src": "decode/L0/attn.o_proj", "dst": "decode/L0/attn.ar", "kind": "data"},
        ],
    }


@pytest.fixture(scope="module")
def dag_validator() -> Draft202012Validator:
    result = _cli("schema", "dag")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema == json.loads(json.dumps(json_schema("dag")))
    return Draft202012Validator(schema)


def test_cli_dag_schema_accepts_a_hand_written_dag(dag_validator: Draft202012Validator) -> None:
    dag = _hand_written_dag()
    errors = [error.message for error in dag_validator.iter_errors(dag)]
    assert errors == []
    # The pydantic contract agrees with its schema.
    parsed = DAG.model_validate(dag)
    kinds = [type(node).__name__ for node in parsed.nodes]
    assert kinds == ["StateNode", "ComputeNode", "ComputeNode", "CommNode"]


def test_cli_dag_schema_rejects_an_unknown_node_kind(dag_validator: Draft202012Validator) -> None:
    dag = _hand_written_dag()
    dag["nodes"][1]["kind"] = "matmul"
    assert not dag_validator.is_valid(dag)


def test_cli_dag_schema_rejects_an_edge_without_dst(dag_validator: Draft202012Validator) -> None:
    dag = _hand_written_dag()
    del dag["edges"][0]["dst"]
    errors = list(dag_validator.iter_errors(dag))
    assert errors
    assert any("'dst' is a required property" in error.message for error in errors)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda dag: dag["nodes"][3].update(purpose="because"),  # not a known purpose
        lambda dag: dag["nodes"][0].update(op="kv_read"),  # a compute field on a state node
        lambda dag: dag["edges"][1].update(kind="control"),  # not an edge kind
        lambda dag: dag["meta"]["model"].pop("hidden_size"),
        lambda dag: dag["meta"]["strategy"]["decode"].update(tp=0),
    ],
    ids=["purpose", "foreign-field", "edge-kind", "model-field", "degree"],
)
def test_cli_dag_schema_rejects_other_breakage(dag_validator: Draft202012Validator, breakage: Any) -> None:
    dag = _hand_written_dag()
    breakage(dag)
    assert not dag_validator.is_valid(dag)


def test_cli_unknown_schema_exits_2() -> None:
    result = _cli("schema", "nosuch")
    assert result.returncode == 2
    assert "unknown schema 'nosuch'" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
