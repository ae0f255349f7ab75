"""The chat reader's rules for the tenth batch of phrasings (tests/data/requests_batch10.yaml): rates by the day and
the hour with k and M counts, approximate acceptance, prefix caching said without a verb, and GPUs the catalog lacks."""

from __future__ import annotations

import pytest

from shardplan.agent.parse.request import parse_request

READINGS = [
    # rates by the day and the hour, k a thousand and M a million ("2M requests a day" was a batch of 2,000,000)
    ("llama 8b on 1 H100, about 2M requests a day", "rate", 2e6 / 86400),
    ("llama 8b on 1 H100, 864k requests/day", "rate", 10.0),
    ("llama 8b on 1 H100, ~36k requests an hour", "rate", 10.0),
    ("llama 8b on 1 H100 at 1.2k requests per minute", "rate", 20.0),
    ("llama 8b on 1 H100, 1k rps", "rate", 1000.0),
    ("llama 8b on 1 H100, qps=1.5k", "rate", 1500.0),
    # an approximate acceptance ("acceptance ~80%" was left unused)
    ("DeepSeek-V3 on 16 H200 with mtp:1, acceptance rate about 70%", "spec_accept", 0.7),
    ("DeepSeek-V3 on 16 H200, MTP with 2 draft tokens, acceptance ~80%", "spec_accept", 1.6),
    # a cached share of the prompt needs no verb ("60% of each prompt cached" was left unused)
    ("llama 70b on 4 H100 at 3 rps with 60% of each prompt cached", "prefix_hit", 0.6),
    ("llama 8b on 1 h100, half of each prompt cached, 2k/256", "prefix_hit", 0.5),
    # durations said in words ("first token within half a second" was read as nothing, without a note)
    ("llama 70b on 8 h100, first token within half a second", "ttft_ms", 500.0),
    ("llama 70b on 8 h100, ttft under two seconds", "ttft_ms", 2000.0),
    ("llama 70b on 8 h100, ttft under a second", "ttft_ms", 1000.0),
    ("llama 70b on 8 h100, ttft within a quarter of a second", "ttft_ms", 250.0),
]


@pytest.mark.parametrize(("text", "field", "value"), READINGS)
def test_the_batch10_phrasings_read_as_people_mean_them(text: str, field: str, value: float) -> None:
    parsed = parse_request(text)
    assert getattr(parsed, field) == pytest.approx(value)
    assert parsed.batch is None  # "2M requests a day" was read as 2,000,000 requests in flight


@pytest.mark.parametrize(("text", "name"), [
    ("llama 8b on 1 L4, 1k/256", "L4"), ("llama 8b on 8 V100s", "V100"), ("llama 8b on 4 RTX 4090", "RTX 4090"),
    ("llama 8b on 2 A10G.", "A10G"), ("llama 8b on 1 MI325X", "MI325X"), ("llama 8b on 4 nvidia L40 gpus", "L40"),
])
def test_a_gpu_outside_the_catalog_is_named_not_left_as_an_unexplained_count(text: str, name: str) -> None:
    """A GPU without specs in the catalog cannot be planned for; the reader used to drop it silently and say only
    that its count was not used."""
    parsed = parse_request(text)
    assert parsed.gpu is None and parsed.gpus is None
    assert any(f"the {name} is not in shardplan's GPU catalog" in note and "--cluster FILE" in note
               for note in parsed.notes), parsed.notes
    assert not any("was not used" in note for note in parsed.notes)


def test_catalogued_gpus_beside_an_uncatalogued_one_are_still_read() -> None:
    parsed = parse_request("llama 8b on 8 l40s, or 8 H800?")
    assert (parsed.gpu, parsed.gpus) == ("L40S", 8)
    assert any("the H800 is not in shardplan's GPU catalog" in note for note in parsed.notes)


@pytest.mark.parametrize(("text", "constraints"), [
    ("llama 70b on 8 h100, two replicas", ["dp=2"]),
    ("llama 70b on 8 h100, 2 replicas of tp=4", ["tp=4", "dp=2"]),
    ("llama 70b on 8 h100, 2 replicas of 4 GPUs", ["dp=2", "gpus-per-replica=4"]),
    ("llama 70b on 16 h100 as 4 model replicas", ["dp=4"]),
    ("llama 70b on 8 h100, 1 replica", ["dp=1"]),
])
def test_a_count_of_replicas_is_the_data_parallel_degree(text: str, constraints: list[str]) -> None:
    """"two replicas" was left out without a note, and "2 replicas of tp=4" left its 2 unused."""
    parsed = parse_request(text)
    assert sorted(parsed.constraints) == sorted(constraints)
    assert not any("was not used" in note for note in parsed.notes)


