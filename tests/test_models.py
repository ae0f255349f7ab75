"""ModelSpecs from config.json and their derived quantities, checked against published figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardplan.contracts.arithmetic.model_math import (
    embedding_params,
    expert_params,
    flops_per_token,
    kv_bytes_per_token,
    kv_cache_bytes,
    params_active,
    params_total,
    weight_bytes,
)
from shardplan.errors import InputError
from shardplan.tools.catalogs.bundled import bundled_models
from shardplan.tools.catalogs.models import load_model, resolve_model_name

REQUIRED_MODELS = {
    "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B",
    "Qwen/Qwen3-8B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B",
    "mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x22B-v0.1",
    "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b", "openai/gpt-oss-120b",
}

BUNDLED_DIR = Path(__file__).resolve().parents[1] / "tools" / "data" / "models"


def _bundled_config(repo: str) -> dict:
    return json.loads((BUNDLED_DIR / (repo.replace("/", "__") + ".json")).read_text())


def _write_config(folder: Path, config: dict) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


# ---------------------------------------------------------------- parameters against published sizes


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("meta-llama/Llama-3.1-8B", 8.03e9, None),
        ("meta-llama/Llama-3.1-70B", 70.6e9, None),
        ("meta-llama/Llama-3.1-405B", 405.9e9, None),
        ("mistralai/Mixtral-8x7B-v0.1", 46.7e9, 12.9e9),
        ("deepseek-ai/DeepSeek-V3", 671e9, 37e9),
        ("openai/gpt-oss-120b", 117e9, 5.1e9),
    ],
)
def test_parameter_counts_match_published_figures(name: str, total: float, active: float | None) -> None:
    spec = load_model(name)
    assert params_total(spec) == pytest.approx(total, rel=0.02)
    if active is not None:
        assert params_active(spec) == pytest.approx(active, rel=0.02)
    else:
        # A dense model's active count differs from its total only by the embedding lookup.
        assert params_total(spec) - params_active(spec) == spec.vocab_size * spec.hidden_size


# ---------------------------------------------------------------- KV cache


def test_kv_bytes_per_token_gqa_llama_70b() -> None:
    spec = load_model("meta-llama/Llama-3.1-70B")
    assert spec.num_kv_heads == 8 and spec.head_dim == 128 and spec.num_layers == 80
    assert kv_bytes_per_token(spec) == 2 * 8 * 128 * 80 * 2 == 327680


def test_kv_bytes_per_token_mla_deepseek_v3() -> None:
    spec = load_model("deepseek-ai/DeepSeek-V3")
    assert spec.mla is not None
    assert kv_bytes_per_token(spec) == (512 + 64) * 61 * 2


def test_kv_cache_sliding_window_layers_keep_only_their_window() -> None:
    spec = load_model("openai/gpt-oss-120b")
    tokens = 10_000
    per_layer_token = 2 * spec.num_kv_heads * spec.head_dim * 2  # K and V, bf16
    full_layers = spec.layer_types.count("full")
    sliding_layers = spec.layer_types.count("sliding")
    assert (full_layers, sliding_layers) == (18, 18)
    expected = per_layer_token * (full_layers * tokens + sliding_layers * 128)
    assert kv_cache_bytes(spec, tokens) == expected
    assert kv_cache_bytes(spec, tokens) < per_layer_token * 36 * tokens
    # Below the window every layer keeps every token.
    assert kv_cache_bytes(spec, 100) == per_layer_token * 36 * 100


def test_kv_cache_of_full_attention_model_is_linear_in_tokens() -> None:
    spec = load_model("meta-llama/Llama-3.1-8B")
    assert kv_cache_bytes(spec, 4096) == kv_bytes_per_token(spec) * 4096


# ---------------------------------------------------------------- FLOPs


@pytest.mark.parametrize(
    "name", ["meta-llama/Llama-3.1-70B", "mistralai/Mixtral-8x7B-v0.1", "deepseek-ai/DeepSeek-V3"]
)
def test_flops_per_token_is_twice_active_params_at_empty_context(name: str) -> None:
    spec = load_model(name)
    assert flops_per_token(spec, 0) == pytest.approx(2 * params_active(spec), rel=0.001)


def test_flops_per_token_grows_with_context_by_the_attention_term() -> None:
    spec = load_model("meta-llama/Llama-3.1-70B")
    context = 8192
    grown = flops_per_token(spec, context) - flops_per_token(spec, 0)
    # QK^T and PV: 2 matmuls x 2 FLOPs x heads x head_dim per cached token and layer.
    assert grown == pytest.approx(4 * 64 * 128 * 80 * context)
    assert flops_per_token(spec, 2 * context) > flops_per_token(spec, context)


def test_flops_of_sliding_layers_stop_growing_past_the_window() -> None:
    spec = load_model("openai/gpt-oss-120b")
    full_growth = flops_per_token(spec, 20_000) - flops_per_token(spec, 10_000)
    per_full_layer_token = 4 * spec.num_attention_heads * spec.head_dim
    assert full_growth == pytest.approx(per_full_layer_token * 18 * 10_000)


# ---------------------------------------------------------------- name resolution


@pytest.mark.parametrize(
    ("name", "repo"),
    [
        ("meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B"),
        ("META-LLAMA/llama-3.1-70b", "meta-llama/Llama-3.1-70B"),
        ("llama-3.1-70b", "meta-llama/Llama-3.1-70B"),
        ("Llama-3.1-70B", "meta-llama/Llama-3.1-70B"),
        ("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"),
        ("  deepseek-v3 ", "deepseek-ai/DeepSeek-V3"),
    ],
)
def test_resolve_model_name(name: str, repo: str) -> None:
    assert resolve_model_name(name) == repo
    assert load_model(name).name == repo


def test_unknown_model_lists_close_names() -> None:
    with pytest.raises(InputError) as info:
        resolve_model_name("llama-3.1-7b")
    assert info.value.field == "model"
    assert "unknown model 'llama-3.1-7b'" in str(info.value)
    assert "meta-llama/Llama-3.1-70B" in str(info.value)


def test_ambiguous_prefix_raises_and_lists_candidates() -> None:
    with pytest.raises(InputError) as info:
        load_model("qwen3")
    message = str(info.value)
    assert "ambiguous" in message
    assert "Qwen/Qwen3-8B" in message and "Qwen/Qwen3-235B-A22B" in message


# ---------------------------------------------------------------- user config files


def test_user_config_by_path_and_by_folder(tmp_path: Path) -> None:
    config = _bundled_config("meta-llama/Llama-3.1-8B")
    config["num_hidden_layers"] = 16
    path = _write_config(tmp_path, config)
    original = load_model("meta-llama/Llama-3.1-8B")
    for given in (str(path), str(tmp_path)):
        spec = load_model(given)
        assert spec.num_layers == 16
        assert len(spec.layer_types) == 16
        assert spec.name == str(path)
        # Halving the layers halves everything but the embedding, LM head and final norm.
        assert 2 * params_total(spec) - params_total(original) == embedding_params(original)
        assert kv_bytes_per_token(spec) == kv_bytes_per_token(original) / 2


def test_user_config_missing_hidden_size_names_it(tmp_path: Path) -> None:
    config = _bundled_config("meta-llama/Llama-3.1-8B")
    del config["hidden_size"]
    with pytest.raises(InputError) as info:
        load_model(str(_write_config(tmp_path, config)))
    assert info.value.field == "hidden_size"
    assert "hidden_size" in str(info.value)


@pytest.mark.parametrize("bad", ["thirty-two", 32.5, -4, True, None])
def test_user_config_with_non_integer_layers_names_the_key(tmp_path: Path, bad: object) -> None:
    config = _bundled_config("meta-llama/Llama-3.1-8B")
    config["num_hidden_layers"] = bad
    with pytest.raises(InputError) as info:
        load_model(str(_write_config(tmp_path, config)))
    assert info.value.field == "num_hidden_layers"
    assert "num_hidden_layers" in str(info.value)


def test_malformed_json_file_raises_input_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096, ')
    with pytest.raises(InputError) as info:
        load_model(str(path))
    assert info.value.field == "model"
    assert str(path) in str(info.value)


def test_missing_config_file_raises_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no config file"):
        load_model(str(tmp_path / "absent.json"))


# ---------------------------------------------------------------- weight and KV formats


def test_deepseek_v3_loads_as_fp8() -> None:
    spec = load_model("deepseek-ai/DeepSeek-V3")
    assert spec.weight_dtype == "fp8" and spec.expert_dtype is None
    assert weight_bytes(spec) == params_total(spec)


def test_gpt_oss_experts_are_fp4_and_the_rest_bf16() -> None:
    spec = load_model("openai/gpt-oss-120b")
    assert spec.weight_dtype == "bf16" and spec.expert_dtype == "fp4"
    assert spec.moe is not None
    routed = spec.num_layers * spec.moe.num_experts * expert_params(spec)
    # MXFP4: half a byte per element plus one 8-bit scale per 32 elements.
    assert weight_bytes(spec) == pytest.approx((params_total(spec) - routed) * 2 + routed * (0.5 + 1 / 32))
    # Published: the MXFP4 checkpoint is about 65 GB and fits a single 80 GB GPU.
    assert 63e9 < weight_bytes(spec) < 67e9


def test_dtype_overrides_change_weight_and_kv_bytes() -> None:
    base = load_model("meta-llama/Llama-3.1-8B")
    fp8 = load_model("meta-llama/Llama-3.1-8B", weight_dtype="fp8", kv_dtype="fp8")
    assert (fp8.weight_dtype, fp8.kv_dtype) == ("fp8", "fp8")
    assert weight_bytes(base) == 2 * params_total(base)
    assert weight_bytes(fp8) == weight_bytes(base) / 2
    assert kv_bytes_per_token(fp8) == kv_bytes_per_token(base) / 2
    assert kv_cache_bytes(fp8, 1000) == kv_cache_bytes(base, 1000) / 2
    # Overriding gpt-oss's weights applies to the experts too.
    oss = load_model("openai/gpt-oss-120b", weight_dtype="bf16")
    assert oss.expert_dtype is None
    assert weight_bytes(oss) == 2 * params_total(oss)


# ---------------------------------------------------------------- the bundled catalog


def test_required_models_are_bundled() -> None:
    assert set(bundled_models()) >= REQUIRED_MODELS


@pytest.mark.parametrize("repo", sorted(bundled_models()))
def test_every_bundled_model_loads(repo: str) -> None:
    spec = load_model(repo)
    assert spec.name == repo
    assert len(spec.layer_types) == spec.num_layers
    assert 0 < params_active(spec) <= params_total(spec)
    if spec.is_moe:
        assert params_active(spec) < 0.5 * params_total(spec)


def test_deepseek_v3_moe_facts() -> None:
    spec = load_model("deepseek-ai/DeepSeek-V3")
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.num_shared_experts) == (256, 8, 1)
    assert spec.moe.first_dense_layers == 3
    assert [spec.is_moe_layer(layer) for layer in range(5)] == [False, False, False, True, True]
    assert spec.num_kv_heads == 1 and spec.head_dim == 128 + 64


def test_gpt_oss_attention_facts() -> None:
    for repo, layers in (("openai/gpt-oss-120b", 36), ("openai/gpt-oss-20b", 24)):
        spec = load_model(repo)
        assert spec.num_layers == layers
        assert spec.layer_types == ["sliding", "full"] * (layers // 2)
        assert spec.sliding_window == 128
        assert spec.attention_sinks
        assert spec.moe is not None and spec.moe.expert_bias


def test_dense_models_have_no_moe_and_full_attention() -> None:
    for repo in ("meta-llama/Llama-3.1-70B", "Qwen/Qwen3-32B"):
        spec = load_model(repo)
        assert spec.moe is None
        assert set(spec.layer_types) == {"full"}
        assert spec.sliding_window is None
