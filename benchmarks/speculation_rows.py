"""The public measured rows with speculative decoding (MTP), as shardplan is asked to price them.

The rows live in ``benchmarks/calibration/end_to_end.yaml`` with every other public measurement; the error
table (``calibration/error_table.py``) skips them, since a speculative step emits several tokens. Here each
one is either priced or left out with its reason:

* the acceptance must be stated by the row's own source (``spec_accepted``, the mean accepted draft tokens
  per step: an acceptance length less the bonus token); a row whose source gives none cannot be priced
  honestly, as any acceptance would be invented, and is left out saying so;
* the draft length (``spec: mtp:K``), the GPU (in shardplan's catalog), a batch and a latency metric
  (``tpot_ms``, or ``output_tokens_per_s`` at batch 1, per-user speed) are needed as for any row.

A priced row is asked of ``shardplan plan`` with its layout, batch (static, as the fixed-batch benchmarks
ran), engine, weight and KV formats (and the formats of the parts its checkpoint stores apart,
``weight_dtype_for``, whose source the row's ``weight_formats_source`` names), with and without ``--spec``:
the measured and predicted TPOT, and the speed-up each side gives over the same table's row without
speculation (``no_spec_value``), which separates the speculation's pricing from the baseline step's. A row measured
on the decode side of a split deployment (``decode_only``) prefills one prompt per attention group.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "calibration"))

import error_table as table  # noqa: E402

from shardplan.contracts.arithmetic.feasibility import needed_sequences_text, sequences_needed  # noqa: E402
from shardplan.contracts.strategy import parse_strategy  # noqa: E402
from shardplan.tools.catalogs.gpus import gpu_catalog  # noqa: E402

__all__ = ["PublicRow", "measured_tpot_ms", "public_rows", "row_options", "source_name", "speculative"]

_SPECULATIVE = re.compile(r"\bMTP\b|speculative", re.I)  # the error table's own test for a speculative row
_SPEC = re.compile(r"^mtp:(\d+)$")


@dataclass(frozen=True)
class PublicRow:
    """One public speculative row: priced when ``reason`` is None, else left out for that reason."""

    row: dict[str, Any]
    draft_tokens: int | None
    accepted: float | None
    reason: str | None

    @property
    def id(self) -> str:
        return str(self.row["id"])


def speculative(row: dict[str, Any]) -> bool:
    """Whether the row was measured with speculative decoding (its ``spec`` field, or its note says so)."""
    return bool(row.get("spec")) or bool(_SPECULATIVE.search(str(row.get("note", ""))))


def measured_tpot_ms(row: dict[str, Any]) -> float | None:
    """The row's TPOT in ms: ``tpot_ms`` as measured, or a batch-1 row's per-user tokens/s inverted (its
    request time includes one prefill, ~1% of a 2k-token output at these speeds); None for other metrics."""
    if row["metric"] == "tpot_ms":
        return float(row["value"])
    if row["metric"] == "output_tokens_per_s" and row.get("batch") == 1:
        return 1000.0 / float(row["value"])
    return None


def _reason(row: dict[str, Any], draft_tokens: int | None, accepted: float | None) -> str | None:
    if row["gpu"] not in gpu_catalog():
        return f"GPU {row['gpu']} is not in shardplan's catalog"
    if draft_tokens is None:
        return "its source states no draft length (spec: mtp:K)"
    if accepted is None:
        return "its source states no acceptance: any mean accepted draft tokens per step would be invented"
    if not row.get("batch") or not row.get("isl") or not row.get("osl"):
        return "no batch, input or output length stated"
    if measured_tpot_ms(row) is None:
        return f"metric {row['metric']} at batch {row.get('batch')} is not a per-token latency"
    needed = sequences_needed(parse_strategy(row["strategy"]))
    if row["batch"] < needed:
        return f"{row['strategy']} at a batch of {row['batch']}: shardplan prices {needed_sequences_text(needed)}"
    return None


def public_rows(rows: list[dict[str, Any]]) -> list[PublicRow]:
    """Every speculative row of ``rows``, each priced or left out with its reason."""
    found = []
    for row in rows:
        if not speculative(row):
            continue
        match = _SPEC.match(str(row.get("spec") or "").strip())
        draft_tokens = int(match.group(1)) if match else None
        accepted = float(row["spec_accepted"]) if row.get("spec_accepted") is not None else None
        found.append(PublicRow(row, draft_tokens, accepted, _reason(row, draft_tokens, accepted)))
    return found


def row_options(public: PublicRow, with_spec: bool) -> list[str]:
    """``shardplan plan`` options for the row's deployment (static batch), with its speculation or without."""
    row = public.row
    weights = table.checkpoint_dtype(row["model"], row["weight_dtype"])
    options = [
        *("-m", row["model"], "--gpu", row["gpu"], "--gpus", str(row["gpus"]), "-s", row["strategy"]),
        *("--batch", str(row["batch"]), "--batching", "static", "--engine", table.serving_engine(row)),
        *("--isl", str(row["isl"]), "--osl", str(row["osl"])),
    ]
    if row.get("decode_only"):
        # Measured on the decode side of a split deployment: its prompts were prefilled on other GPUs, so the static
        # batch is priced with the smallest prefill (one prompt per attention group), which leaves the decode step,
        # the TPOT compared, as it is and holds no prefill activations the measured GPUs never held.
        options += ["--prefill-batch", str(sequences_needed(parse_strategy(row["strategy"])))]
    if weights:
        options += ["--weight-dtype", weights]
    if row.get("weight_dtype_for"):  # the parts the measured checkpoint stored apart, each with its source
        options += ["--weight-dtype-for", str(row["weight_dtype_for"])]
    if table.kv_dtype(row):
        options += ["--kv-dtype", "fp8"]
    if table.attention_dtype(row):
        options += ["--attention-dtype", str(table.attention_dtype(row))]
    if with_spec:
        options += ["--spec", f"mtp:{public.draft_tokens}", "--spec-accept", f"{public.accepted:g}"]
    return options


def source_name(row: dict[str, Any]) -> str:
    """The row's source in short, as the error table names it."""
    return table.short_source(str(row["source"]))