def test_instances_stay_machines_not_replicas() -> None:
    parsed = parse_request("llama 70b on 2 p5.48xlarge instances")
    assert (parsed.nodes, parsed.gpus, parsed.constraints) == (2, 16, [])


@pytest.mark.parametrize(("text", "constraints"), [
    ("mixtral 8x22b on 16 h100 over 2 nodes, ep=8 within a node, tp 2", ["ep=8", "ep-in-node", "tp=2"]),
    ("deepseek v3 on 16 h200, tp=8 inside the node, 2 nodes", ["tp=8", "tp-in-node"]),
    ("llama 405b on 32 h100, pp=4 across the nodes", ["pp=4", "pp-across-nodes"]),
])
def test_a_degree_with_its_place_is_both_constraints_not_a_node_count(text: str, constraints: list[str]) -> None:
    """"ep=8 within a node" gave ep=8 and read "a node" as a node count, which then contradicted "2 nodes"."""
    parsed = parse_request(text)
    assert sorted(parsed.constraints) == sorted(constraints)
    assert parsed.contradictions == []


@pytest.mark.parametrize(("follow_up", "field", "value"), [
    ("what if the outputs were 4x longer", "osl", 1024),
    ("prompts 2x shorter", "isl", 1024),
    ("10x the traffic", "rate", 40.0),
    ("make it 3 times the gpus", "gpus", 24),
    ("outputs twice as long", "osl", 512),
    ("prompts half as long", "isl", 1024),
    ("ttft 2x lower", "ttft_ms", 500.0),
])
def test_a_follow_up_scales_by_a_figure(follow_up: str, field: str, value: float) -> None:
    """"what if the outputs were 4x longer" left the outputs as they were and said nothing."""
    thread = parse_request("Llama 3.1 70B on 8 H100, 2k/256, 4 rps, ttft under 1 s")
    parsed = parse_request(follow_up, thread)
    assert getattr(parsed, field) == value
    assert any(note.startswith("Read '") and "times the" in note for note in parsed.notes), parsed.notes


def test_a_scaling_of_a_value_the_thread_never_set_asks_for_it() -> None:
    thread = parse_request("Llama 3.1 70B on 8 H100, 2k/256, 4 rps")
    parsed = parse_request("4x more users", thread)
    assert parsed.batch is None
    assert "There is no batch to scale by 4: say the value." in parsed.notes


def test_a_second_that_counts_is_not_a_duration() -> None:
    parsed = parse_request("llama 70b on 8 h100 and a second node, 2k/256")
    assert parsed.ttft_ms is None and parsed.tpot_ms is None


@pytest.mark.parametrize(("text", "constraints"), [
    ("llama 70b on 8 h100, 2P1D", ["prefill:dp=2", "decode:dp=1"]),
    ("llama 70b on 8 h100, 3p1d disagg, 4 rps", ["prefill:dp=3", "decode:dp=1"]),
    ("llama 405b on 16 h100, no tensor parallelism across nodes", ["tp-in-node"]),
    ("llama 70b on 8 h100, no EP across nodes", ["ep-in-node"]),
    ("llama 70b on 8 h100, TP shouldnt cross nodes", ["tp-in-node"]),
    ("llama 70b on 16 h100, TP must not span nodes", ["tp-in-node"]),
    ("llama 70b on 8 h100, no tp", ["tp=1"]),
])
def test_split_pool_notation_and_groups_kept_off_the_network(text: str, constraints: list[str]) -> None:
    """"2P1D" was not read at all; "no tensor parallelism across nodes" was read as no tensor parallelism (tp=1), and
    "TP must not span nodes" as sp=1."""
    parsed = parse_request(text)
    assert sorted(parsed.constraints) == sorted(constraints)
    assert parsed.disaggregated is (True if "p1d" in text.lower() else None)


def test_wide_ep_is_expert_parallelism_across_all_the_gpus() -> None:
    """"wide EP" was dropped without a note."""
    parsed = parse_request("qwen3 235b on 16 h200, wide EP, adp 16")
    assert sorted(parsed.constraints) == ["adp=16", "ep=16"]


@pytest.mark.parametrize("text", ["llama 8b on h100s, 1k prompts, 2 of them are long",
                                  "llama 70b on 8 h100, 4 replicas per node"])
def test_counts_of_other_things_are_not_gpus_or_replicas(text: str) -> None:
    """The readers added for "on 8 of them" and "two replicas" must not take "2 of them are long" as a GPU count or
    "4 replicas per node" as four replicas in all."""
    parsed = parse_request(text)
    assert parsed.gpus in (None, 8) and "dp=4" not in parsed.constraints
    assert any("was not used" in note for note in parsed.notes)
