"""The grammar of quantities (agent/parse/quantities.py): magnitudes, which noun a figure attaches to, and the
figures that belong to another noun."""

from __future__ import annotations

import pytest

from shardplan.agent.parse.quantities import attach, magnitude, tokenise
from shardplan.agent.parse.request import parse_request


def _read(text: str) -> dict[str, int]:
    readings, _ = attach(tokenise(text), text)
    return {r.field: r.value for r in readings}


@pytest.mark.parametrize(("text", "value"), [("300", 300), ("1k", 1024), ("16k", 16384), ("1.5k", 1536),
                                             ("2m", 2 * 1024 * 1024), ("0.5k", 512)])
def test_magnitudes_use_the_serving_convention(text: str, value: int) -> None:
    assert magnitude(text) == value


def test_tokens_separate_figures_units_nouns_and_approximators() -> None:
    kinds = [(t.kind, t.text) for t in tokenise("docs are ~6k tokens, 128 batch")]
    assert kinds == [("noun", "docs"), ("filler", "are"), ("filler", "~"), ("qty", "6k"), ("filler", "tokens"),
                     ("comma", ","), ("qty", "128"), ("noun", "batch")]
    assert [t.value for t in tokenise("about 1.5k") if t.kind == "qty"] == [1536]


@pytest.mark.parametrize(("text", "expected"), [
    ("prompts are long, ~16k tokens, answers are short (~300 tokens)", {"isl": 16384, "osl": 300}),
    ("docs are ~6k tokens, summaries ~400", {"isl": 6144, "osl": 400}),
    ("decode len 1k", {"osl": 1024}),
    ("short prompts (256 tokens), long generations (4k tokens)", {"isl": 256, "osl": 4096}),
    ("8k context, 512 max tokens", {"isl": 8192, "osl": 512}),
    ("2k token prompts with 8k token reasoning outputs", {"isl": 2048, "osl": 8192}),
    ("4k tokens of history and the bot writes 300", {"isl": 4096, "osl": 300}),
    ("128 batch", {"batch": 128}),
    ("concurrency 64", {"batch": 64}),
    ("100 req concurrency", {"batch": 100}),
    ("max batch size 48", {"batch": 48}),
    ("256 sequences in flight", {"batch": 256}),
    ("isl/osl 4k/1k", {"isl": 4096, "osl": 1024}),
])
def test_figures_attach_to_their_nouns(text: str, expected: dict[str, int]) -> None:
    assert _read(text) == expected


def test_a_figure_between_two_nouns_goes_where_each_noun_gets_one() -> None:
    assert _read("input 2048 output 256") == {"isl": 2048, "osl": 256}
    assert _read("8k prompts 1k outputs") == {"isl": 8192, "osl": 1024}
    assert _read("1k in / 256 out") == {"isl": 1024, "osl": 256}


def test_a_figure_that_belongs_to_another_noun_is_not_taken() -> None:
    # The 32 counts users: a comma may only be crossed by a figure in tokens.
    assert _read("prompts, 32 users") == {"batch": 32}
    # "8k" is the output's ("outputs 8k"), so "prompts" takes nothing across it.
    assert _read("prompts 2k outputs 8k") == {"isl": 2048, "osl": 8192}
    # "in" and "out" are words first: only a figure right next to them is theirs.
    assert _read("runs in 2 weeks") == {}
    assert _read("30/1 s") == {}


def test_a_count_of_requests_is_neither_a_length_nor_a_batch() -> None:
    text = "1000 requests of 2k tokens each"
    readings, counts = attach(tokenise(text), text)
    assert {r.field: r.value for r in readings} == {"isl": 2048} and counts == ["1000"]
    assert _read("16 concurrent requests of 8k tokens") == {"batch": 16, "isl": 8192}


def test_each_reading_keeps_its_words() -> None:
    text = "answers are short (~300 tokens), 64 users"
    readings, _ = attach(tokenise(text), text)
    assert [(r.field, r.words) for r in readings] == [("osl", "answers are short (~300 tokens)"),
                                                      ("batch", "64 users")]


def test_numbers_read_by_other_readers_are_not_lengths_or_batches() -> None:
    parsed = parse_request("Qwen3-32B on 4 H100, 2k prompts, 12 QPS, 200 output tokens, TTFT 800 ms")
    assert (parsed.isl, parsed.osl, parsed.rate, parsed.batch, parsed.ttft_ms, parsed.gpus) == \
        (2048, 200, 12.0, None, 800.0, 4)
    assert parse_request("Llama 3.1 70B on 8 H100, 4k tokens").isl is None  # said, but of nothing: noted
    assert any("'4k' was not used" in n for n in parse_request("Llama 3.1 70B on 8 H100, 4k tokens").notes)
