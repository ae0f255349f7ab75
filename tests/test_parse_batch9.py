"""The chat reader's rules for the ninth batch of phrasings (tests/data/requests_batch9.yaml): slips, corrections in
one message, key=value rates, gaps between requests, headcounts, closed loops, trace files, pools, negated formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardplan.agent.parse.plan_request import gpu_types, to_plan_request
from shardplan.agent.parse.request import parse_request
from shardplan.agent.parse.typos import mend_typos
from shardplan.tools.planning.gpu_choice import parse_gpu_types


def test_one_slip_of_a_key_word_is_mended_and_said() -> None:
    parsed = parse_request("lama 3.1 70b on 8 h100s, 4k promts, 512 ouput tokens")
    assert (parsed.model, parsed.isl, parsed.osl) == ("meta-llama/Llama-3.1-70B", 4096, 512)
    assert "Read 'promts' as 'prompts'." in parsed.notes and "Read 'ouput' as 'output'." in parsed.notes


@pytest.mark.parametrize("text", ["match the batch", "mistral 7b", "the outputs and inputs", "a token", "in out bs"])
def test_real_words_and_short_words_are_left_alone(text: str) -> None:
    assert mend_typos(text) == (text, [])


def test_a_correction_in_the_message_replaces_instead_of_contradicting() -> None:
    corrected = parse_request("Llama 3.1 70B on 8 H100s, 2k/256, actually make it 16 GPUs")
    assert (corrected.gpus, corrected.gpu, corrected.isl, corrected.contradictions) == (16, "H100", 2048, [])
    assert any("'actually' as a correction" in note for note in corrected.notes)
    meant = parse_request("llama 8b on one H100, 4k prompts - sorry, I meant 8k prompts - 512 out")
    assert (meant.isl, meant.osl, meant.contradictions) == (8192, 512, [])
    # without a correction word the two counts are still a contradiction to ask about
    assert parse_request("Llama 3.1 70B on 8 H100s, 2k/256, 16 GPUs").contradictions


def test_a_correction_keeps_the_thread_and_the_earlier_pieces_notes() -> None:
    thread = parse_request("Qwen3-32B on 4 H100 at 10 req/s, 1k/256")
    parsed = parse_request("lama 70b please, oops, on 8 GPUs", thread)
    assert (parsed.model, parsed.gpus, parsed.rate, parsed.isl) == ("meta-llama/Llama-3.1-70B", 8, 10.0, 1024)
    assert "Read 'lama' as 'llama'." in parsed.notes


@pytest.mark.parametrize(("text", "rate"), [
    ("llama 3.1 8b 1xH100 isl=3000 osl=300 qps=25", 25.0),
    ("llama 70b on 8 H100, 2k/256, 1 req every 100 ms", 10.0),
    ("llama 70b on 8 H100, a request every 2 seconds", 0.5),
    ("llama 70b on 8 H100, 30 requests every minute", 0.5),
])
def test_rates_after_their_sign_and_as_gaps(text: str, rate: float) -> None:
    assert parse_request(text).rate == rate


@pytest.mark.parametrize("text", ["llama 70b on 8 H100, 99999999999 rps",
                                  "llama 70b on 8 H100, 1000000000 requests every 1 ms",
                                  "llama 70b on 8 H100, 1 request every 100000000 minutes"])
def test_a_rate_past_the_range_is_left_out_with_a_note_not_a_traceback(text: str) -> None:
    """The plan's request bounds the rate (1e-6 to 1e8 requests/s): the reader leaves a rate outside it out and says
    so, where it used to hand it on and fail the request's own validation (a ValidationError from the chat)."""
    parsed = parse_request(text)
    assert parsed.rate is None
    assert any("a rate runs from 1e-06" in note for note in parsed.notes)


@pytest.mark.parametrize(("text", "note"), [("llama 70b on 8 H100 at 1e-9 rps", "was not used"),
                                            ("llama 70b on 8 H100 at -5 rps", "was not used"),
                                            ("llama 70b on 8 H100 at 1e+9 rps", "a rate runs from 1e-06")])
def test_a_rate_after_a_sign_or_an_exponent_is_not_read_as_its_last_digits(text: str, note: str) -> None:
    """'1e-9 rps' was read as 9 requests/s and '-5 rps' as 5; the figure is now left unread, and its note says so
    ('1e+9 rps' is a billion requests/s, past the range a rate takes)."""
    parsed = parse_request(text)
    assert parsed.rate is None
    assert any(note in line for line in parsed.notes)


def test_key_value_lengths_keep_their_own_figures() -> None:
    parsed = parse_request("llama 3.1 8b 1xH100 isl=3000 osl=300 qps=25")
    assert (parsed.isl, parsed.osl) == (3000, 300)


