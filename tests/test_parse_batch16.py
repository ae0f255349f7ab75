"""The chat reader's rules for the sixteenth batch of phrasings (tests/data/requests_batch16.yaml): percentiles and the
tail, figures that are no target or length, rates per minute and at the peak, closed loops, length spreads, traces by
kind, acceptance in its several conventions, and prefixes said as a part of the prompt."""

from __future__ import annotations

import pytest

from shardplan.agent.parse.plan_request import to_plan_request
from shardplan.agent.parse.request import parse_request


@pytest.mark.parametrize(("text", "percentile"), [
    ("99%ile TTFT 3s", "p99"),
    ("95th %ile ttft under 2 s", "p95"),
    ("Keep tail latency in check: TTFT < 1 s and ITL < 30 ms at the tail", "p99"),
    ("TTFT target 1 s (mean)", "mean"),
])
def test_percentile_forms(text: str, percentile: str) -> None:
    assert parse_request(text).slo_percentile == percentile


def test_the_tail_without_a_figure_is_p99_and_says_so() -> None:
    parsed = parse_request("llama 8b on 1 h100, keep tail latency low, ttft 1 s")
    assert parsed.slo_percentile == "p99" and any("as P99" in note for note in parsed.notes)


@pytest.mark.parametrize("text", [
    "got paged for p99 disk latency on the storage tier. Llama 3.1 70B on 8 H200, 2k/512",
    "our prompts average 2k tokens but the p99 prompt is 16k. llama 8b on 2 L40S",
])
def test_a_percentile_of_something_else_is_no_target(text: str) -> None:
    parsed = parse_request(text)
    assert parsed.slo_percentile is None and parsed.contradictions == []


def test_a_length_percentile_is_not_a_second_prompt_length() -> None:
    parsed = parse_request("our prompts average 2k tokens but the p99 prompt is 16k, llama 8b on 2 L40S")
    assert parsed.isl == 2048 and any("percentile of the lengths" in note for note in parsed.notes)


def test_years_and_ports_are_no_lengths() -> None:
    parsed = parse_request("We launch in 2025 Q3. Plan qwen3-30b-a3b on 1 H100 for 4k-token prompts and 512-token "
                           "answers; endpoint will be on port 8000")
    assert (parsed.isl, parsed.osl, parsed.contradictions) == (4096, 512, [])


def test_figures_in_scientific_notation() -> None:
    parsed = parse_request("llama 8b 1xH100, 2e3 in / 5e2 out")
    assert (parsed.isl, parsed.osl) == (2000, 500)


@pytest.mark.parametrize(("text", "rate"), [
    ("we see about 1200 RPM at peak, llama 8b on 2 L40S", 20.0),
    ("diurnal load, troughs ~2 rps, peaks ~20 rps; size for the peak", 20.0),
    ("2 rps at night and 15 rps in the day", 15.0),
])
def test_rates_per_minute_and_at_the_peak(text: str, rate: float) -> None:
    parsed = parse_request(text)
    assert (parsed.rate, parsed.contradictions) == (rate, [])


def test_a_rate_said_again_otherwise_must_agree() -> None:
    assert parse_request("10 rps (i.e. 600 per minute)").contradictions == []
    assert parse_request("10 requests per second (i.e. 60 per minute)").contradictions


def test_a_named_burstiness_wins_over_the_bare_word() -> None:
    parsed = parse_request("traffic is bursty (gamma arrivals, CV≈2.5), ~6 req/s average")
    assert (parsed.arrival, parsed.contradictions) == ("gamma:cv=2.5", [])


@pytest.mark.parametrize(("text", "arrival"), [
    ("200 users in parallel, each one sends the next prompt as soon as it gets its answer", "closed:200"),
    ("genai-perf run with --concurrency 64 against qwen3-235b on 8 h200", "closed:64"),
])
def test_closed_loops(text: str, arrival: str) -> None:
    assert parse_request(text).arrival == arrival


@pytest.mark.parametrize(("text", "isl", "isl_dist", "osl", "osl_dist"), [
    ("ISL uniform in [1k, 8k], OSL fixed 256", None, "uniform:1024,8192", 256, None),
    ("prompts lognormal with mean 2k and cv 1.5; outputs also lognormal, mean 300 cv 0.5.", None,
     "lognormal:mean=2048,cv=1.5", None, "lognormal:mean=300,cv=0.5"),
    ("outputs ~N(512, 128), inputs fixed at 1024.", 1024, None, None, "lognormal:mean=512,cv=0.25"),
    ("avg prompt 3000 tok (std 600), avg output 250 tok (std 50)", None, "lognormal:mean=3000,cv=0.2", None,
     "lognormal:mean=250,cv=0.2"),
])
def test_length_spreads_and_fixed_lengths(text: str, isl: int | None, isl_dist: str | None, osl: int | None,
                                          osl_dist: str | None) -> None:
    parsed = parse_request(text)
    assert (parsed.isl, parsed.isl_dist, parsed.osl, parsed.osl_dist) == (isl, isl_dist, osl, osl_dist)


