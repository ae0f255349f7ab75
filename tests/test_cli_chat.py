"""``shardplan chat`` as a user runs it: one-shot, resumed threads with follow-ups, the REPL, bad input.

The command runs in this process (:func:`cli_helpers.run_here`); each test gets its own ``$SHARDPLAN_HOME``
and no ``OPENAI_*`` variables, as the whole-process runs had."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
from cli_helpers import run_here

Capture = pytest.CaptureFixture[str]


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Conversations under ``tmp_path``; no OpenAI key or endpoint from the machine running the tests."""
    for name in [k for k in os.environ if k.startswith("OPENAI_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SHARDPLAN_HOME", str(tmp_path))


def test_one_shot_prints_a_valid_plan_with_an_explanation(tmp_path: Path, capsys: Capture) -> None:
    result = run_here(capsys, "chat", "Plan Llama 3.1 8B on 2 H100 for 1k prompts and 128 outputs, batch 2",
                      "--thread", "t1")
    assert result.returncode == 0, result.stderr
    assert "validation: valid" in result.stdout
    assert "prefill" in result.stdout and "decode" in result.stdout
    assert re.search(r"\b(TP|DEC|PP|EP|SP|HIER)-\d+\b", result.stdout)  # the explanation cites rules
    assert "Runner-up" in result.stdout
    assert "thread t1" in result.stderr and "propose: propose_strategy" in result.stderr
    assert (tmp_path / "chat.sqlite").exists()


def test_resumed_thread_follows_up_on_the_previous_request_and_plan(tmp_path: Path, capsys: Capture) -> None:
    db = str(tmp_path / "conversations.sqlite")
    first = run_here(capsys, "chat", "Llama 3.1 8B on 2 H100, 4k prompts, 256 outputs, batch 4", "--thread", "abc",
                     "--db", db, "--json")
    assert first.returncode == 0, first.stderr
    planned = json.loads(first.stdout)
    assert planned["intent"] == "plan" and planned["plan"]["validation"]["valid"]
    assert planned["plan"]["request"]["gpus"] == 2

    more = run_here(capsys, "chat", "now with 4 GPUs", "--thread", "abc", "--db", db, "--json")
    assert more.returncode == 0, more.stderr
    replanned = json.loads(more.stdout)
    assert replanned["intent"] == "plan"
    request = replanned["plan"]["request"]
    assert request["gpus"] == 4 and request["model"] == "meta-llama/Llama-3.1-8B"
    assert request["workload"]["isl"] == 4096 and request["workload"]["batch"] == 4  # kept from turn one

    why = run_here(capsys, "chat", "why not PP?", "--thread", "abc", "--db", db, "--json")
    assert why.returncode == 0, why.stderr
    answer = json.loads(why.stdout)
    assert answer["intent"] == "answer" and answer["plan"] is None  # answered, not replanned
    assert "PP" in answer["answer"] and "pp=" in answer["answer"]

    other = run_here(capsys, "chat", "why not PP?", "--thread", "fresh", "--db", db, "--json")
    assert json.loads(other.stdout)["intent"] == "ask"  # a new thread has no plan to talk about


def test_missing_essentials_are_asked_back(tmp_path: Path, capsys: Capture) -> None:
    result = run_here(capsys, "chat", "plan something on H100s")
    assert result.returncode == 0, result.stderr
    assert "Could you tell me" in result.stdout and "model" in result.stdout


def test_repl_plans_then_quits(capsys: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("Qwen3 8B on 1 A100, 512 token prompts\nquit\n"))
    result = run_here(capsys, "chat", "--thread", "r1")
    assert result.returncode == 0, result.stderr
    assert "validation: valid" in result.stdout
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    eof = run_here(capsys, "chat")
    assert eof.returncode == 0


def test_bad_policy_and_missing_key_are_one_line_errors(tmp_path: Path, capsys: Capture) -> None:
    unknown = run_here(capsys, "chat", "Llama 3.1 8B on 2 H100", "--policy", "magic")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown policy")
    assert "Traceback" not in unknown.stderr
    keyless = run_here(capsys, "chat", "Llama 3.1 8B on 2 H100", "--policy", "openai:gpt-4o-mini")
    assert keyless.returncode == 2 and "OPENAI_API_KEY is not set" in keyless.stderr
    assert "Traceback" not in keyless.stderr
    assert not (tmp_path / "chat.sqlite").exists()  # refused before the conversation store was opened


def test_a_drafter_without_its_acceptance_is_asked_back_then_planned(tmp_path: Path, capsys: Capture) -> None:
    db = str(tmp_path / "conversations.sqlite")
    asked = run_here(capsys, "chat",
                     "Llama 3.1 8B on 1 H100, 1k prompts, 128 outputs, batch 2, EAGLE-3 with 3 draft tokens",
                     "--thread", "spec", "--db", db, "--json")
    assert asked.returncode == 0, asked.stderr
    reply = json.loads(asked.stdout)
    assert reply["intent"] == "ask" and "accepted per step" in reply["answer"]
    answered = run_here(capsys, "chat", "accept length 2.5, 60% of the prompt is a shared system prompt",
                        "--thread", "spec", "--db", db, "--json")
    assert answered.returncode == 0, answered.stderr
    request = json.loads(answered.stdout)["plan"]["request"]
    assert request["workload"]["speculation"] == {"method": "eagle", "draft_tokens": 3, "accepted": 1.5,
                                                  "draft_model": None, "head": None}
    assert request["workload"]["prefix_hit"] == 0.6
    assert any("'accept length 2.5' as 1.5 accepted" in line for line in request["assumptions"])
