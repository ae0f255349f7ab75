"""A count printed beside a noun agrees with it: one helper (shardplan.text.counted) words every such count, so a
deployment of one sequence on one GPU never reads "1 sequences" or "1 GPUs" in the terminal, the JSON's
explanation and notes, or the HTML report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import run_here

from shardplan.text import counted

NOUNS = ("sequences", "GPUs", "replicas", "workers", "tokens", "layers", "rules", "errors", "violations", "nodes",
         "edges", "stages", "clients", "requests", "groups", "candidates", "deployments", "strategies", "findings")
ONE_PLURAL = re.compile(r"(?<![\d.,])1 (?:[a-z-]+ )?(?:" + "|".join(NOUNS) + r")\b")
"""'1' then a plural noun, with at most one word between ('1 prefill workers'); '0.1 GPUs' and '11 GPUs' are not."""


def test_counted_agrees_with_its_count() -> None:
    assert [counted(n, "GPU") for n in (0, 1, 2)] == ["0 GPUs", "1 GPU", "2 GPUs"]
    assert [counted(n, "strategy", "strategies") for n in (1, 2)] == ["1 strategy", "2 strategies"]
    assert counted(12345, "token", spec=",") == "12,345 tokens" and counted(1.0, "token") == "1.0 token"


def test_one_sequence_on_one_gpu_reads_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan_file, report = tmp_path / "plan.json", tmp_path / "report.html"
    text = run_here(capsys, "plan", "-m", "llama-3.1-8b", "-n", "1", "--batch", "1", "--isl", "512", "--osl", "64",
                    "-o", str(plan_file))
    assert text.returncode == 0, text.stderr
    assert "1 sequence in flight" in text.stdout
    assert not ONE_PLURAL.findall(text.stdout), ONE_PLURAL.findall(text.stdout)
    plan = json.loads(plan_file.read_text())
    words = " ".join([plan["explanation"], *plan.get("notes", []), *plan.get("assumptions", [])])
    assert not ONE_PLURAL.findall(words), ONE_PLURAL.findall(words)
    assert run_here(capsys, "report", str(plan_file), "-o", str(report)).returncode == 0
    html = re.sub(r"<[^>]+>", " ", report.read_text())
    assert not ONE_PLURAL.findall(html), ONE_PLURAL.findall(html)


def test_a_one_node_dag_validates_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    built = tmp_path / "dag.json"
    assert run_here(capsys, "build", "-m", "llama-3.1-8b", "-n", "1", "--strategy", "tp=1", "-o",
                    str(built)).returncode == 0
    shown = run_here(capsys, "validate", str(built))
    assert shown.returncode == 0 and not ONE_PLURAL.findall(shown.stdout), shown.stdout
