"""The chat reader's rules for the seventeenth batch (tests/data/requests_batch17.yaml): settings written as settings,
pasted launch and benchmark commands, JSON an agent sends, machine names, node prices and nodes "each"."""

from __future__ import annotations

import pytest

from shardplan.agent.parse.request import parse_request


@pytest.mark.parametrize(("text", "fields"), [
    ("model=llama-3.1-8b gpu=L40S n_gpu=2 in=1k out=256 p99_ttft=1s",
     {"gpus": 2, "isl": 1024, "osl": 256, "ttft_ms": 1000.0, "slo_percentile": "p99"}),
    ("model=gpt-oss-120b gpu=H200 gpus=8 isl=8k osl=1k objective=throughput price_per_gpu_hr=3.80",
     {"gpus": 8, "isl": 8192, "osl": 1024, "gpu_price": 3.8}),
    ('{"model": "Qwen/Qwen3-32B", "gpus": 4, "gpu": "H100", "isl": 4096, "osl": 512, "ttft_ms": 800}',
     {"model": "Qwen/Qwen3-32B", "gpu": "H100", "gpus": 4, "isl": 4096, "osl": 512, "ttft_ms": 800.0}),
    ('{"model": "Qwen/Qwen3-8B", "gpu": "H100", "gpus": 1, "isl": {"dist": "lognormal", "mean": 2000, "cv": 0.5}}',
     {"isl_dist": "lognormal:mean=2000,cv=0.5"}),
    ('{"model": "meta-llama/Llama-3.1-70B-Instruct", "gpu": "B200", "gpus": 2, '
     '"spec_decode": {"method": "eagle", "k": 4, "acceptance_length": 3.2}}',
     {"spec_method": "eagle", "spec_tokens": 4, "spec_accept": 2.2}),
    ('{"model": "mistralai/Mixtral-8x7B-v0.1", "gpu": "H100", "gpus": 2, "arrival": {"type": "gamma", "cv": 3}, '
     '"rate_rps": 6}', {"arrival": "gamma:cv=3", "rate": 6.0}),
])
def test_settings_written_as_settings(text: str, fields: dict[str, object]) -> None:
    parsed = parse_request(text)
    assert {name: getattr(parsed, name) for name in fields} == fields


@pytest.mark.parametrize(("text", "fields"), [
    ("vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --max-num-seqs 128 --kv-cache-dtype fp8 "
     "--max-model-len 8192 -- is this a good layout for 8 H100?",
     {"batch": None, "isl": None, "kv_dtype": "fp8", "constraints": ["tp=4", "engine=vllm"]}),
    ("vllm serve Qwen/Qwen3-235B-A22B-FP8 --tensor-parallel-size 8 --enable-expert-parallel on 8 H200",
     {"constraints": ["tp=8", "ep=8", "engine=vllm"]}),
    ("vllm serve meta-llama/Llama-3.3-70B-Instruct -tp 4 --speculative-config "
     "'{\"model\": \"meta-llama/Llama-3.1-8B-Instruct\", \"num_speculative_tokens\": 5}' on 4xH100",
     {"model": "meta-llama/Llama-3.1-70B", "spec_method": "draft:meta-llama/Llama-3.1-8B", "spec_tokens": 5}),
])
def test_pasted_launch_commands(text: str, fields: dict[str, object]) -> None:
    parsed = parse_request(text)
    got = {name: sorted(value) if isinstance(value := getattr(parsed, name), list) else value for name in fields}
    assert got == {name: sorted(value) if isinstance(value, list) else value for name, value in fields.items()}
    assert parsed.contradictions == []