def test_k_counts_people_in_thousands_and_tokens_in_1024s() -> None:
    parsed = parse_request("gpt-oss-120b on 1 H200, 1k users, 1k prompts")
    assert (parsed.batch, parsed.isl) == (1000, 1024)


def test_a_closed_loop_said_with_ing_verbs_and_the_previous_reply() -> None:
    parsed = parse_request("gpt-oss-120b on 4x H200 for ~1k users, each firing a new request right after the "
                           "previous reply")
    assert (parsed.batch, parsed.arrival) == (1000, "closed:1000")


def test_a_figure_alone_in_a_bracket_is_its_nouns() -> None:
    assert parse_request("llama 8b on 1 h100, answers are short (~150), prompts ~2k").osl == 150
    assert parse_request("llama 8b on 1 h100, answers are short (~150 ms)").osl is None


def test_a_trace_file_is_read_as_written_and_replayed(tmp_path: Path) -> None:
    trace = tmp_path / "Prod_Oct.jsonl"
    trace.write_text('{"input_tokens": 1000, "output_tokens": 200}\n{"input_tokens": 3000, "output_tokens": 400}\n')
    parsed = parse_request(f"llama 8b on one L40S, replay our trace at {trace} at 2 qps")
    assert parsed.trace == str(trace) and parsed.rate == 2.0
    request = to_plan_request(parsed)
    assert (request.workload.isl, request.workload.osl) == (2000, 300)


def test_a_json_path_without_trace_words_is_not_a_trace() -> None:
    assert parse_request("llama 70b on 8 h100 with eagle, head at ./heads/config.json").trace is None


def test_spec_tokens_and_approximate_or_relative_prefix_shares() -> None:
    spec = parse_request("Llama 3.1 70B on 4 H100, draft model llama 3.1 8b with 4 spec tokens, 2 accepted")
    assert (spec.spec_tokens, spec.spec_accept) == (4, 2.0)
    assert parse_request("Qwen3 32B on 2 H200, prefix cache hit rate ~70%").prefix_hit == 0.7
    assert parse_request("Llama 3.1 8B on 1 H100, prompts 2k, 80% of which hit the prefix cache").prefix_hit == 0.8


def test_any_gpu_plans_every_priced_type() -> None:
    parsed = parse_request("cheapest way to serve llama 70b at 15 req/s, any GPU is fine")
    assert parsed.gpu == "any" and gpu_types(parsed) == parse_gpu_types("any")
    assert len(gpu_types(parsed)) > 1


def test_latency_said_as_what_matters_most() -> None:
    assert parse_request("llama 70b on 8 h100, latency matters most").objective == "latency"


@pytest.mark.parametrize("text", ["Llama 3.1 70B on 8 H100, no fp8", "Llama 3.1 70B on 8 H100, not fp8 kv cache"])
def test_a_format_ruled_out_sets_none(text: str) -> None:
    parsed = parse_request(text)
    assert (parsed.weight_dtype, parsed.kv_dtype) == (None, None)
    assert any("ruling that format out" in note for note in parsed.notes)


def test_dimensions_joined_by_plus_are_both_required() -> None:
    assert sorted(parse_request("qwen3 235b on 16 H100, DP attention + EP").constraints) == ["adp>=2", "ep>=2"]


def test_two_pools_are_one_disaggregated_deployment_on_their_sum() -> None:
    parsed = parse_request("DeepSeek-V3 on H200: prefill on 4 H200s and decode on 12 H200s")
    assert (parsed.disaggregated, parsed.gpus, parsed.contradictions) == (True, 16, [])
    assert any("search's choice" in note for note in parsed.notes)
    # pools that do not add up to the count said are asked about
    assert parse_request("DeepSeek-V3 on 16 H200, prefill on 4 GPUs, decode on the other 4").contradictions


def test_a_correction_settles_the_contradiction_it_answers() -> None:
    settled = parse_request("Llama 3.1 70B on 8 H100 and 16 H100 - sorry, I meant 16 GPUs")
    assert (settled.gpus, settled.contradictions) == (16, [])
    unsettled = parse_request("Llama 3.1 70B on 8 H100 and 16 H100 - sorry, 4k prompts")
    assert unsettled.contradictions and unsettled.isl == 4096


def test_a_thousand_users_is_said() -> None:
    assert any("k as a thousand" in note for note in parse_request("llama 8b on 1 h100, 1k users").notes)


def test_a_count_before_a_choice_of_types_is_the_budget() -> None:
    parsed = parse_request("llama 70b on 8 h100 or h200")
    assert (parsed.gpu, parsed.gpus, parsed.contradictions) == ("H100,H200", 8, [])
