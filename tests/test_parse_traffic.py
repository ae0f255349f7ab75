"""Reading the engine features and the traffic from plain words: MTP on a model without MTP layers, a bundled trace
named by what it is, and lengths given as a range."""

from __future__ import annotations

import pytest

from shardplan.agent.parse.request import missing_fields, parse_request, to_plan_request
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
