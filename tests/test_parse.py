"""The plain-language request parser: phrasings, follow-ups, why-not questions, contradictions, asking back."""

from __future__ import annotations

import doctest
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from shardplan.agent.parse import plan_request as asking_module
from shardplan.agent.parse import request as parse_module
from shardplan.agent.parse.plan_request import clarifying_question, missing_fields, to_plan_request
from shardplan.agent.parse.request import DEFAULT_ISL, DEFAULT_OSL, ParsedRequest, parse_request
from shardplan.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fuzz_chat import GRAMMAR_WORDS  # noqa: E402  (the word-level fuzz's words: one list for both)

HEADLINE = "Plan DeepSeek-V3 on two nodes of 8 H200 for 8k prompts and 1k outputs, first token under 2 s"

PHRASINGS: list[tuple[str, dict[str, Any]]] = [
    # models by full id, short name and common phrasing
    ("deepseek v3 on 8x H100", {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H100", "gpus": 8}),
    ("Llama 3.1 70B on 8 H100s", {"model": "meta-llama/Llama-3.1-70B", "gpu": "H100", "gpus": 8}),
    ("llama-3.1-70b on a single A100", {"model": "meta-llama/Llama-3.1-70B", "gpu": "A100", "gpus": 1}),
    ("Llama 3.1 405B on 4 nodes with 8 B200 each",
     {"model": "meta-llama/Llama-3.1-405B", "gpu": "B200", "gpus": 32, "nodes": 4, "gpus_per_node": 8}),
    ("meta-llama/Llama-3.1-8B on 1 H100", {"model": "meta-llama/Llama-3.1-8B", "gpus": 1}),
    ("llama 70b on 4 a100s", {"model": "meta-llama/Llama-3.1-70B", "gpu": "A100", "gpus": 4}),
    ("Qwen3-235B on 16 GPUs", {"model": "Qwen/Qwen3-235B-A22B", "gpu": None, "gpus": 16}),
    ("qwen3 30b a3b on dual L40S", {"model": "Qwen/Qwen3-30B-A3B", "gpu": "L40S", "gpus": 2}),
    ("Qwen3 8B on H200 x 2", {"model": "Qwen/Qwen3-8B", "gpu": "H200", "gpus": 2}),
    ("Mixtral 8x7B on 8 MI300X", {"model": "mistralai/Mixtral-8x7B-v0.1", "gpu": "MI300X", "gpus": 8}),
    ("mixtral-8x22b on 8×H200", {"model": "mistralai/Mixtral-8x22B-v0.1", "gpu": "H200", "gpus": 8}),
    ("gpt-oss-120b on H100 SXM", {"model": "openai/gpt-oss-120b", "gpu": "H100", "gpus": None}),
    ("gpt oss 20b on an L40S", {"model": "openai/gpt-oss-20b", "gpu": "L40S", "gpus": 1}),
    # GPU counts and node shapes
    ("2x8 H100", {"gpu": "H100", "gpus": 16, "nodes": 2, "gpus_per_node": 8}),
    ("two 8-GPU H100 nodes", {"gpus": 16, "nodes": 2, "gpus_per_node": 8}),
    ("32 GPUs with 8 GPUs per node", {"gpus": 32, "nodes": 4, "gpus_per_node": 8}),
    ("a single H200 node", {"gpu": "H200", "gpus": 8, "nodes": 1, "gpus_per_node": 8}),
    ("Mixtral 8x22B on 2 nodes x 8 GPUs of MI300X", {"model": "mistralai/Mixtral-8x22B-v0.1", "gpus": 16}),
    # lengths (k = 1024)
    ("8192-token prompts, generate 512 tokens", {"isl": 8192, "osl": 512}),
    ("input 2048, output length 256", {"isl": 2048, "osl": 256}),
    ("isl 4096 osl 512", {"isl": 4096, "osl": 512}),
    ("32k context", {"isl": 32768}),
    ("prompts of 1,000 tokens and 1k outputs", {"isl": 1000, "osl": 1024}),
    ("8k prompts 1k outputs", {"isl": 8192, "osl": 1024}),
    ("8k in, 1k out", {"isl": 8192, "osl": 1024}),
    ("ISL/OSL 4k/512", {"isl": 4096, "osl": 512}),
    # batch and concurrency
    ("batch 32", {"batch": 32}),
    ("batch size of 64", {"batch": 64}),
    ("64 concurrent users", {"batch": 64}),
    ("concurrency 128", {"batch": 128}),
    ("single user", {"batch": 1}),
    ("one user", {"batch": 1}),
    # targets
    ("TTFT below 500 ms", {"ttft_ms": 500.0}),
    ("time to first token < 1.5 seconds", {"ttft_ms": 1500.0}),
    ("TPOT 20 ms", {"tpot_ms": 20.0}),
    ("at least 50 tokens/s per user", {"tpot_ms": 20.0}),
    ("under 30 ms per token", {"tpot_ms": 30.0}),
    ("inter-token latency 25ms", {"tpot_ms": 25.0}),
    ("2 s TTFT and 20 ms TPOT", {"ttft_ms": 2000.0, "tpot_ms": 20.0}),
    ("first token under 2 s and 30 ms per token", {"ttft_ms": 2000.0, "tpot_ms": 30.0}),
    # percentiles and request rates
    ("P99 TTFT under 2 s", {"ttft_ms": 2000.0, "slo_percentile": "p99"}),
    ("99th percentile time to first token below 800 ms", {"ttft_ms": 800.0, "slo_percentile": "p99"}),
    ("median TTFT under 300 ms", {"ttft_ms": 300.0, "slo_percentile": "p50"}),
    ("p90 TPOT 40 ms", {"tpot_ms": 40.0, "slo_percentile": "p90"}),
    ("TTFT under 1 s", {"ttft_ms": 1000.0, "slo_percentile": None}),
    ("at 10 requests/s", {"rate": 10.0}),
    ("600 requests per minute", {"rate": 10.0}),
    ("12 QPS, bursty traffic", {"rate": 12.0, "arrival": "gamma:cv=3"}),
    # objectives
    ("maximize throughput", {"objective": "throughput"}),
    ("highest throughput", {"objective": "throughput"}),
    ("cheapest per token", {"objective": "throughput"}),
    ("lowest latency", {"objective": "latency"}),
    ("fastest", {"objective": "latency"}),
    ("max throughput under the SLO", {"objective": "goodput"}),
    ("highest throughput with TTFT under 1 s", {"objective": "goodput", "ttft_ms": 1000.0}),
    ("8 H100s", {"objective": None}),
    # formats
    ("in fp8", {"weight_dtype": "fp8", "kv_dtype": None}),
    ("FP4 weights and fp8 kv cache", {"weight_dtype": "fp4", "kv_dtype": "fp8"}),
    ("bf16", {"weight_dtype": "bf16"}),
    ("kv cache in fp8", {"kv_dtype": "fp8", "weight_dtype": None}),
    # disaggregation
    ("disaggregated", {"disaggregated": True}),
    ("separate prefill and decode", {"disaggregated": True}),
    ("PD disaggregation", {"disaggregated": True}),
    ("without disaggregation", {"disaggregated": False}),
    ("8 H100s", {"disaggregated": None}),
]


@pytest.mark.parametrize(("text", "expected"), PHRASINGS, ids=[text for text, _ in PHRASINGS])
def test_phrasing(text: str, expected: dict[str, Any]) -> None:
    parsed = parse_request(text)
    assert {name: getattr(parsed, name) for name in expected} == expected
    assert parsed.contradictions == []


def test_headline_request() -> None:
    parsed = parse_request(HEADLINE)
    assert (parsed.model, parsed.gpu, parsed.gpus, parsed.gpus_per_node, parsed.nodes) == (
        "deepseek-ai/DeepSeek-V3", "H200", 16, 8, 2)
    assert (parsed.isl, parsed.osl, parsed.ttft_ms, parsed.tpot_ms) == (8192, 1024, 2000.0, None)
    assert parsed.intent == "plan" and parsed.contradictions == [] and missing_fields(parsed) == []
    request = to_plan_request(parsed)
    assert (request.model, request.gpu, request.gpus, request.gpus_per_node) == ("deepseek-ai/DeepSeek-V3", "H200",
                                                                                16, 8)
    assert (request.workload.isl, request.workload.osl, request.workload.ttft_ms) == (8192, 1024, 2000.0)
    assert request.policy == "builtin"


def test_a_model_name_is_never_read_as_counts_or_lengths() -> None:
    parsed = parse_request("Mixtral 8x7B with Llama-free text on 4 H100s")
    assert (parsed.model, parsed.gpus, parsed.gpus_per_node, parsed.isl) == ("mistralai/Mixtral-8x7B-v0.1", 4, None,
                                                                             None)
    assert parse_request("gpt-oss-120b").model == "openai/gpt-oss-120b"
    assert parse_request("gpt-oss-20b").model == "openai/gpt-oss-20b"
    assert parse_request("Llama 3.1 8B").model == "meta-llama/Llama-3.1-8B"


def test_follow_ups_keep_the_rest() -> None:
    first = parse_request(HEADLINE)
    more_nodes = parse_request("now with 4 nodes", previous=first)
    assert (more_nodes.nodes, more_nodes.gpus_per_node, more_nodes.gpus) == (4, 8, 32)
    assert (more_nodes.model, more_nodes.isl, more_nodes.ttft_ms) == (first.model, 8192, 2000.0)
    other_gpu = parse_request("use H100 instead", previous=more_nodes)
    assert (other_gpu.gpu, other_gpu.gpus) == ("H100", 32)
    fewer = parse_request("what about 16 GPUs", previous=other_gpu)
    assert (fewer.gpus, fewer.nodes, fewer.gpus_per_node) == (16, 2, 8)
    batched = parse_request("with batch 64", previous=fewer)
    assert (batched.batch, batched.gpus, batched.gpu) == (64, 16, "H100")
    shorter = parse_request("and 4k prompts", previous=batched)
    assert (shorter.isl, shorter.osl, shorter.batch) == (4096, 1024, 64)


def test_follow_up_nodes_without_a_known_node_size_use_the_gpus_usual_node() -> None:
    first = parse_request("Llama 3.1 8B on 8 H100s")
    assert first.gpus_per_node is None
    follow = parse_request("now with 4 nodes", previous=first)
    assert (follow.nodes, follow.gpus_per_node, follow.gpus) == (4, 8, 32)
    assert any("8 GPUs per node" in note for note in follow.notes)


def test_replaced_values_are_dropped_not_contradicted() -> None:
    first = parse_request("Llama 3.1 70B on 8 H100s")
    swapped = parse_request("use H200 instead of H100", previous=first)
    assert (swapped.gpu, swapped.gpus, swapped.contradictions) == ("H200", 8, [])
    moved = parse_request("switch from 8 H100s to 16 H200s")
    assert (moved.gpu, moved.gpus, moved.contradictions) == ("H200", 16, [])
    model = parse_request("replace Llama 3.1 70B with Qwen3-32B")
    assert (model.model, model.contradictions) == ("Qwen/Qwen3-32B", [])


@pytest.mark.parametrize(("text", "about"), [
    ("why not PP?", "pp"),
    ("why not pipeline parallelism", "pp"),
    ("Why not tensor parallel?", "tp"),
    ("why no expert parallelism?", "ep"),
    ("why didn't you use sequence parallelism", "sp"),
    ("why not data parallel", "dp"),
    ("what about data-parallel attention?", "adp"),
    ("why not disaggregate?", "disagg"),
    ("why no microbatching?", "mb"),
])
def test_why_not(text: str, about: str) -> None:
    previous = parse_request(HEADLINE)
    parsed = parse_request(text, previous=previous)
    assert (parsed.intent, parsed.about) == ("why_not", about)
    assert (parsed.model, parsed.gpus, parsed.disaggregated) == (previous.model, previous.gpus, None)


def test_why_not_without_a_technique_is_a_what_if() -> None:
    parsed = parse_request("why not 16 GPUs?", previous=parse_request(HEADLINE))
    assert (parsed.intent, parsed.gpus, parsed.nodes) == ("plan", 16, 2)


def test_explain_and_compare() -> None:
    assert (parse_request("why did you pick TP 8?").intent, parse_request("why did you pick TP 8?").about) == (
        "explain", "tp")
    compared = parse_request("compare TP and PP for Llama 3.1 8B on 8 H100")
    assert (compared.intent, compared.about, compared.model) == ("compare", "tp,pp", "meta-llama/Llama-3.1-8B")
    both = parse_request("Qwen3 8B vs Qwen3-32B on 8 H100")
    assert (both.intent, both.model, both.contradictions) == ("compare", "Qwen/Qwen3-8B", [])
    assert any("Qwen/Qwen3-32B" in note for note in both.notes)


@pytest.mark.parametrize(("text", "words"), [
    ("Llama 3.1 70B on 8 GPUs across 2 nodes of 8 H100", ["8 GPUs", "16"]),
    ("TTFT under 1 s and over 2 s", ["TTFT", "1000", "2000"]),
    ("Llama 3.1 70B or Qwen3-32B on 8 H100", ["meta-llama/Llama-3.1-70B", "Qwen/Qwen3-32B"]),
    ("Llama 3.1 70B on 8 H100 or 8 H200", ["H100", "H200"]),
    ("16 GPUs across 3 nodes", ["16", "3 nodes"]),
    ("lowest latency and highest throughput", ["latency", "throughput"]),
    ("8k prompts, isl 4096", ["8192", "4096"]),
])
def test_contradictions_are_recorded_not_raised(text: str, words: list[str]) -> None:
    parsed = parse_request(text)
    assert len(parsed.contradictions) == 1
    assert all(word in parsed.contradictions[0] for word in words)


def test_contradictory_request_is_not_planned() -> None:
    parsed = parse_request("Llama 3.1 70B on 8 GPUs across 2 nodes of 8 H100")
    with pytest.raises(InputError) as caught:
        to_plan_request(parsed)
    assert caught.value.field == "request"
    assert caught.value.fix == parsed.contradictions[0]


def test_unknown_model_is_left_out_with_close_names() -> None:
    parsed = parse_request("Plan GPT-5 on 8 H100")
    assert parsed.model is None and parsed.gpus == 8
    assert any("gpt-5" in note and "openai/gpt-oss-120b" in note for note in parsed.notes)
    kimi = parse_request("Kimi K2 on 16 H200")
    assert kimi.model is None
    assert any("not bundled" in note and "deepseek-ai/DeepSeek-V3" in note and "config.json" in note
               for note in kimi.notes)


def test_architecture_aliases_are_planned_and_said() -> None:
    newer = parse_request("Llama 3.3 70B on 8 H100")
    assert newer.model == "meta-llama/Llama-3.1-70B"
    assert any("same architecture" in note for note in newer.notes)
    assert parse_request("deepseek-v3.1 on 8 H200").model == "deepseek-ai/DeepSeek-V3"
    assert parse_request("DeepSeek-R1 on 8 H200").model == "deepseek-ai/DeepSeek-V3"


def test_unique_family_name_is_read_with_a_note() -> None:
    parsed = parse_request("plan deepseek on 16 H200")
    assert parsed.model == "deepseek-ai/DeepSeek-V3"
    assert any("deepseek-ai/DeepSeek-V3" in note for note in parsed.notes)


def test_unclaimed_figures_and_unsupported_targets_are_noted() -> None:
    assert parse_request("latency under 50 ms").ttft_ms is None
    assert any("TTFT or TPOT" in note for note in parse_request("latency under 50 ms").notes)
    aggregate = parse_request("10,000 tokens/s")
    assert aggregate.tpot_ms is None and any("per user" in note for note in aggregate.notes)
    assert parse_request("0 GPUs").gpus is None


@pytest.mark.parametrize(("text", "missing"), [
    ("Plan something", ["model", "gpu", "gpus"]),
    ("Llama 3.1 70B", ["gpu", "gpus"]),
    ("Llama 3.1 70B on 16 GPUs", ["gpu"]),
    ("Llama 3.1 70B on H100", ["gpus"]),
    ("on 8 H100s with 8k prompts", ["model"]),
    ("Llama 3.1 70B on 2 H100 nodes", []),
])
def test_missing_fields_and_the_question(text: str, missing: list[str]) -> None:
    parsed = parse_request(text)
    assert missing_fields(parsed) == missing
    question = clarifying_question(missing)
    words = {"model": "which model", "gpu": "which GPU type", "gpus": "how many GPUs"}
    assert all(words[name] in question for name in missing)
    assert question.endswith("?") if missing else question == ""
    if missing:
        with pytest.raises(InputError) as caught:
            to_plan_request(parsed)
        assert caught.value.field == missing[0]
        assert all(name in str(caught.value) for name in missing)


def test_missing_gpu_type_is_filled_by_a_follow_up() -> None:
    first = parse_request("Llama 3.1 70B on 2 nodes")
    assert (first.nodes, first.gpus, missing_fields(first)) == (2, None, ["gpu"])
    follow = parse_request("H100", previous=first)
    assert (follow.gpus, follow.gpus_per_node, missing_fields(follow)) == (16, 8, [])


def test_defaults_fill_the_plan_request() -> None:
    parsed = parse_request("Qwen3-32B on 4 H100s, FP8 weights, fp8 kv cache, TPOT 30 ms, max throughput")
    assert any(str(DEFAULT_ISL) in note for note in parsed.notes)
    assert any(str(DEFAULT_OSL) in note for note in parsed.notes)
    request = to_plan_request(parsed, policy="openai:gpt-4o")
    # No concurrency given: the search chooses it (None), and the assumptions say so.
    assert (request.workload.isl, request.workload.osl, request.workload.batch) == (DEFAULT_ISL, DEFAULT_OSL, None)
    assert any(line.startswith("sequences in flight: not given") for line in request.assumptions)
    assert (request.workload.objective, request.workload.tpot_ms) == ("goodput", 30.0)
    assert (request.weight_dtype, request.kv_dtype, request.policy) == ("fp8", "fp8", "openai:gpt-4o")
    assert to_plan_request(parse_request("Qwen3-32B on 4 H100s")).workload.objective == "latency"


def test_parsed_request_forbids_unknown_keys() -> None:
    with pytest.raises(ValidationError):
        ParsedRequest.model_validate({"model": "x", "colour": "red"})


def test_module_examples() -> None:
    assert doctest.testmod(parse_module).failed == 0
    assert doctest.testmod(asking_module).failed == 0


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="abcdefhiklmnoprstuvwxyz0123456789 .,-/x<>kKHV", max_size=80))
def test_any_text_parses_without_raising(text: str) -> None:
    parsed = parse_request(text, previous=parse_request(HEADLINE))
    assert parsed.model is not None and parsed.gpu is not None  # a follow-up never loses what was said




