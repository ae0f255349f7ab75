"""`shardplan kb`: the knowledge base from the command line."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_here


def test_kb_search_finds_the_tp_allreduce_analysis(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "kb", "search", "all-reduce blocks the residual add", "-k", "3", "--json")
    assert result.returncode == 0, result.stderr
    sections = json.loads(result.stdout)
    assert 1 <= len(sections) <= 3
    assert any(s["doc"].startswith("12-") for s in sections)
    assert [s["score"] for s in sections] == sorted((s["score"] for s in sections), reverse=True)


def test_kb_rule_prints_the_rule_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "kb", "rule", "sp-1", "--json")
    assert result.returncode == 0, result.stderr
    rule = json.loads(result.stdout)
    assert rule["id"] == "SP-1" and rule["severity"] == "mandatory" and "decode" in rule["text"].lower()


def test_kb_unknown_rule_exits_2_with_close_ids(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "kb", "rule", "DEC-9")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "DEC-" in result.stderr and "Traceback" not in result.stderr


def test_kb_rules_lists_every_rule_once(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "kb", "rules", "--json")
    assert result.returncode == 0
    ids = [r["id"] for r in json.loads(result.stdout)]
    assert len(ids) == len(set(ids)) >= 40 and {"DEC-1", "TP-2", "EP-1", "MEM-1"} <= set(ids)


def test_kb_search_by_strategy_returns_the_sections_of_the_dimensions_it_uses(
    capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_here(capsys, "kb", "search", "--strategy", "prefill:sp=2,tp=4;decode:adp=2,tp=4", "--json")
    assert result.returncode == 0, result.stderr
    sections = json.loads(result.stdout)
    docs = {s["doc"] for s in sections}
    rules = {r for s in sections for r in s["rule_ids"]}
    assert {"02-tensor-parallelism.md", "05-sequence-parallelism.md", "10-decode-constraints.md"} <= docs
    assert "04-expert-parallelism.md" not in docs and {"SP-1", "TP-2", "DEC-1"} <= rules


def test_kb_search_without_query_or_strategy_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_here(capsys, "kb", "search")
    assert result.returncode == 2 and "QUERY" in result.stderr
