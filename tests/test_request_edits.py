"""Follow-ups that edit the thread's last request, fleet questions, and the answer's echo of what it read."""

from __future__ import annotations

from shardplan.agent.parse.echo import reading_lines
from shardplan.agent.parse.plan_request import gpu_types, to_plan_request
from shardplan.agent.parse.request import parse_request


def _thread(*messages: str):  # type: ignore[no-untyped-def]
    parsed = None
    for message in messages:
        parsed = parse_request(message, parsed)
    return parsed


def test_scaling_edits_apply_to_the_last_request_of_the_thread() -> None:
    base = "Llama 3.1 70B on 8 H100 at 20 requests/s, batch 32, 4k/512, TTFT under 1 s"
    assert _thread(base, "double the batch").batch == 64
    assert _thread(base, "double the batch", "double the batch again").batch == 128
    assert _thread(base, "halve the rate").rate == 10.0
    assert _thread(base, "halve the prompt length").isl == 2048
    assert _thread(base, "double the GPUs").gpus == 16
    edited = _thread(base, "switch to 4 B200s and halve the batch")
    assert (edited.gpu, edited.gpus, edited.batch, edited.ttft_ms) == ("B200", 4, 16, 1000.0)


def test_a_drop_clears_the_field_and_says_so() -> None:
    dropped = _thread("Llama 3.1 70B on 8 H100, TTFT under 500 ms, TPOT 30 ms", "drop the TTFT target")
    assert (dropped.ttft_ms, dropped.tpot_ms) == (None, 30.0)
    assert any("Dropped the TTFT target (500)" in note for note in dropped.notes)
    both = _thread("Llama 3.1 70B on 8 H100, TTFT under 500 ms, TPOT 30 ms", "drop the latency targets")
    assert (both.ttft_ms, both.tpot_ms) == (None, None)


def test_an_edit_of_what_the_thread_never_said_is_noted_not_guessed() -> None:
    parsed = _thread("Llama 3.1 70B on 8 H100", "double the batch")
    assert parsed.batch is None
    assert any("no batch to double" in note for note in parsed.notes)


def test_a_value_said_outright_wins_over_an_edit_of_it() -> None:
    assert _thread("Llama 3.1 70B on 8 H100, batch 32", "halve the batch, batch 12").batch == 12


def test_fleet_questions_read_a_choice_of_types_and_a_price() -> None:
    choice = parse_request("cheapest way to serve 30 req/s of Llama-70B: H100 or H200?")
    assert gpu_types(choice) == ["H100", "H200"] and not choice.contradictions and choice.rate == 30.0
    assert to_plan_request(choice).gpu == "H100"  # one request; the chat plans each type of the choice
    priced = parse_request("Llama 3.1 70B on 8 H100 at $2.5/h for H100, 2k/256")
    assert priced.gpu_price == 2.5
    request = to_plan_request(priced)
    assert request.price is not None and request.price.usd_per_gpu_hour == 2.5 and request.price.gpu == "H100"
    assert parse_request("Llama 3.1 70B on H100 and H200, 8 GPUs").contradictions  # "and" is not a choice


def test_the_echo_states_every_field_read_with_its_words_and_the_assumptions() -> None:
    parsed = parse_request("Llama 70B on 2 nodes of 8 H100, prompts are long, ~16k tokens, no PP")
    read, assumed = reading_lines(parsed)
    assert "prompt length 16384 tokens from 'prompts are long, ~16k tokens'" in read
    assert "GPUs 16 from '2 nodes of 8 h100'" in read and "constraint pp=1 from 'no pp'" in read
    assert assumed.startswith("Assumed: output length 256 tokens (not said)")
    follow = parse_request("double the output length", parse_request("Llama 70B on 8 H100, 1k outputs"))
    lines = reading_lines(follow)
    assert lines[0] == "Read: output length 2048 tokens from 'double the output length'."
    assert lines[1].startswith("Kept from the thread: model meta-llama/Llama-3.1-70B; GPU H100; GPUs 8")
