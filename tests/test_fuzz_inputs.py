"""Property tests with hypothesis: whatever a config.json, a cluster YAML, a strategy spec or a JSON file holds,
reading it gives a value or an InputError (one line, naming a field), never another exception. The CLI-wide
version with thousands of inputs is ``benchmarks/fuzz_cli.py``."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_mcp import BUNDLED

from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InputError
from shardplan.reading import parse_json_text
from shardplan.text import one_line
from shardplan.tools.catalogs.config_check import INT_KEYS
from shardplan.tools.catalogs.gpus import load_cluster
from shardplan.tools.catalogs.models import model_from_config

BASE = json.loads(BUNDLED.read_text())
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**40), max_value=10**40),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6),
                                                                                            inner, max_size=3),
                      max_leaves=6)
KEYS = [*INT_KEYS, "quantization_config", "text_config", "rope_scaling", "model_type", "torch_dtype",
        "tie_word_embeddings", "layer_types", "mlp_only_layers", "use_sliding_window", "attention_bias"]


def _one_line_error(exc: InputError) -> None:
    assert "\n" not in str(exc) and str(exc).strip()


@FAST
@given(st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=4))
def test_any_config_values_give_a_model_or_an_input_error(changes: dict[str, Any]) -> None:
    try:
        model_from_config({**BASE, **changes})
    except InputError as exc:
        _one_line_error(exc)
        assert exc.field


@FAST
@given(st.text(max_size=40) | st.builds(lambda v: json.dumps(v), values))
def test_any_json_text_gives_data_or_an_input_error(text: str) -> None:
    try:
        parse_json_text(text, what="the file", field="file")
    except InputError as exc:
        _one_line_error(exc)


@FAST
@given(st.dictionaries(st.sampled_from(["gpu", "nodes", "gpus_per_node", "inter_node_bandwidth_gb_per_s",
                                        "intra_node_latency_us", "name", 3]), values, max_size=4)
       | st.text(max_size=30))
def test_any_cluster_yaml_gives_a_cluster_or_an_input_error(tmp_path_factory: Any, content: Any) -> None:
    import yaml

    path: Path = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump({"gpu": "H100", **content}))
    try:
        load_cluster(path)
    except InputError as exc:
        _one_line_error(exc)


SPEC_WORDS = ["tp", "pp", "dp", "adp", "sp", "ep", "mb", "split", "prefill:", "decode:", ";disagg", "=", ",",
              ";", "/", "0", "2", "-1", "1e9", "99999999999999999999", "x", " ", "\u202e", "\n"]


@FAST
@given(st.lists(st.sampled_from(SPEC_WORDS), max_size=10).map("".join))
def test_any_spec_text_gives_a_strategy_or_an_input_error(spec: str) -> None:
    try:
        parse_strategy(spec)
    except InputError as exc:
        _one_line_error(exc)


@FAST
@given(st.text())
def test_one_line_leaves_no_control_or_bidi_character(text: str) -> None:
    line = one_line(text)
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in line)
