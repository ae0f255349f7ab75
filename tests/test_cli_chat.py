"""``shardplan chat`` as a user runs it: one-shot, resumed threads with follow-ups, the REPL, bad input."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cli_helpers import run_cli


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["SHARDPLAN_HOME"] = str(tmp_path)
    return env


def test_one_shot_prints_a_valid_plan_with_an_explanation(tmp_path: Path) -> None:
    result = run_cli("chat", "Plan Llama 3.1 8B on 2 H100 for 1k prompts and 128 outputs, batch 2",
                     "--thread", "t1", env=_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "validation: valid" in result.stdout
    assert "prefill" in result.stdout and "decode" in result.stdout
    assert re.search(r"\b(TP|DEC|PP|EP|SP|HIER)-\d+\b", result.stdout)  # the explanation cites rules
    assert "Runner-up" in result.stdout
    assert "thread t1" in result.stderr and "propose: propose_strategy" in result.stderr
    assert (tmp_path / "chat.sqlite").exists()


def test_resumed_thread_follows_up_on_the_previous_request_and_plan(tmp_path: Path) -> None:
    env = _env(tmp_path)
    db = str(tmp_path / "conversations.sqlite")
    first = run_cli("chat", "Llama 3.1 8B on 2 H100, 4k prompts, 256 outputs, batch 4", "--thread", "abc",
                    "--db", db, "--json", env=env)
    assert first.returncode == 0, first.stderr
    planned = json.loads(first.stdout)
    assert planned["intent"] == "plan" and planned["plan"]["validation"]["valid"]
    assert planned["plan"]["request"]["gpus"] == 2

    more = run_cli("chat", "now with 4 GPUs", "--thread", "abc", "--db", db, "--json", env=env)
    assert more.returncode == 0, more.stderr
    replanned = json.loads(more.stdout)
    assert replanned["intent"] == "plan"
    request = replanned["plan"]["request"]
    assert request["gpus"] == 4 and request["model"] == "meta-llama/Llama-3.1-8B"
    assert request["workload"]["isl"] == 4096 and request["workload"]["batch"] == 4  # kept from turn one

    why = run_cli("chat", "why not PP?", "--thread", "abc", "--db", db, "--json", env=env)
    assert why.returncode == 0, why.stderr
    answer = json.loads(why.stdout)
    assert answer["intent"] == "answer" and answer["plan"] is None  # answered, not replanned
    assert "PP" in answer["answer"] and "pp=" in answer["answer"]

    other = run_cli("chat", "why not PP?", "--thread", "fresh", "--db", db, "--json", env=env)
    assert json.loads(other.stdout)["intent"] == "ask"  # a new thread has no plan to talk about


def test_missing_essentials_are_asked_back(tmp_path: Path) -> None:
    result = run_cli("chat", "plan something on H100s", env=_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Could you tell me" in result.stdout and "model" in result.stdout


def test_repl_plans_then_quits(tmp_path: Path) -> None:
    result = run_cli("chat", "--thread", "r1", input_text="Qwen3 8B on 1 A100, 512 token prompts\nquit\n",
                     env=_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "validation: valid" in result.stdout
    eof = run_cli("chat", input_text="", env=_env(tmp_path))
    assert eof.returncode == 0


def test_bad_policy_and_missing_key_are_one_line_errors(tmp_path: Path) -> None:
    unknown = run_cli("chat", "Llama 3.1 8B on 2 H100", "--policy", "magic", env=_env(tmp_path))
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown policy")
    assert "Traceback" not in unknown.stderr
    keyless = run_cli("chat", "Llama 3.1 8B on 2 H100", "--policy", "openai:gpt-4o-mini", env=_env(tmp_path))
    assert keyless.returncode == 2 and "OPENAI_API_KEY is not set" in keyless.stderr
    assert "Traceback" not in keyless.stderr
    assert not (tmp_path / "chat.sqlite").exists()  # refused before the conversation store was opened


def test_a_drafter_without_its_acceptance_is_asked_back_then_planned(tmp_path: Path) -> None:
    env = _env(tmp_path)
    db = str(tmp_path / "conversations.sqlite")
    asked = run_cli("chat", "Llama 3.1 8B on 1 H100, 1k prompts, 128 outputs, batch 2, EAGLE-3 with 3 draft tokens",
                    "--thread", "spec", "--db", db, "--json", env=env)
    assert asked.returncode == 0, asked.stderr
    reply = json.loads(asked.stdout)
    assert reply["intent"] == "ask" and "accepted per step" in reply["answer"]
    answered = run_cli("chat", "accept length 2.5, 60% of the prompt is a shared system prompt", "--thread", "spec",
                       "--db", db, "--json", env=env)
    assert answered.returncode == 0, answered.stderr
    request = json.loads(answered.stdout)["plan"]["request"]
    assert request["workload"]["speculation"] == {"method": "eagle", "draft_tokens": 3, "accepted": 1.5,
                                                  "draft_model": None, "head": None}
    assert request["workload"]["prefix_hit"] == 0.6
    assert any("'accept length 2.5' as 1.5 accepted" in line for line in request["assumptions"])
