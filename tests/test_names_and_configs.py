"""Names as people write them (aliases, releases, FP8 variants, unbundled models), the GPU catalog's new
parts, nested ``text_config`` with shared experts, unmodelled keys, and prompts longer than the context."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_here

from shardplan.contracts.arithmetic.model_math import params_active, params_total
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.traffic import Traffic, parse_length
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.catalogs.gpus import get_gpu, gpu_catalog
from shardplan.tools.catalogs.model_names import alias_note
from shardplan.tools.catalogs.models import (
    check_context,
    check_drawn_context,
    check_workload_context,
    load_model,
    model_from_config,
    resolve_model_name,
)
from shardplan.tools.planning.assumptions import request_assumptions

SCOUT = Path(__file__).parent / "data" / "llama4_scout_config.json"


@pytest.mark.parametrize(
    ("name", "repo", "dtype"),
    [
        ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3", "fp8"),
        ("DeepSeek-R1-0528", "deepseek-ai/DeepSeek-V3", "fp8"),
        ("nvidia/DeepSeek-R1-FP4", "deepseek-ai/DeepSeek-V3", "fp4"),
        ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-70B", "bf16"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B", "bf16"),
        ("meta-llama/Llama-3.1-405B-Instruct-FP8", "meta-llama/Llama-3.1-405B", "fp8"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen/Qwen3-235B-A22B", "fp8"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1", "bf16"),
    ],
)
def test_aliases_plan_the_same_architecture_with_the_named_format(name: str, repo: str, dtype: str) -> None:
    assert resolve_model_name(name) == repo
    spec = load_model(name)
    assert spec.name == repo and spec.weight_dtype == dtype
    note = alias_note(name)
    assert note is not None and repo in note and name in note


def test_bundled_names_need_no_note_and_an_explicit_format_wins() -> None:
    assert alias_note("llama-3.1-70b") is None and alias_note("deepseek-ai/DeepSeek-V3") is None
    assert load_model("meta-llama/Llama-3.1-405B-Instruct-FP8", weight_dtype="bf16").weight_dtype == "bf16"


@pytest.mark.parametrize(("name", "closest"), [("moonshotai/Kimi-K2-Instruct", "DeepSeek-V3"),
                                               ("Qwen2.5-72B-Instruct", "Qwen3-32B")])
def test_an_unbundled_name_says_so_names_the_closest_and_how_to_pass_a_config(name: str, closest: str) -> None:
    with pytest.raises(InputError) as caught:
        resolve_model_name(name)
    assert caught.value.field == "model"
    fix = caught.value.fix or ""
    assert "not bundled" in fix and closest in fix and "config.json" in fix


def test_nested_text_config_reads_llama4_shared_expert() -> None:
    spec = load_model(str(SCOUT))
    assert spec.moe is not None and spec.moe.num_experts == 16 and spec.moe.num_shared_experts == 1
    # Meta publishes about 109B total (vision encoder included) and 17B active for Scout.
    assert 105e9 < params_total(spec) < 110e9
    assert 15e9 < params_active(spec) < 18e9
    assert any("attention_chunk_size" in w for w in spec.warnings)


def test_unmodelled_architecture_keys_are_named_and_known_ones_are_not() -> None:
    base = json.loads((Path(__file__).parents[1] / "tools" / "data" / "models" /
                       "meta-llama__Llama-3.1-8B.json").read_text())
    assert model_from_config(base).warnings == []
    odd = {**base, "interleave_moe_layer_step": 2, "layer_types": ["full_attention", "linear_attention"] * 16}
    [warning] = model_from_config(odd).warnings
    assert "interleave_moe_layer_step" in warning and "linear_attention" in warning
    assert model_from_config({**base, "decoder_sparse_step": 1}).warnings == []


def test_prompt_plus_output_beyond_the_context_names_both_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_model("llama-3.1-70b")
    check_context(spec, 131072 - 256, 256)
    with pytest.raises(InputError) as caught:
        check_context(spec, 200000, 256)
    assert "200000" in str(caught.value) and "131072" in str(caught.value) and caught.value.field == "isl"
    done = run_here(capsys, "plan", "-m", "llama-3.1-70b", "--gpus", "8", "--isl", "200000")
    assert done.returncode == 2 and "131072" in done.stderr and "200000" in done.stderr


def test_the_longest_request_lengths_allow_must_fit_the_context(capsys: pytest.CaptureFixture[str]) -> None:
    # Every engine refuses a request whose prompt plus asked output is longer than its max_model_len: a length
    # distribution whose cap reaches past the context is refused before planning, the setting named; an uncapped
    # one (or a trace) is checked on the requests the simulator draws.
    spec = load_model("llama-3.1-8b")

    def work(isl: str | None = None, osl: str | None = None) -> Workload:
        lengths = {k: parse_length(v) for k, v in (("isl", isl), ("osl", osl)) if v is not None}
        return Workload(isl=2048, osl=256, traffic=Traffic(**lengths))  # type: ignore[arg-type]

    check_workload_context(spec, work("uniform:100,130000", "uniform:1,1000"))
    for isl, osl, field in (("uniform:100,130000", "uniform:1,2000", "isl_dist"), (None, "fixed:140000", "osl_dist")):
        with pytest.raises(InputError) as caught:
            check_workload_context(spec, work(isl, osl))
        assert caught.value.field == field and "131072" in str(caught.value)
    check_workload_context(spec, work("lognormal:mean=2048,cv=1"))
    done = run_here(capsys, "plan", "-m", "llama-3.1-8b", "--gpus", "1", "--osl", "256",
                    "--isl-dist", "uniform:100,140000", "--rate", "0.1")
    assert done.returncode == 2 and "140256" in done.stderr and "cap the lengths" in done.stderr
    with pytest.raises(InputError) as drawn:
        check_drawn_context(spec, np.array([1000, 131000]), np.array([100, 500]))
    assert drawn.value.field == "lengths" and "1 request" in str(drawn.value) and "131000" in str(drawn.value)


@pytest.mark.parametrize(
    ("name", "memory_gb", "bandwidth"),
    [("A100-40GB", 40, 1555), ("A100", 80, 2039), ("H100-PCIe", 80, 2000), ("H20", 96, 4000), ("GB200", 186, 8000)],
)
def test_catalog_parts_carry_datasheet_figures_and_sources(name: str, memory_gb: float, bandwidth: float) -> None:
    gpu = gpu_catalog()[name]
    assert (gpu.memory_gb, gpu.memory_bandwidth_gb_per_s) == (memory_gb, bandwidth)
    assert gpu.source.startswith(("http", "NVIDIA")) and gpu.notes
    assert get_gpu(name.lower()).name == name


def test_request_assumptions_list_exactly_what_was_not_given() -> None:
    request = PlanRequest(model="DeepSeek-R1", gpu="H200", gpus=16, workload=Workload(isl=4096, osl=1024))
    lines = request_assumptions(request, {"gpu", "isl", "osl"})
    text = "\n".join(lines)
    assert "DeepSeek-V3" in lines[0] and "same architecture" in lines[0]
    said = ("8 GPUs per node", "sequences in flight: not given", "objective latency", "weights in fp8", "KV cache")
    for expected in said:
        assert expected in text
    assert "prompt length" not in text and "output length" not in text
    everything = {"gpu", "gpus_per_node", "isl", "osl", "batch", "objective", "weight_dtype", "kv_dtype", "spec"}
    assert request_assumptions(request.model_copy(update={"model": "deepseek-v3"}), everything) == []
