"""Scoring how plain-language requests are read: each case's expected fields against the parser's reading.

A case (one entry of a YAML list) has ``text``, optionally ``previous`` (the message a follow-up answers),
``expect`` (the fields scored), and ``note`` (text one of the notes must contain). ``constraints`` compares
as a set; ``contradiction`` (default false) says whether the answer must ask back.

A field read wrong is *stated* when the answer says what it did instead of guessing silently: it left the
field unread (the answer asks for it, or states the default it assumed), or a note names the value it
read. A case is *fully correct* when every scored field matches and the note, if any, is there.

>>> case = ReadingCase(text="Llama 3.1 70B on 8 H100s", expect={"gpus": 8, "gpu": "H100"})
>>> score_case(case).correct
True
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shardplan.agent.parse.request import parse_request
from shardplan.limits import MAX_YAML_BYTES
from shardplan.reading import parse_yaml_text, read_text

__all__ = ["ReadingCase", "CaseScore", "ReadingScore", "load_cases", "score_case", "score_cases"]


class ReadingCase(BaseModel):
    """One request and the reading it must get."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The message.")
    previous: str | list[str] | None = Field(
        default=None, description="The earlier message a follow-up answers, or the thread's earlier messages in order."
    )
    expect: dict[str, Any] = Field(description="Expected value of each scored field.")
    note: str | None = Field(default=None, description="Text that one of the parser's notes must contain.")


class CaseScore(BaseModel):
    """How one case was read."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The message.")
    fields: int = Field(description="Fields scored.")
    right: int = Field(description="Fields read as expected.")
    wrong: dict[str, str] = Field(default_factory=dict, description="Field -> 'read X, expected Y'.")
    unstated: list[str] = Field(default_factory=list, description="Wrong fields the answer does not state.")
    note_missing: bool = Field(default=False, description="The expected note is absent.")

    @property
    def correct(self) -> bool:
        """Every field right and the note present."""
        return not self.wrong and not self.note_missing


class ReadingScore(BaseModel):
    """The figures of a whole set."""

    model_config = ConfigDict(extra="forbid")

    cases: int = Field(description="Cases scored.")
    fully_correct: int = Field(description="Cases with every field right.")
    fields: int = Field(description="Fields scored in all.")
    fields_right: int = Field(description="Fields read as expected.")
    wrong_unstated: int = Field(description="Fields read wrong that the answer does not state as assumed.")
    failures: list[CaseScore] = Field(default_factory=list, description="The cases not fully correct.")

    @property
    def fully_correct_share(self) -> float:
        """Share of cases read fully correctly."""
        return self.fully_correct / max(self.cases, 1)


def load_cases(path: str | Path) -> list[ReadingCase]:
    """The cases of a YAML file.

    Raises:
        InputError: the file is missing, too large, not YAML, or expands past the YAML value limit.
    """
    what, fix = f"reading cases {path}", "give a YAML list of reading cases"
    text = read_text(Path(path), what=what, field="cases", fix=fix, limit=MAX_YAML_BYTES)
    return [ReadingCase.model_validate(item) for item in parse_yaml_text(text, what=what, field="cases", fix=fix)]


def _reading(case: ReadingCase) -> Any:
    thread = [case.previous] if isinstance(case.previous, str) else case.previous or []
    previous = None
    for message in thread:  # each message is read as a follow-up to the thread so far
        previous = parse_request(message, previous)
    return parse_request(case.text, previous)


def _value(parsed: Any, name: str) -> Any:
    if name == "contradiction":
        return bool(parsed.contradictions)
    if name == "constraints":
        return sorted(parsed.constraints)
    return getattr(parsed, name, None)  # a field the reader does not know is unread


def _expected(name: str, value: Any) -> Any:
    if name == "constraints":
        return sorted(value)
    if name in ("ttft_ms", "tpot_ms", "rate", "gpu_price") and value is not None:
        return float(value)
    return value


def score_case(case: ReadingCase) -> CaseScore:
    """Read ``case`` and compare it field by field."""
    parsed = _reading(case)
    expect = {"contradiction": False, **case.expect}
    notes = " ".join(parsed.notes + parsed.contradictions)
    score = CaseScore(text=case.text, fields=len(expect), right=0)
    for name, wanted in expect.items():
        got, want = _value(parsed, name), _expected(name, wanted)
        if got == want:
            score.right += 1
            continue
        score.wrong[name] = f"read {got!r}, expected {want!r}"
        # Unread, asked back, or named in a note: the answer says so. Anything else is a silent guess.
        named = re.search(rf"(?<![\w.]){re.escape(str(got))}(?![\w.])", notes) is not None
        said = got is None or got == [] or (name == "contradiction" and got) or named
        if not said:
            score.unstated.append(name)
    score.note_missing = case.note is not None and case.note not in notes
    return score


def score_cases(cases: list[ReadingCase]) -> ReadingScore:
    """Score every case."""
    scores = [score_case(case) for case in cases]
    return ReadingScore(
        cases=len(scores),
        fully_correct=sum(s.correct for s in scores),
        fields=sum(s.fields for s in scores),
        fields_right=sum(s.right for s in scores),
        wrong_unstated=sum(len(s.unstated) for s in scores),
        failures=[s for s in scores if not s.correct],
    )
