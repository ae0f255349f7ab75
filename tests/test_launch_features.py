"""Speculative decoding and prefix caching in the launch commands: each engine's flags for what the plan assumed,
pinned as the existing flags are (tools/launch/{vllm,sglang,trtllm}.py cite the pages they were checked against)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_here

from shardplan.contracts.feature_effects import PrefixCacheEffect
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.speculation import parse_speculation
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.launch.commands import ENGINES, launch_command
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request

EAGLE_HEAD = "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"


def _plan(model: str, strategy: str, gpus: int, spec: str | None = None, accept: float | None = None,
          hit: float = 0.0, gpu: str = "H200") -> Plan:
    speculation = parse_speculation(spec, accept) if spec else None
    workload = Workload(isl=2048, osl=256, batch=16, speculation=speculation, prefix_hit=hit)
    request = PlanRequest(model=model, gpu=gpu, gpus=gpus, workload=workload)
    model_spec, cluster = resolve_request(request)
    return plan_for_strategy(request, model_spec, cluster, parse_strategy(strategy))


@pytest.fixture(scope="module")
def deepseek() -> Plan:
    return _plan("deepseek-v3", "adp=8,tp=1,ep=8", 8, "mtp:1", 0.8, hit=0.5)


@pytest.fixture(scope="module")
def llama_eagle() -> Plan:
    return _plan("llama-3.1-70b", "tp=4", 4, "eagle:3", 2.0, gpu="H100")


def test_deepseek_mtp_and_prefix_cache_flags_per_engine(deepseek: Plan) -> None:
    vllm = launch_command(deepseek, "vllm")
    assert vllm.flags["serve"]["--speculative-config"] == '{"method":"mtp","num_speculative_tokens":1}'
    assert vllm.flags["serve"]["--enable-prefix-caching"] is True
    assert "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":1}'" in vllm.command
    sglang = launch_command(deepseek, "sglang").flags["serve"]
    assert {k: sglang[k] for k in sglang if k.startswith("--speculative")} == {
        "--speculative-algorithm": "NEXTN", "--speculative-num-steps": 1, "--speculative-eagle-topk": 1,
        "--speculative-num-draft-tokens": 2}
    assert "--disable-radix-cache" not in sglang  # the radix cache is on by default: the plan's hit needs it
    assert any("radix cache" in note and "50%" in note for note in launch_command(deepseek, "sglang").notes)
    trt = launch_command(deepseek, "trtllm")
    assert trt.files["extra_llm_api_options.yaml"] == (
        "enable_attention_dp: true\nspeculative_config:\n  decoding_type: MTP\n  max_draft_len: 1\n"
        "  num_nextn_predict_layers: 1\nkv_cache_config:\n  enable_block_reuse: true\n")


def test_eagle_head_path_goes_to_every_engine(llama_eagle: Plan) -> None:
    vllm = launch_command(llama_eagle, "vllm", EAGLE_HEAD)
    assert vllm.flags["serve"]["--speculative-config"] == (
        f'{{"method":"eagle3","model":"{EAGLE_HEAD}","num_speculative_tokens":3}}')
    assert "--enable-prefix-caching" not in vllm.flags["serve"]  # the plan counted on no prefix hit
    sglang = launch_command(llama_eagle, "sglang", EAGLE_HEAD).flags["serve"]
    assert sglang["--speculative-algorithm"] == "EAGLE3" and sglang["--speculative-draft-model-path"] == EAGLE_HEAD
    assert (sglang["--speculative-num-steps"], sglang["--speculative-num-draft-tokens"]) == (3, 4)
    trt = launch_command(llama_eagle, "trtllm", EAGLE_HEAD)
    assert trt.files["extra_llm_api_options.yaml"] == (
        f"speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: 3\n  speculative_model_dir: {EAGLE_HEAD}\n")


def test_eagle_without_a_head_is_an_input_error_naming_spec_model(llama_eagle: Plan) -> None:
    for engine in ENGINES:
        with pytest.raises(InputError, match="EAGLE head") as caught:
            launch_command(llama_eagle, engine)  # type: ignore[arg-type]
        assert caught.value.field == "spec_model" and "--spec-model" in (caught.value.fix or "")


def test_draft_model_from_the_request_by_its_hub_id() -> None:
    plan = _plan("llama-3.1-70b", "tp=4", 4, "draft:llama-3.1-8b:4", 2.5, gpu="H100")
    vllm = launch_command(plan, "vllm").flags["serve"]["--speculative-config"]
    assert vllm == '{"method":"draft_model","model":"meta-llama/Llama-3.1-8B","num_speculative_tokens":4}'
    sglang = launch_command(plan, "sglang").flags["serve"]
    assert sglang["--speculative-algorithm"] == "STANDALONE"
    assert sglang["--speculative-draft-model-path"] == "meta-llama/Llama-3.1-8B"
    trt = launch_command(plan, "trtllm").files["extra_llm_api_options.yaml"]
    assert "decoding_type: DraftTarget" in trt and "disable_overlap_scheduler: true" in trt
    # --spec-model replaces it with a local copy; a path with a space stays one YAML string and one shell word.
    local = launch_command(plan, "trtllm", "/models/llama 8b").files["extra_llm_api_options.yaml"]
    assert 'speculative_model_dir: "/models/llama 8b"' in local
    assert "'/models/llama 8b'" in launch_command(plan, "sglang", "/models/llama 8b").command


def test_mtp_on_a_model_without_mtp_layers_and_a_stray_spec_model_are_input_errors() -> None:
    with pytest.raises(InputError, match="no MTP layers") as planned:
        _plan("llama-3.1-8b", "tp=1", 1, "mtp:1", 0.7, gpu="H100")
    assert planned.value.field == "spec"
    plain = _plan("llama-3.1-8b", "tp=1", 1, gpu="H100")
    # A plan file edited by hand to MTP is refused at export too.
    edited = plain.model_copy(update={"request": plain.request.model_copy(update={"workload": plain.request.workload
                              .model_copy(update={"speculation": parse_speculation("mtp:1", 0.7)})})})
    with pytest.raises(InputError, match="no MTP layers") as caught:
        launch_command(edited, "vllm")
    assert caught.value.field == "spec"
    with pytest.raises(InputError, match="nothing to load") as stray:
        launch_command(plain, "sglang", "some/head")
    assert stray.value.field == "spec_model"


def test_split_pools_both_speculate_so_their_kv_layout_matches() -> None:
    plan = _plan("deepseek-v3", "prefill:tp=8;decode:tp=8;disagg", 16, "mtp:2", 1.4)
    for engine in ENGINES:
        spec = launch_command(plan, engine)  # type: ignore[arg-type]
        if engine == "trtllm":
            assert all("decoding_type: MTP" in spec.files[f"{role}_config.yaml"] for role in ("prefill", "decode"))
        else:
            key = "--speculative-config" if engine == "vllm" else "--speculative-algorithm"
            assert key in spec.flags["prefill"] and key in spec.flags["decode"], engine


def test_a_hit_rate_from_the_cost_report_turns_the_cache_on() -> None:
    plan = _plan("llama-3.1-8b", "tp=1", 1, gpu="H100")
    assert plan.dag_cost is not None
    effect = PrefixCacheEffect(hit=0.4, source="trace", prefill_tokens_computed=1228.8, prefill_work_saved=0.35,
                               ttft_without_ms=80.0, shared_kv_gb=0.1)
    traced = plan.model_copy(update={"dag_cost": plan.dag_cost.model_copy(update={"prefix_cache": effect})})
    assert launch_command(traced, "vllm").flags["serve"]["--enable-prefix-caching"] is True
    assert "enable_block_reuse: true" in launch_command(traced, "trtllm").files["extra_llm_api_options.yaml"]


def test_standalone_draft_with_attention_dp_is_noted() -> None:
    plan = _plan("qwen3-30b-a3b", "adp=4,tp=2,ep=8", 8, "draft:qwen3-8b:3", 1.5)
    notes = launch_command(plan, "sglang").notes
    assert any("STANDALONE" in note and "--enable-dp-attention" in note for note in notes)


def test_export_needs_the_eagle_head_and_prints_it(
    tmp_path: Path, llama_eagle: Plan, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(llama_eagle.model_dump_json())
    missing = run_here(capsys, "export", str(path), "--engine", "vllm")
    assert missing.returncode == 2 and "--spec-model" in missing.stderr and "Traceback" not in missing.stderr
    given = run_here(capsys, "export", str(path), "--engine", "sglang", "--spec-model", EAGLE_HEAD)
    assert given.returncode == 0, given.stderr
    assert f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {EAGLE_HEAD}" in given.stdout
    assert "# note: the EAGLE head is loaded as EAGLE-3" in given.stdout
