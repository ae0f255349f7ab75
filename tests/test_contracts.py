"""The pydantic contracts: the strategy SPEC text, closed key sets, and the DAG node union."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from shardplan.contracts.dag import CommNode, ComputeNode, Edge, Node, StateNode
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy, Strategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.catalogs.models import load_model

# ---------------------------------------------------------------- parse_strategy


def test_plain_spec_applies_to_both_phases() -> None:
    strategy = parse_strategy("tp=4,pp=2")
    for phase in (strategy.prefill, strategy.decode):
        degrees = (phase.tp, phase.pp, phase.dp, phase.sp, phase.adp, phase.ep, phase.mb)
        assert degrees == (4, 2, 1, 1, 1, 1, 1)
    assert not strategy.disaggregated
    assert strategy.gpus == 8
    assert strategy.to_spec() == "pp=2,tp=4"


def test_sp_in_a_plain_spec_becomes_attention_dp_in_decode() -> None:
    strategy = parse_strategy("sp=2,tp=4")
    assert (strategy.prefill.sp, strategy.prefill.adp, strategy.prefill.tp) == (2, 1, 4)
    assert (strategy.decode.sp, strategy.decode.adp, strategy.decode.tp) == (1, 2, 4)
    assert strategy.prefill.gpus == strategy.decode.gpus == 8


def test_phase_spec_round_trips() -> None:
    spec = "prefill:sp=8,tp=8,ep=64,mb=2;decode:adp=8,tp=8,ep=64"
    strategy = parse_strategy(spec)
    prefill, decode = strategy.prefill, strategy.decode
    assert (prefill.sp, prefill.tp, prefill.ep, prefill.mb) == (8, 8, 64, 2)
    assert (decode.adp, decode.tp, decode.ep, decode.mb) == (8, 8, 64, 1)
    assert strategy.prefill.etp == 1 and strategy.decode.etp == 1
    assert strategy.to_spec() == spec
    assert parse_strategy(strategy.to_spec()) == strategy


def test_disagg_sets_disaggregated_and_round_trips() -> None:
    strategy = parse_strategy("prefill:tp=4;decode:tp=2,dp=2;disagg")
    assert strategy.disaggregated
    assert strategy.gpus == 4 + 4
    assert strategy.to_spec() == "prefill:tp=4;decode:dp=2,tp=2;disagg"
    assert parse_strategy(strategy.to_spec()) == strategy


def test_layer_split_is_read_and_written() -> None:
    strategy = parse_strategy("pp=2,tp=4,split=40/40")
    assert strategy.prefill.layer_split == [40, 40]
    assert parse_strategy(strategy.to_spec()) == strategy


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("tp=x", "cannot read"),
        ("foo=2", "unknown degree"),
        ("tp=2,tp=4", "twice"),
        ("prefill:tp=2", "decode"),
        ("", "empty"),
        ("   ", "empty"),
        ("tp=0", "positive"),
        ("warmup:tp=2;decode:tp=2", "unknown phase"),
        ("tp=2;tp=4", "two unnamed"),
        ("tp=2;decode:tp=2", "mixes"),
    ],
)
def test_malformed_specs_raise_input_error(spec: str, words: str) -> None:
    with pytest.raises(InputError) as info:
        parse_strategy(spec)
    assert info.value.field == "strategy"
    assert words in str(info.value)
    assert info.value.fix


# ---------------------------------------------------------------- closed key sets


def test_contracts_forbid_extra_keys() -> None:
    with pytest.raises(ValidationError, match="extra"):
        Workload.model_validate({"isl": 1024, "osl": 128, "batch_size": 8})
    with pytest.raises(ValidationError, match="extra"):
        PhaseStrategy.model_validate({"tp": 2, "cp": 2})
    with pytest.raises(ValidationError, match="extra"):
        Edge.model_validate({"src": "a", "dst": "b", "kind": "data", "weight": 1})
    model = load_model("meta-llama/Llama-3.1-8B").model_dump()
    with pytest.raises(ValidationError, match="extra"):
        ModelSpec.model_validate({**model, "rope_theta": 500000.0})


def test_contract_degrees_must_be_positive() -> None:
    with pytest.raises(ValidationError):
        PhaseStrategy(tp=0)
    with pytest.raises(ValidationError):
        Strategy.model_validate({"prefill": {"tp": 2}})


def test_model_spec_rejects_layer_types_of_wrong_length() -> None:
    model = load_model("meta-llama/Llama-3.1-8B").model_dump()
    assert ModelSpec.model_validate(model).num_layers == 32
    with pytest.raises(ValidationError, match="layer_types has 31 entries but num_layers=32"):
        ModelSpec.model_validate({**model, "layer_types": ["full"] * 31})


def test_model_spec_rejects_sliding_layers_without_window() -> None:
    model = load_model("meta-llama/Llama-3.1-8B").model_dump()
    with pytest.raises(ValidationError, match="sliding_window"):
        ModelSpec.model_validate({**model, "layer_types": ["sliding", "full"] * 16})


def test_model_spec_rejects_kv_heads_that_do_not_divide_heads() -> None:
    model = load_model("meta-llama/Llama-3.1-8B").model_dump()
    with pytest.raises(ValidationError, match="num_kv_heads=5 does not divide num_attention_heads=32"):
        ModelSpec.model_validate({**model, "num_kv_heads": 5})


# ---------------------------------------------------------------- the DAG node union

NODE = TypeAdapter(Node)
COMMON = {"name": "n", "phase": "decode", "layer": 0, "ranks": [0, 1]}


def test_node_union_is_discriminated_by_kind() -> None:
    comm = NODE.validate_python({**COMMON, "id": "ar", "kind": "all_reduce", "purpose": "tp_reduce"})
    state = NODE.validate_python({**COMMON, "id": "kv", "kind": "kv_read", "tokens": 1024})
    compute = NODE.validate_python({**COMMON, "id": "qkv", "kind": "linear", "op": "qkv_proj"})
    assert type(comm) is CommNode and comm.purpose == "tp_reduce"
    assert type(state) is StateNode and state.tokens == 1024
    assert type(compute) is ComputeNode and compute.op == "qkv_proj"


def test_node_union_rejects_unknown_kind_and_fields_of_another_kind() -> None:
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        NODE.validate_python({**COMMON, "id": "x", "kind": "matmul", "op": "qkv_proj"})
    with pytest.raises(ValidationError, match="kind"):
        NODE.validate_python({**COMMON, "id": "x", "op": "qkv_proj"})
    # A compute field on a communication node is an extra key, not silently ignored.
    with pytest.raises(ValidationError, match="extra"):
        NODE.validate_python({**COMMON, "id": "x", "kind": "all_reduce", "purpose": "tp_reduce",
                              "op": "qkv_proj"})