@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(GRAMMAR_WORDS), min_size=2, max_size=25), st.booleans())
def test_any_sentence_of_the_grammars_words_parses_without_raising(words: list[str], follow_up: bool) -> None:
    """Word-level: the readers' own words in any order and with any numbers ("eagle 0" once raised a
    validation error from the draft-token count)."""
    parse_request(" ".join(words), previous=parse_request(HEADLINE) if follow_up else None)


def test_a_draft_count_out_of_range_after_the_drafter_is_ignored_with_a_note() -> None:
    parsed = parse_request("Llama 3.1 70B on 8 H100 with eagle 0, 2 accepted")
    assert parsed.spec_method == "eagle" and parsed.spec_tokens is None
    assert any("from 1 to" in note for note in parsed.notes)


# ------------------------------------------------------------------------ speculative decoding, prefix reuse


def test_speculation_and_prefix_reach_the_request_with_their_words_echoed() -> None:
    parsed = parse_request("Llama 3.1 70B on 4 H100, 8k prompts, EAGLE-3 with 3 draft tokens, accept length 2.6, "
                           "a 2k-token system prompt shared by all requests")
    request = to_plan_request(parsed)
    spec = request.workload.speculation
    assert spec is not None and (spec.method, spec.draft_tokens, spec.accepted) == ("eagle", 3, 1.6)
    assert request.workload.prefix_hit == 0.25  # 2048 of 8192 prompt tokens
    said = " ".join(request.assumptions)
    assert "'accept length 2.6' as 1.6 accepted" in said and "length - 1" in said
    assert "'eagle-3'" in said and "'3 draft tokens'" in said
    assert "2048-token shared prefix of the 8192-token prompt" in said


