"""The catalog commands, run as a user runs them: the console script in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import ROOT
from cli_helpers import run_cli as _cli

REQUIRED_MODELS = {
    "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B",
    "Qwen/Qwen3-8B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B",
    "mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x22B-v0.1",
    "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b", "openai/gpt-oss-120b",
}



def _json(*args: str) -> object:
    result = _cli(*args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_show_model_deepseek_v3_json() -> None:
    facts = _json("show-model", "deepseek-ai/DeepSeek-V3", "--json")
    assert isinstance(facts, dict)
    assert facts["name"] == "deepseek-ai/DeepSeek-V3"
    assert facts["params_total"] == pytest.approx(671e9, rel=0.02)
    assert facts["params_active"] == pytest.approx(37e9, rel=0.02)
    assert facts["attention"] == "mla"
    assert facts["kv_bytes_per_token"] == (512 + 64) * 61 * 2
    assert (facts["experts"], facts["experts_per_token"], facts["shared_experts"]) == (256, 8, 1)
    assert facts["weight_dtype"] == "fp8"


def test_show_model_short_name_prints_a_summary() -> None:
    result = _cli("show-model", "llama-3.1-70b")
    assert result.returncode == 0, result.stderr
    assert "meta-llama/Llama-3.1-70B" in result.stdout
    assert "70.55B total" in result.stdout
    assert "320.0 KiB per token" in result.stdout


def test_show_model_on_a_config_path(tmp_path: Path) -> None:
    config = json.loads((ROOT / "tools" / "data" / "models" / "deepseek-ai__DeepSeek-V3.json").read_text())
    config["num_hidden_layers"] = 31  # half the MoE layers: 3 dense + 28 MoE instead of 3 + 58
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    facts = _json("show-model", str(path), "--json")
    assert isinstance(facts, dict)
    assert facts["name"] == str(path)
    assert facts["layers"] == 31
    assert facts["kv_bytes_per_token"] == (512 + 64) * 31 * 2
    assert 300e9 < facts["params_total"] < 671e9 * 0.55


def test_show_model_unknown_name_is_one_line_and_exit_2() -> None:
    result = _cli("show-model", "no-such-model")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "unknown model" in lines[0]
    assert result.stdout == ""


def test_show_model_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_hidden_layers": 2}')
    result = _cli("show-model", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "hidden_size" in result.stderr


def test_gpus_json_lists_the_six() -> None:
    gpus = _json("gpus", "--json")
    assert isinstance(gpus, dict)
    assert {"H100", "H200", "B200", "A100", "L40S", "MI300X"} <= set(gpus)
    assert gpus["H100"]["memory_gb"] == 80
    assert gpus["H100"]["dense_tflops"]["bf16"] == 989
    assert all(gpu["source"] for gpu in gpus.values())


def test_gpus_table() -> None:
    result = _cli("gpus")
    assert result.returncode == 0, result.stderr
    for name in ("H100", "MI300X"):
        assert name in result.stdout


def test_models_json_lists_the_bundled_twelve() -> None:
    rows = _json("models", "--json")
    assert isinstance(rows, list)
    names = [row["name"] for row in rows]
    assert len(names) == len(set(names)) == 12
    assert set(names) == REQUIRED_MODELS
    by_name = {row["name"]: row for row in rows}
    assert by_name["mistralai/Mixtral-8x7B-v0.1"]["moe"] is True
    assert by_name["meta-llama/Llama-3.1-8B"]["moe"] is False
    assert by_name["mistralai/Mixtral-8x7B-v0.1"]["params_total"] == pytest.approx(46.7e9, rel=0.02)
