"""How ``benchmarks/speculation_gaps.py`` takes a public MTP row apart: the baseline error from the source's figure
without MTP, the critical path by kind, and the roofline's expert-load factor on a wide expert-parallel layout.
The steps here are made up; no ``shardplan cost`` runs."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import speculation_gaps as gaps  # noqa: E402
from speculation_rows import PublicRow  # noqa: E402

from shardplan.tools.catalogs.gpus import gpu_catalog  # noqa: E402
from shardplan.tools.cost.op_time import expert_load_factor  # noqa: E402


def _row(**fields: object) -> dict[str, object]:
    row: dict[str, object] = {"id": "r", "model": "deepseek-ai/DeepSeek-V3", "gpu": "H20", "gpus": 16,
                              "strategy": "adp=16,ep=16", "batch": 768, "isl": 4096, "osl": 1536,
                              "metric": "tpot_ms", "value": 50.0, "spec": "mtp:1", "spec_accepted": 0.85}
    row.update(fields)
    return row


def _step(backend: str, tpot_ms: float, **by_kind: float) -> gaps.Step:
    return gaps.Step(tpot_ms=tpot_ms, by_kind=by_kind, backend=backend)


def test_a_roofline_wide_ep_row_names_the_load_factor_and_its_most() -> None:
    public = PublicRow(_row(), 1, 0.85, None)
    gap = gaps.Gap(public, _step("roofline", 60.0, expert=40.0, attention=30.0, linear=10.0, router=1.0), None)
    factor = expert_load_factor(16, gpu_catalog()["H20"])
    line = gaps.rows_of([gap])[-1]
    assert f"x{factor:.2f} (up to {40.0 * (1 - 1 / factor):.1f} ms)" in line
    assert "+20.0%" in line  # 60 against 50 measured
    assert "expert 40.00, attention 30.00, linear 10.00, router 1.00" in line


def test_the_baseline_error_comes_from_the_figure_without_mtp() -> None:
    row = _row(gpu="B200", gpus=8, strategy="tp=8,ep=4", batch=1, metric="output_tokens_per_s", value=200.0,
               no_spec_value=100.0)
    public = PublicRow(row, 1, 0.92, None)
    gap = gaps.Gap(public, _step("measured", 4.0, expert=2.0), _step("measured", 8.0, expert=1.0))
    line = gaps.rows_of([gap])[-1]
    assert "10.00 / 8.00 | -20.0%" in line  # 1000 / 100 tokens/s per user = 10 ms measured, 8 predicted
    assert line.endswith("| measured | - |")  # the tables price it: no roofline factor


def test_a_row_that_could_not_be_priced_says_why() -> None:
    gap = gaps.Gap(PublicRow(_row(), 1, 0.85, None), None, None, "exit 2: no such layout")
    assert "exit 2: no such layout" in gaps.rows_of([gap])[-1]