def test_speculation_without_an_acceptance_asks_for_it_and_never_assumes_one() -> None:
    parsed = parse_request("Llama 3.1 70B on 4 H100 with eagle, 3 draft tokens")
    assert missing_fields(parsed) == ["spec_accept"]
    with pytest.raises(InputError) as caught:
        to_plan_request(parsed)
    assert caught.value.field == "spec_accept" and "accepted per step" in (caught.value.fix or "")
    answered = to_plan_request(parse_request("2 accepted tokens", parsed))
    assert answered.workload.speculation is not None and answered.workload.speculation.accepted == 2.0


def test_mtp_without_a_count_drafts_with_the_models_mtp_layers_when_they_hold_the_acceptance() -> None:
    one = to_plan_request(parse_request("DeepSeek-V3 on 8 H200, mtp, 0.8 accepted"))
    assert one.workload.speculation is not None and one.workload.speculation.draft_tokens == 1
    assert any("num_nextn_predict_layers" in line for line in one.assumptions)
    # Two accepted drafts need at least two draft tokens, more than DeepSeek-V3's one MTP layer: ask.
    assert missing_fields(parse_request("DeepSeek-V3 on 8 H200, MTP with 2 accepted tokens")) == ["spec_tokens"]



def test_an_acceptance_rate_waits_for_the_draft_tokens() -> None:
    rate_only = parse_request("Llama 3.1 70B on 8 H100 with eagle, acceptance rate 70%")
    assert rate_only.spec_accept is None and "spec_accept" in missing_fields(rate_only)
    assert any("share of draft tokens accepted" in note for note in rate_only.notes)
    assert parse_request("4 draft tokens, acceptance rate 70%", rate_only).spec_accept == pytest.approx(2.8)


def test_figures_without_a_drafter_ask_for_one_and_bad_shares_are_ignored_with_a_note() -> None:
    assert missing_fields(parse_request("Llama 3.1 70B on 8 H100, 2 accepted tokens")) == ["spec_method"]
    full = parse_request("Llama 3.1 8B on 1 H100, 100% of the prompt is a shared system prompt")
    assert full.prefix_hit is None and any("below 1" in note for note in full.notes)


def test_a_shared_prefix_as_long_as_the_prompt_is_an_input_error() -> None:
    parsed = parse_request("Llama 3.1 8B on 1 H100, 1k prompts, a 2k-token system prompt")
    with pytest.raises(InputError) as caught:
        to_plan_request(parsed)
    assert caught.value.field == "prefix_hit"


def test_the_draft_model_is_not_read_as_the_model_to_plan() -> None:
    parsed = parse_request("Llama 3.1 70B on 8 H100, draft model llama-3.1-8b, 4 tokens, 2.5 accepted")
    assert parsed.model == "meta-llama/Llama-3.1-70B" and not parsed.contradictions
    request = to_plan_request(parsed)
    assert request.workload.speculation is not None
    assert request.workload.speculation.draft_model == "meta-llama/Llama-3.1-8B"