@pytest.mark.parametrize(("text", "fields"), [
    ("vllm bench serve --model Qwen/Qwen3-32B --dataset-name random --random-input-len 2048 --random-output-len 256 "
     "--max-concurrency 64 --request-rate 8 --num-prompts 1000 -- server is 2x H100",
     {"isl": 2048, "osl": 256, "rate": 8.0, "arrival": "poisson"}),
    ("genai-perf profile -m Qwen/Qwen3-32B --concurrency 8 --synthetic-input-tokens-mean 3000 "
     "--synthetic-input-tokens-stddev 600 --output-tokens-mean 400 --output-tokens-stddev 0 -> 4xA100",
     {"isl_dist": "lognormal:mean=3000,cv=0.2", "osl": 400, "arrival": "closed:8", "batch": 8}),
    ("vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct --random-input-len 1024 --random-output-len 128 "
     "--request-rate 4 --burstiness 0.25 ; target is one L40S", {"rate": 4.0, "arrival": "gamma:cv=2"}),
    ("vllm bench serve --model Qwen/Qwen3-8B --random-input-len 4096 --random-output-len 512 "
     "--random-range-ratio 0.25 --request-rate 2 on one H100", {"isl": 4096, "isl_dist": "uniform:3072,5120"}),
    ("python3 -m sglang.bench_serving --random-input-len 1024 --random-output-len 256 --random-range-ratio 0.5 "
     "--request-rate 16 ; model Qwen/Qwen3-30B-A3B, 2x H100", {"isl_dist": "uniform:512,1024", "isl": None}),
    ("vllm bench serve --model meta-llama/Llama-3.1-70B-Instruct --random-prefix-len 512 --random-input-len 1536 "
     "--random-output-len 256 --max-concurrency 16 --request-rate inf on 4 H200",
     {"isl": 2048, "prefix_tokens": 512, "arrival": "closed:16"}),
    ('guidellm benchmark --model Qwen/Qwen3-8B --rate-type concurrent --rate 16 '
     '--data "prompt_tokens=512,output_tokens=128" # box has 1 H20', {"isl": 512, "osl": 128, "arrival": "closed:16"}),
])
def test_benchmark_command_lines(text: str, fields: dict[str, object]) -> None:
    parsed = parse_request(text)
    assert {name: getattr(parsed, name) for name in fields} == fields
    assert parsed.contradictions == []


def test_machine_names_node_prices_and_nodes_each() -> None:
    parsed = parse_request("@here on gpu-node-12 and gpu-node-13 (2 nodes, 8xH200 each) we run DeepSeek-V3 on port "
                           "30000. ~6k prompts, ~700 back")
    assert (parsed.gpus, parsed.nodes, parsed.gpus_per_node) == (16, 2, 8)
    priced = parse_request("we pay $23.60/hr for an 8x H100 node. Qwen3-235B-A22B at 4k in / 1k out")
    assert (priced.gpu_price, priced.gpu, priced.gpus) == (2.95, "H100", 8)
    assert parse_request("Prefix cache hit rate: 41.2%, llama 3.1 8b on a single A100").prefix_hit == 0.412
    pools = parse_request("sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --disaggregation-mode prefill "
                          "--tp 16 --nnodes 2 --node-rank 0 ; decode the same. 4 H200 nodes in total (8 GPUs each)")
    assert (pools.gpus, pools.nodes, pools.gpus_per_node) == (32, 4, 8)


def test_a_kv_format_said_two_ways_is_asked_back() -> None:
    assert parse_request("vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2 --kv-cache-dtype fp8 on 2 H100 -- "
                         "compliance says the kv cache must stay bf16.").contradictions


@pytest.mark.parametrize("text", ["why won't vllm accept --tensor-parallel-size 3 for llama-3.1-70b on 3 A100s?",
                                  "llama 70b on 8 h100. why not --tp 2 --dp 4 then?"])
def test_a_why_not_about_flags(text: str) -> None:
    assert parse_request(text).intent == "why_not"


@pytest.mark.parametrize("text", ["{" * 3000 + "}" * 3000, '{"a": ' * 2000 + "1" + "}" * 2000, '{"isl": 5, ' * 3000])
def test_hostile_json_is_read_without_raising(text: str) -> None:
    """A JSON object nested past the decoder's recursion raised RecursionError out of the reader."""
    assert parse_request(text).intent == "plan"


def test_sglang_eagle_without_a_draft_model_is_mtp_on_a_model_with_mtp_layers() -> None:
    mtp = parse_request("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3-0324 --tp 8 "
                        "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 on 8 H200")
    assert (mtp.spec_method, mtp.spec_tokens) == ("mtp", 3)
    eagle = parse_request("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                          "--speculative-algorithm EAGLE --speculative-draft-model-path lmsys/sglang-EAGLE-LLaMA3-"
                          "Instruct-8B --speculative-num-steps 4 on 1 A100")
    assert (eagle.spec_method, eagle.spec_tokens, eagle.model) == ("eagle", 4, "meta-llama/Llama-3.1-8B")
