"""Launch commands pinned for representative plans, per engine, and ``shardplan export`` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli, run_here

from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.traffic import Traffic, parse_length
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.launch.commands import ENGINES, LaunchSpec, launch_command
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request

LLAMA = "meta-llama/Llama-3.1-70B"
QWEN_MOE = "Qwen/Qwen3-30B-A3B"


def _plan(model: str, spec: str, gpus: int = 8, batch: int = 16, gpu: str = "H100", budget: int = 8192) -> Plan:
    request = PlanRequest(model=model, gpu=gpu, gpus=gpus,
                          workload=Workload(isl=2048, osl=256, batch=batch, max_batched_tokens=budget))
    spec_model, cluster = resolve_request(request)
    return plan_for_strategy(request, spec_model, cluster, parse_strategy(spec))


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    return {
        "dense_tp8": _plan(LLAMA, "tp=8"),
        "tp4_pp2": _plan(LLAMA, "tp=4,pp=2,mb=2"),
        "moe_adp_ep": _plan(QWEN_MOE, "adp=4,tp=2,ep=8"),
        "disaggregated": _plan(LLAMA, "prefill:tp=4;decode:tp=4;disagg"),
        "sp": _plan(LLAMA, "sp=2,tp=4"),
    }


PINNED: dict[tuple[str, str], str] = {
    ("dense_tp8", "vllm"): "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 8 --max-num-seqs 16",
    ("dense_tp8", "sglang"):
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B --tp-size 8 --max-running-requests 16",
    ("dense_tp8", "trtllm"): "trtllm-serve meta-llama/Llama-3.1-70B --backend pytorch --tp_size 8 --max_batch_size 16",
    ("tp4_pp2", "vllm"):
        "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4 --pipeline-parallel-size 2 --max-num-seqs 16",
    ("tp4_pp2", "sglang"):
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B --tp-size 4 --pp-size 2 "
        "--max-running-requests 16 --pp-max-micro-batch-size 8",
    ("tp4_pp2", "trtllm"):
        "trtllm-serve meta-llama/Llama-3.1-70B --backend pytorch --tp_size 4 --pp_size 2 --max_batch_size 16",
    ("moe_adp_ep", "vllm"):
        "vllm serve Qwen/Qwen3-30B-A3B --tensor-parallel-size 2 --data-parallel-size 4 --enable-expert-parallel "
        "--max-num-seqs 4",
    ("moe_adp_ep", "sglang"):
        "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp-size 8 --dp-size 4 --enable-dp-attention "
        "--ep-size 8 --moe-a2a-backend deepep --max-running-requests 16 --chunked-prefill-size 32768",
    ("moe_adp_ep", "trtllm"):
        "cat > extra_llm_api_options.yaml <<'EOF'\nenable_attention_dp: true\nEOF\n"
        "trtllm-serve Qwen/Qwen3-30B-A3B --backend pytorch --tp_size 8 --ep_size 8 --max_batch_size 2 "
        "--extra_llm_api_options extra_llm_api_options.yaml",
    # A prefill server's limit is the prompts one of its steps takes (8192 tokens // 2048), a decode server's
    # the sequences it decodes.
    ("disaggregated", "vllm"):
        "CUDA_VISIBLE_DEVICES=0,1,2,3 VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve meta-llama/Llama-3.1-70B "
        "--tensor-parallel-size 4 --max-num-seqs 4 "
        "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}' --port 8100 &\n"
        "CUDA_VISIBLE_DEVICES=4,5,6,7 VLLM_NIXL_SIDE_CHANNEL_PORT=5700 vllm serve meta-llama/Llama-3.1-70B "
        "--tensor-parallel-size 4 --max-num-seqs 16 "
        "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}' --port 8200 &\nwait",
    ("disaggregated", "sglang"):
        "CUDA_VISIBLE_DEVICES=0,1,2,3 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B "
        "--tp-size 4 --max-running-requests 4 --disaggregation-mode prefill --disaggregation-transfer-backend nixl "
        "--port 30000 &\n"
        "CUDA_VISIBLE_DEVICES=4,5,6,7 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B "
        "--tp-size 4 --max-running-requests 16 --disaggregation-mode decode --disaggregation-transfer-backend nixl "
        "--port 30100 &\n"
        "python -m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:30000 "
        "--decode http://127.0.0.1:30100 --host 0.0.0.0 --port 8000 &\nwait",
    ("sp", "vllm"):
        "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4 --data-parallel-size 2 --max-num-seqs 8",
    ("sp", "sglang"):
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B --tp-size 4 --dp-size 2 "
        "--max-running-requests 16",
    ("sp", "trtllm"):
        "cat > extra_llm_api_options.yaml <<'EOF'\nenable_attention_dp: true\nEOF\n"
        "trtllm-serve meta-llama/Llama-3.1-70B --backend pytorch --tp_size 8 --max_batch_size 2 "
        "--extra_llm_api_options extra_llm_api_options.yaml",
}


@pytest.mark.parametrize(("case", "engine"), sorted(PINNED))
def test_pinned_command(plans: dict[str, Plan], case: str, engine: str) -> None:
    assert launch_command(plans[case], engine).command == PINNED[(case, engine)]  # type: ignore[arg-type]


def test_trtllm_disaggregated_has_context_generation_and_orchestrator(plans: dict[str, Plan]) -> None:
    spec = launch_command(plans["disaggregated"], "trtllm")
    assert set(spec.commands) == {"prefill", "decode", "router"}
    assert spec.commands["router"] == "trtllm-serve disaggregated -c disagg_config.yaml"
    assert spec.files["prefill_config.yaml"] == (
        "disable_overlap_scheduler: true\ncache_transceiver_config:\n  backend: NIXL\n  max_tokens_in_buffer: 2048\n")
    assert "disable_overlap_scheduler" not in spec.files["decode_config.yaml"]
    assert '- "localhost:8001"' in spec.files["disagg_config.yaml"]
    assert '- "localhost:8101"' in spec.files["disagg_config.yaml"]
    assert spec.flags["prefill"]["--port"] == 8001 and spec.flags["decode"]["--port"] == 8101
    assert spec.env["decode"] == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}


def test_disaggregated_roles_for_every_engine(plans: dict[str, Plan]) -> None:
    for engine in ENGINES:
        spec = launch_command(plans["disaggregated"], engine)  # type: ignore[arg-type]
        assert {"prefill", "decode"} <= set(spec.flags), engine
    vllm = launch_command(plans["disaggregated"], "vllm")
    assert any("NixlConnector" in note and "proxy" in note for note in vllm.notes)
    assert vllm.env["prefill"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] != vllm.env["decode"]["VLLM_NIXL_SIDE_CHANNEL_PORT"]


def test_sp_plan_says_what_cannot_be_expressed(plans: dict[str, Plan]) -> None:
    for engine in ENGINES:
        notes = " ".join(launch_command(plans["sp"], engine).notes)  # type: ignore[arg-type]
        assert "sp=2" in notes and "not expressed" in notes, engine
        assert "different layouts" in notes, engine


def test_microbatches_and_attention_dp_limits_are_noted(plans: dict[str, Plan]) -> None:
    assert any("mb=2" in note for note in launch_command(plans["tp4_pp2"], "vllm").notes)
    trt = launch_command(plans["moe_adp_ep"], "trtllm").notes
    assert any("attention_dp_size = tp_size = 8" in note and "cannot be expressed" in note for note in trt)
    assert launch_command(plans["moe_adp_ep"], "vllm").notes == []  # vLLM's EP = TP x DP = 8 = the plan's ep
    # Launched with another engine than the plan was priced for, the one note says whose figures the plan holds.
    other = launch_command(plans["dense_tp8"], "sglang").notes
    assert other[0] == ("the plan was priced for vllm: its figures are vllm's, not sglang's (kernels, collectives and "
                        "scheduling differ); plan again with --engine sglang for sglang's own")
    # And SGLang sizes its KV pool with its own --mem-fraction-static, which the note says.
    assert len(other) == 2 and "--mem-fraction-static" in other[1]


def test_export_defaults_to_the_engine_the_plan_was_priced_for(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    request = PlanRequest(model=LLAMA, gpu="H100", gpus=8,
                          workload=Workload(isl=2048, osl=256, batch=16, engine="trtllm"))
    spec_model, cluster = resolve_request(request)
    plan = plan_for_strategy(request, spec_model, cluster, parse_strategy("tp=8"))
    assert launch_command(plan, "trtllm").notes == []
    path = tmp_path / "trt.json"
    path.write_text(plan.model_dump_json())
    printed = run_here(capsys, "export", str(path))
    assert printed.returncode == 0
    assert printed.stdout.splitlines()[0].startswith("# trtllm launch") and "trtllm-serve" in printed.stdout
    assert "priced for trtllm" in run_here(capsys, "export", str(path), "--engine", "vllm").stdout


def test_vllm_ep_size_mismatch_and_moe_replicas() -> None:
    plan = _plan(QWEN_MOE, "dp=2,adp=2,tp=2,ep=2")
    spec = launch_command(plan, "vllm")
    assert any("TP x DP = 4" in note and "ep=2" in note for note in spec.notes)
    lines = spec.commands["serve"].splitlines()
    assert [line.split()[0] for line in lines] == ["CUDA_VISIBLE_DEVICES=0,1,2,3", "CUDA_VISIBLE_DEVICES=4,5,6,7"]
    assert lines[1].endswith("--port 8001")


def test_searched_deployment_gets_one_server_per_replica_at_its_concurrency() -> None:
    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=4,
                          workload=Workload(isl=1024, osl=256, objective="throughput", tpot_ms=30))
    model, cluster = resolve_request(request)
    searched = plan_for_strategy(request, model, cluster, parse_strategy("dp=4,tp=1"))
    assert searched.deployment is not None and searched.strategy is not None
    d = searched.deployment
    per_replica = d.pools[0].concurrency_per_worker
    assert per_replica * d.replicas == d.concurrency and d.replicas == 4
    limits = {"sglang": "--max-running-requests", "vllm": "--max-num-seqs", "trtllm": "--max_batch_size"}
    for engine, limit in limits.items():
        lines = launch_command(searched, engine).commands["serve"].splitlines()  # type: ignore[arg-type]
        assert len(lines) == d.replicas, engine
        assert all(f"{limit} {per_replica}" in line for line in lines), engine
        assert [line.split()[0] for line in lines] == [f"CUDA_VISIBLE_DEVICES={g}" for g in range(4)], engine
        assert not any("--data-parallel-size" in line for line in lines)


def test_a_rate_plan_limits_each_engine_to_what_its_kv_cache_holds_not_the_mean() -> None:
    workload = Workload(isl=1024, osl=256, objective="throughput", tpot_ms=30, rate=10.0)
    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=1, workload=workload)
    model, cluster = resolve_request(request)
    served = plan_for_strategy(request, model, cluster, parse_strategy("tp=1"))
    assert served.deployment is not None
    [pool] = served.deployment.pools
    assert pool.max_concurrency_per_worker > served.deployment.concurrency
    spec = launch_command(served, "vllm")
    assert f"--max-num-seqs {pool.max_concurrency_per_worker}" in spec.commands["serve"]
    assert any("on average at 10 requests/s" in note for note in spec.notes)
    # A closed loop (a fixed batch) keeps its concurrency as the limit: no more clients exist.
    fixed = request.model_copy(update={"workload": workload.model_copy(update={"batch": 24})})
    batch_plan = plan_for_strategy(fixed, model, cluster, parse_strategy("tp=1"))
    assert "--max-num-seqs 24" in launch_command(batch_plan, "vllm").commands["serve"]


def test_split_pools_launch_on_the_gpus_the_placement_gives_them() -> None:
    # Two 4-GPU prefill workers share the first node; the 8-GPU decode worker has the second to itself.
    request = PlanRequest(model="meta-llama/Llama-3.1-70B", gpu="H200", gpus=16,
                          workload=Workload(isl=2048, osl=256, batch=64))
    model, cluster = resolve_request(request)
    plan = plan_for_strategy(request, model, cluster, parse_strategy("prefill:dp=2,tp=4;decode:tp=8;disagg"))
    lines = launch_command(plan, "vllm").command.splitlines()
    assert lines[:2] == ["# node 0", lines[1]] and lines[1].startswith("CUDA_VISIBLE_DEVICES=0,1,2,3 ")
    assert lines[2].startswith("CUDA_VISIBLE_DEVICES=4,5,6,7 ")
    decode = lines.index("# node 1") + 1
    assert "--tensor-parallel-size 8" in lines[decode] and "CUDA_VISIBLE_DEVICES" not in lines[decode]


def test_disaggregated_prefill_sp_folds_into_tp() -> None:
    plan = _plan(LLAMA, "prefill:sp=2,tp=2;decode:tp=4;disagg")
    spec = launch_command(plan, "sglang")
    assert spec.flags["prefill"]["--tp-size"] == 4
    assert any(note.startswith("prefill: sp=2") for note in spec.notes)


def test_sglang_multinode_lines_per_node() -> None:
    request = PlanRequest(model="openai/gpt-oss-120b", gpu="H100", gpus=2, gpus_per_node=1,
                          workload=Workload(isl=2048, osl=256, batch=4))
    model, cluster = resolve_request(request)
    plan = plan_for_strategy(request, model, cluster, parse_strategy("pp=2"))
    spec = launch_command(plan, "sglang")
    assert spec.command.startswith("# node 0\n")
    assert '--nnodes 2 --node-rank 1 --dist-init-addr "${HEAD_IP}:5000"' in spec.command
    assert launch_command(plan, "trtllm").command.startswith("trtllm-llmapi-launch trtllm-serve")
    assert "--distributed-executor-backend ray" in launch_command(plan, "vllm").command


def test_infeasible_plan_and_unknown_engine_are_input_errors(plans: dict[str, Plan]) -> None:
    infeasible = Plan(shardplan_version="0", request=plans["dense_tp8"].request, status="infeasible", strategy=None,
                      explanation="does not fit", min_gpus=16)
    with pytest.raises(InputError, match="infeasible"):
        launch_command(infeasible, "vllm")
    with pytest.raises(InputError, match="unknown engine"):
        launch_command(plans["dense_tp8"], "tgi")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory, plans: dict[str, Plan]) -> Path:
    path = tmp_path_factory.mktemp("export") / "plan.json"
    path.write_text(plans["moe_adp_ep"].model_dump_json())
    return path


def test_export_prints_a_shell_script(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "export", str(plan_file), "--engine", "sglang")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("# sglang launch for Qwen/Qwen3-30B-A3B")
    assert PINNED[("moe_adp_ep", "sglang")] in result.stdout


def test_export_json_is_a_launch_spec(plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "export", str(plan_file), "--engine", "trtllm", "--json")
    assert result.returncode == 0, result.stderr
    spec = LaunchSpec.model_validate(json.loads(result.stdout))
    assert spec.flags["serve"]["--ep_size"] == 8


def test_export_bad_input_exits_2_with_one_line(
    tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first through the installed script: its exit code is the process's; the rest in this process.
    missing = run_cli("export", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "no file" in missing.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert run_here(capsys, "export", str(junk)).returncode == 2
    engine = run_here(capsys, "export", str(plan_file), "--engine", "tgi")
    assert engine.returncode == 2 and "vllm, sglang, trtllm" in engine.stderr
    infeasible = tmp_path / "infeasible.json"
    request = json.loads(plan_file.read_text())["request"]
    infeasible.write_text(json.dumps({"shardplan_version": "0", "request": request, "status": "infeasible",
                                      "strategy": None, "explanation": "does not fit (MEM-1)", "min_gpus": 16}))
    result = run_here(capsys, "export", str(infeasible))
    assert result.returncode == 2 and "infeasible" in result.stderr and "Traceback" not in result.stderr


def test_the_launch_modules_examples_hold() -> None:
    import doctest

    from shardplan.tools.launch import commands, shell

    for module in (commands, shell):
        assert doctest.testmod(module).failed == 0, module.__name__


def _flag(command: str, flag: str) -> str | None:
    words = command.split()
    return words[words.index(flag) + 1] if flag in words else None


def test_the_plan_s_step_budget_is_written_where_the_engine_s_default_differs(plans: dict[str, Plan]) -> None:
    # Each engine launched without a budget flag runs its own default, per GPU: vLLM 2048 on an A100 (8192 on GPUs of
    # 70 GiB or more other than the A100), SGLang 16384 on a B200 (8192 on an H100), divided among its attention-DP
    # ranks; TensorRT-LLM 8192. The plan prices 8192 a scheduler unless told otherwise, so the command says so where
    # the default differs, and the H100 commands above stay as short as the defaults allow.
    a100 = _plan(LLAMA, "tp=8", gpu="A100")
    assert _flag(launch_command(a100, "vllm").command, "--max-num-batched-tokens") == "8192"
    assert _flag(launch_command(a100, "sglang").command, "--chunked-prefill-size") is None
    b200 = _plan(LLAMA, "tp=8", gpu="B200")
    assert _flag(launch_command(b200, "sglang").command, "--chunked-prefill-size") == "8192"
    assert _flag(launch_command(b200, "vllm").command, "--max-num-batched-tokens") is None
    # SGLang divides --chunked-prefill-size among the ranks under --enable-dp-attention: 4 ranks of 8192 each.
    assert _flag(launch_command(plans["moe_adp_ep"], "sglang").command, "--chunked-prefill-size") == "32768"
    assert _flag(launch_command(plans["moe_adp_ep"], "vllm").command, "--max-num-batched-tokens") is None
    # A budget above SGLang's 16,384 prompt tokens a batch raises that cap too; TensorRT-LLM takes its own flag.
    big = _plan(LLAMA, "tp=8", budget=32768)
    sglang = launch_command(big, "sglang").command
    assert _flag(sglang, "--chunked-prefill-size") == "32768" and _flag(sglang, "--max-prefill-tokens") == "32768"
    assert _flag(launch_command(big, "trtllm").command, "--max_num_tokens") == "32768"
    assert _flag(launch_command(big, "vllm").command, "--max-num-batched-tokens") == "32768"


def _long_prompt_plan(spec: str, **lengths: object) -> Plan:
    work = Workload(isl=20000, osl=256, batch=16)
    if lengths:
        work = work.model_copy(update={"isl": 3000, "traffic": Traffic(**lengths)})  # type: ignore[arg-type]
    request = PlanRequest(model=LLAMA, gpu="H100", gpus=8, workload=work)
    spec_model, cluster = resolve_request(request)
    return plan_for_strategy(request, spec_model, cluster, parse_strategy(spec))


def test_trtllm_gets_chunked_prefill_where_prompts_can_outgrow_its_step(plans: dict[str, Plan]) -> None:
    # trtllm-serve refuses a prompt longer than max_num_tokens (8,192 here) unless chunked prefill is on: the export
    # turns it on where the workload's prompts can be longer (20,000 fixed, an uncapped lognormal), on every server
    # that takes prompts (a split deployment's generation servers take KV caches), and leaves it off otherwise.
    colocated = launch_command(_long_prompt_plan("tp=8"), "trtllm")
    assert "enable_chunked_prefill: true" in colocated.files["extra_llm_api_options.yaml"]
    assert any("refuses a longer prompt without chunked prefill" in note for note in colocated.notes)
    split = launch_command(_long_prompt_plan("prefill:tp=4;decode:tp=4;disagg"), "trtllm")
    assert "enable_chunked_prefill: true" in split.files["prefill_config.yaml"]
    assert "enable_chunked_prefill" not in split.files["decode_config.yaml"]
    uncapped = _long_prompt_plan("tp=8", isl=parse_length("lognormal:mean=3000,cv=1"))
    assert "enable_chunked_prefill: true" in launch_command(uncapped, "trtllm").files["extra_llm_api_options.yaml"]
    capped = _long_prompt_plan("tp=8", isl=parse_length("lognormal:mean=3000,cv=1,high=8192"))
    assert "extra_llm_api_options.yaml" not in launch_command(capped, "trtllm").files
    assert "enable_chunked_prefill" not in json.dumps(launch_command(plans["dense_tp8"], "trtllm").files)
    # vLLM and SGLang chunk by default: nothing to add.
    assert "chunked" not in launch_command(_long_prompt_plan("tp=8"), "vllm").command


def test_trtllm_transfer_buffer_holds_the_longest_prompt_not_the_mean() -> None:
    # A transfer buffer shorter than a request's prompt times its transfers out and deadlocks TensorRT-LLM's split
    # workers under load: it is sized to the workload's longest prompt (a cap of 12,000 over a mean of 3,000), or
    # to the model's context where nothing shorter bounds the prompts.
    split = "prefill:tp=4;decode:tp=4;disagg"
    capped = _long_prompt_plan(split, isl=parse_length("lognormal:mean=3000,cv=1,high=12000"))
    files = launch_command(capped, "trtllm").files
    assert "max_tokens_in_buffer: 12000" in files["prefill_config.yaml"]
    assert "max_tokens_in_buffer: 12000" in files["decode_config.yaml"]
    uncapped = _long_prompt_plan(split, isl=parse_length("lognormal:mean=3000,cv=1"))
    assert "max_tokens_in_buffer: 131072" in launch_command(uncapped, "trtllm").files["decode_config.yaml"]


def test_the_report_opens_the_launch_of_the_engine_the_plan_was_priced_for() -> None:
    from shardplan.tools.report.panels import launch_html

    request = PlanRequest(model=LLAMA, gpu="H100", gpus=8,
                          workload=Workload(isl=2048, osl=256, batch=16, engine="sglang"))
    spec_model, cluster = resolve_request(request)
    html = launch_html(plan_for_strategy(request, spec_model, cluster, parse_strategy("tp=8")))
    first = html.split("</details>")[0]
    assert "<details class=\"launch\" open><summary>SGLang" in first
    assert html.count(" open>") == 1


def test_vllm_never_gets_more_running_sequences_than_its_step_carries_tokens() -> None:
    # vLLM refuses to start with max_num_seqs above max_num_batched_tokens. A plan for 20 requests/s under a
    # 512-token step holds 537 sequences in its KV cache: vLLM gets 512 and a note; SGLang, whose decode steps do
    # not count against its prompt budget, keeps the 537.
    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100", gpus=1,
                          workload=Workload(isl=512, osl=256, rate=20.0, max_batched_tokens=512))
    spec_model, cluster = resolve_request(request)
    plan = plan_for_strategy(request, spec_model, cluster, parse_strategy("tp=1"))
    vllm = launch_command(plan, "vllm")
    assert _flag(vllm.command, "--max-num-seqs") == "512" and _flag(vllm.command, "--max-num-batched-tokens") == "512"
    assert any("max_num_seqs <= max_num_batched_tokens" in note for note in vllm.notes)
    sglang_seqs = _flag(launch_command(plan, "sglang").command, "--max-running-requests")
    assert sglang_seqs is not None and int(sglang_seqs) > 512


def test_the_memory_share_the_plan_gave_the_engine_is_launched_with_it() -> None:
    # The plan sizes the KV cache with the workload's gpu_memory_utilization; vLLM (of the whole GPU) and
    # TensorRT-LLM (of the memory free after the weights) take 0.9 unless told, so another share is written out,
    # and the default one is not.
    request = PlanRequest(model=LLAMA, gpu="H100", gpus=8,
                          workload=Workload(isl=2048, osl=256, batch=16, gpu_memory_utilization=0.8, prefix_hit=0.5))
    spec_model, cluster = resolve_request(request)
    plan = plan_for_strategy(request, spec_model, cluster, parse_strategy("tp=8"))
    assert _flag(launch_command(plan, "vllm").command, "--gpu-memory-utilization") == "0.8"
    options = launch_command(plan, "trtllm").files["extra_llm_api_options.yaml"]
    assert options == "kv_cache_config:\n  enable_block_reuse: true\n  free_gpu_memory_fraction: 0.8\n"
    default = launch_command(_plan(LLAMA, "tp=8"), "vllm").command
    assert "--gpu-memory-utilization" not in default
