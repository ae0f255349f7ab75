"""Plans written by shardplan 0.1 are read for one more version: keys moved to their places, one warning line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from cli_helpers import run_here

from shardplan.contracts.plan import Plan
from shardplan.errors import DeprecatedFieldWarning

OLD = Path(__file__).parent / "data" / "plan_0.1.json"  # `shardplan plan` of 0.1, its DAG left out to stay small


def test_an_old_plan_reads_with_its_figures_in_their_places_and_one_warning() -> None:
    old = json.loads(OLD.read_text())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = Plan.model_validate(old)
    [warning] = [w for w in caught if issubclass(w.category, DeprecatedFieldWarning)]
    assert "shardplan 0.1" in str(warning.message) and "cost -> figures and dag_cost" in str(warning.message)
    assert plan.figures is not None and plan.dag_cost is not None
    # The old headline was the deployment's steady state, and is read as such.
    assert plan.figures.source == "steady_state" and plan.figures.ttft_ms == old["cost"]["ttft_ms"]
    assert plan.figures.requests_per_s == old["deployment"]["requests_per_s"]
    assert plan.figures.memory_per_gpu_gb == old["cost"]["memory_per_gpu_gb"]
    assert plan.dag_cost.decode.latency_ms == old["cost"]["decode"]["latency_ms"]
    assert [a.strategy for a in plan.alternatives] == [a["strategy"] for a in old["alternatives"]]
    assert [p.figures.tokens_per_s_per_user for p in plan.deployment.frontier] == [  # type: ignore[union-attr]
        p["tokens_per_s_per_user"] for p in old["deployment"]["frontier"]]
    assert plan.misses == [] and plan.status == "ok"


def _read_old() -> Plan:
    with pytest.warns(DeprecatedFieldWarning):
        return Plan.model_validate(json.loads(OLD.read_text()))


def test_a_new_plan_reads_without_a_warning() -> None:
    plan = _read_old()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = Plan.model_validate(json.loads(plan.model_dump_json()))
    assert again == plan


def test_the_report_of_an_old_plan_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    result = run_here(capsys, "report", str(OLD), "-o", str(out))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "shardplan 0.1" in lines[0], result.stderr
    page = out.read_text()
    assert "TTFT" in page and "Traceback" not in result.stderr


@pytest.mark.parametrize("key", ["ttft_ms", "target_misses"])
def test_old_headline_keys_in_a_new_plan_are_refused(key: str) -> None:
    plan = _read_old().model_dump(mode="json")
    plan["dag_cost"][key] = plan["figures"]["ttft_ms"] if key == "ttft_ms" else []
    with pytest.raises(ValueError, match=key):
        Plan.model_validate(plan)
