"""The request set (tests/data/requests.yaml): every request read field by field against its expected reading."""

from __future__ import annotations

from pathlib import Path

from shardplan.evals.readings import ReadingCase, load_cases, score_case, score_cases

CASES = load_cases(Path(__file__).parent / "data" / "requests.yaml")


def test_the_set_is_large_and_varied() -> None:
    assert len(CASES) >= 150
    assert sum(1 for c in CASES if c.previous) >= 15
    assert sum(1 for c in CASES if "constraints" in c.expect) >= 30
    assert sum(1 for c in CASES if c.expect.get("contradiction")) >= 8
    assert sum(1 for c in CASES if "model" in c.expect and c.expect["model"] is None) >= 8


def test_readings_are_right_and_no_wrong_reading_is_silent() -> None:
    score = score_cases(CASES)
    listing = "\n".join(f"{f.text}: {f.wrong}" for f in score.failures)
    assert score.fully_correct_share >= 0.9, listing
    assert score.wrong_unstated == 0, listing


def test_the_scorer_tells_a_silent_guess_from_a_stated_one() -> None:
    silent = score_case(ReadingCase(text="Llama 3.1 70B on 8 H100s", expect={"gpus": 16}))
    assert not silent.correct and silent.unstated == ["gpus"]
    unread = score_case(ReadingCase(text="Llama 3.1 70B on H100s", expect={"gpus": 8}))
    assert not unread.correct and unread.unstated == []
    asked = score_case(ReadingCase(text="Llama 3.1 70B on 8 H100 and 16 H100", expect={"gpus": 8}))
    assert asked.wrong["contradiction"] and asked.unstated == []
    noted = score_case(ReadingCase(text="Kimi K2 on 8 H100", expect={"model": None}, note="not bundled"))
    assert noted.correct
    assert not score_case(ReadingCase(text="Kimi K2 on 8 H100", expect={}, note="no such words")).correct