def test_a_normal_spread_is_drawn_as_a_lognormal_and_says_so() -> None:
    parsed = parse_request("outputs ~N(512, 128)")
    assert any("not normal ones" in note for note in parsed.notes)


def test_a_fixed_length_and_a_range_of_the_same_lengths_contradict() -> None:
    assert parse_request("qwen3-32b on 2 H100, ISL fixed at 2048, prompts uniformly 500–3000 tokens").contradictions


def test_a_fixed_length_in_a_follow_up_replaces_the_spread() -> None:
    thread = parse_request("llama 8b on 1 h100, outputs between 100 and 400 tokens")
    parsed = parse_request("outputs are fixed at 256 actually", thread)
    assert (parsed.osl, parsed.osl_dist) == (256, None)


@pytest.mark.parametrize(("text", "trace"), [
    ("use the 2023 Azure LLM inference trace (coding one) at its native rate, deepseek v3 on 16 H200", "azure-code"),
    ("the azure 2024 trace, conversation", "azure-conv"),
])
def test_traces_named_with_their_kind_after(text: str, trace: str) -> None:
    assert parse_request(text).trace == trace


def test_a_trace_by_its_kind_in_a_follow_up() -> None:
    thread = parse_request("llama 8b on 1 h100, azure conv trace at 2 rps")
    assert parse_request("try the code trace instead", thread).trace == "azure-code"


@pytest.mark.parametrize(("text", "accept"), [
    ("Llama 3.1 70B on 8 H100 with EAGLE-3, 4 draft tokens, acceptance length ~2.8 as vLLM reports it", 1.8),
    ("use llama 3.1 8b as the draft for llama 3.1 405b, k=5, acceptance rate 60%. 16 H100", 3.0),
    ("EAGLE on gpt-oss-120b, num_speculative_tokens=3, τ = 3.1 (mean acceptance length)", 2.1),
])
def test_acceptance_in_its_conventions(text: str, accept: float) -> None:
    assert parse_request(text).spec_accept == pytest.approx(accept)


def test_a_draft_model_drafting_for_the_target() -> None:
    parsed = parse_request("Qwen3-8B drafting for Qwen3-32B, 4 tokens per step, on average 2.2 of the draft tokens "
                           "get accepted. 2 H100")
    assert (parsed.model, parsed.spec_method, parsed.spec_tokens, parsed.spec_accept, parsed.contradictions) == (
        "Qwen/Qwen3-32B", "draft:Qwen/Qwen3-8B", 4, 2.2, [])


def test_speculation_disabled_beside_a_drafter_is_asked_back() -> None:
    parsed = parse_request("Llama 3.1 8B on 1 H100, speculative decoding disabled, EAGLE with 4 draft tokens")
    assert parsed.contradictions


def test_comparing_against_no_speculation_plans_the_drafter() -> None:
    parsed = parse_request("compare EAGLE-3 (K=4, accept length 3.0) against no speculation for llama 70b on 4 H100")
    assert (parsed.intent, parsed.spec_method, parsed.spec_tokens, parsed.spec_accept, parsed.contradictions) == (
        "compare", "eagle", 4, 2.0, [])


def test_a_drafter_without_acceptance_asks_for_it() -> None:
    parsed = parse_request("spec decode with eagle, K=3, qwen3-32b on 1 H200, we haven't measured acceptance yet")
    assert parsed.spec_accept is None and any("measured acceptance" in note for note in parsed.notes)


@pytest.mark.parametrize(("text", "fields"), [
    ("1k shared system prompt + ~1k-token user messages, 200-token replies", {"isl": 2048, "prefix_tokens": 1024}),
    ("every prompt starts with the same 2k-token instruction block, then retrieved chunks", {"prefix_tokens": 2048}),
    ("roughly 80% of prompt tokens are already in the prefix cache", {"prefix_hit": 0.8}),
    ("prefix caching is off (each RAG query has unique docs)", {"prefix_hit": 0.0}),
])
def test_prefixes(text: str, fields: dict[str, float]) -> None:
    parsed = parse_request(text)
    assert {name: getattr(parsed, name) for name in fields} == fields


def test_no_cache_hits_in_a_follow_up() -> None:
    thread = parse_request("every request carries the same 3k-token system prompt; total prompts are 4k. llama 70b")
    parsed = parse_request("now assume no cache hits", thread)
    assert (parsed.prefix_hit, parsed.prefix_tokens) == (0.0, None)


def test_traffic_that_doubles() -> None:
    thread = parse_request("llama 70b on 8 h100 at 12 rps, 2k/256")
    assert parse_request("what if traffic doubles?", thread).rate == 24.0


def test_nodes_of_any_gpu_type_ask_for_the_node_size() -> None:
    """Found by the chat fuzzer: nodes with "any GPU" looked the node size up under the name 'any' (a KeyError)."""
    parsed = parse_request("deepseek v3 on 2 nodes, any gpu is fine")
    assert (parsed.gpu, parsed.nodes, parsed.gpus) == ("any", 2, None)
    assert any("say how many GPUs each node has" in note for note in parsed.notes)
    # the plan request counts the first type by its usual node, and says so
    assert to_plan_request(parsed).gpus == 16
