"""Reading the engine features and the traffic from plain words: MTP on a model without MTP layers, a bundled trace
named by what it is, and lengths given as a range."""

from __future__ import annotations

import pytest

from shardplan.agent.parse.plan_request import missing_fields, to_plan_request
from shardplan.agent.parse.request import parse_request
from shardplan.errors import InputError


def test_mtp_on_a_model_without_mtp_layers_says_so_instead_of_asking_for_a_count() -> None:
    parsed = parse_request("Mixtral 8x7B on 2 A100 with MTP, 2 accepted tokens")
    assert missing_fields(parsed) == []
    with pytest.raises(InputError) as caught:
        to_plan_request(parsed)
    assert caught.value.field == "spec" and "has no MTP layers" in str(caught.value)


def test_a_bundled_trace_named_in_words_gives_the_traffic_its_lengths_and_the_echo_its_words() -> None:
    request = to_plan_request(parse_request("Llama 3.1 70B on 8 H100, the Azure conversation trace at 3 req/s"))
    traffic = request.workload.traffic
    assert traffic is not None and traffic.trace == "azure-conv" and request.workload.rate == 3.0
    # its mean lengths, not the defaults, and said so
    assert (request.workload.isl, request.workload.osl) == (1161, 258)
    assert any("the mean of trace 'azure-conv'" in line for line in request.assumptions)
    follow_up = parse_request("same, but the azure code trace", parse_request("Llama 3.1 8B on 1 H100"))
    assert follow_up.trace == "azure-code"


def test_a_range_of_lengths_is_a_uniform_distribution_whose_mean_stands_for_the_length() -> None:
    said = "Llama 3.1 8B on 1 H100, prompts of 1k to 8k tokens, outputs 100-500 tokens"
    request = to_plan_request(parse_request(said))
    traffic = request.workload.traffic
    assert traffic is not None and traffic.isl is not None and traffic.osl is not None
    assert (traffic.isl.low, traffic.isl.high, traffic.osl.low, traffic.osl.high) == (1024, 8192, 100, 500)
    assert (request.workload.isl, request.workload.osl) == (4608, 300)
    # "A and B" is a range only after "between": two lengths of two nouns stay apart
    apart = parse_request("Llama 3.1 8B on 1 H100, prompts of 1,000 tokens and 1k outputs")
    assert (apart.isl, apart.osl, apart.isl_dist) == (1000, 1024, None)


def test_a_lognormal_in_words_is_drawn_with_its_cv_and_a_mean_alone_is_the_length_with_a_note() -> None:
    request = to_plan_request(parse_request(
        "Llama 3.1 8B on 1 H100, prompt lengths are lognormal with mean 3k and cv 0.5, outputs 200 tokens"))
    traffic = request.workload.traffic
    assert traffic is not None and traffic.isl is not None
    assert (traffic.isl.kind, traffic.isl.mean, traffic.isl.cv) == ("lognormal", 3072, 0.5)
    alone = parse_request("Llama 3.1 8B on 1 H100, prompts are lognormal around 3k tokens")
    assert (alone.isl, alone.isl_dist) == (3072, None)
    assert any("give its spread" in note for note in alone.notes)


def test_a_cv_after_bursty_sets_the_gamma_gaps_and_one_out_of_bounds_is_ignored_with_a_note() -> None:
    assert parse_request("Llama 3.1 8B on 1 H100, bursty traffic (cv 4), 3 qps").arrival == "gamma:cv=4"
    wild = parse_request("Llama 3.1 8B on 1 H100, bursty traffic with a cv of 80, 3 qps")
    assert wild.arrival == "gamma:cv=3"
    assert any("at most 50" in note for note in wild.notes)


def test_a_closed_loop_in_words_takes_its_count_of_users_and_without_one_asks_for_it() -> None:
    said = "Llama 3.1 8B on 1 H100, 96 users, each sends its next request when the previous one completes"
    assert parse_request(said).arrival == "closed:96"
    # without the closed-loop words, "96 users" alone is not a count of clients
    assert parse_request("Llama 3.1 8B on 1 H100, 96 users").arrival is None
    uncounted = parse_request("Llama 3.1 8B on 1 H100 in a closed loop")
    assert uncounted.arrival is None and any("how many users" in note for note in uncounted.notes)


def test_a_share_of_requests_is_the_percentile_a_target_holds_for() -> None:
    parsed = parse_request("Llama 3.1 8B on 1 A100, 99% of requests must get the first token within 300 ms")
    assert (parsed.slo_percentile, parsed.ttft_ms) == ("p99", 300)
    # a share of the prompt is a prefix hit, not a percentile
    assert parse_request("Llama 3.1 8B on 1 A100, 50% of prompts are a shared system prompt").slo_percentile is None


def test_the_mean_said_against_a_percentile_replaces_it_and_a_set_aside_percentile_is_not_read() -> None:
    first = parse_request("Llama 3.1 8B on 1 H100, p99 TTFT under 500 ms, 10 qps")
    assert parse_request("try the mean instead of p99", first).slo_percentile == "mean"
    assert parse_request("now the mean TTFT under 1 s", first).slo_percentile == "mean"
    # the mean of a length or of an acceptance is not a percentile
    assert parse_request("what if the mean acceptance length were 3", first).slo_percentile == "p99"
