"""A sweep's outputs: the results table (CSV, JSON lines, Parquet), the best deployment per question, and a
cost-against-rate plot per model.

A *question* is a model with its traffic and targets (lengths or workload, rate, targets): its best answer is
the cheapest cell over the GPU types and engines swept that meets the targets (the lowest dollars per million
output tokens; where no cell has a price, the most output tokens per
GPU: :func:`~shardplan.contracts.choice.cost_rank`). Every file is written whole through a rename.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shardplan.contracts.choice import cost_rank
from shardplan.io import write_atomic
from shardplan.tools.fleet.cells import ROW_COLUMNS

__all__ = ["QUESTION_COLUMNS", "best_rows", "write_outputs", "csv_text", "PARQUET_MISSING"]

QUESTION_COLUMNS = ["model", "isl", "osl", "workload", "rate", "ttft_target_ms", "tpot_target_ms"]
"""What a question is made of: the cell's coordinates less the GPU type and engine it runs on."""

PARQUET_MISSING = 'results.parquet not written: pyarrow is not installed (pip install "shardplan[parquet]")'

_COLUMNS = [*ROW_COLUMNS, "wall_s"]


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str] = _COLUMNS) -> str:
    """Rows as CSV text with a header, empty cells for None.

    >>> csv_text([{"a": 1, "b": None}], ["a", "b"]).splitlines()
    ['a,b', '1,']
    """
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _rank(row: dict[str, Any]) -> tuple[float, float, float, float]:
    ttft, tpot, osl = row.get("ttft_ms"), row.get("tpot_ms"), row.get("osl")
    latency = ttft + (osl - 1) * tpot if ttft is not None and tpot is not None and osl else None
    return cost_rank(row.get("usd_per_million_output_tokens"), row.get("gpus_used"), row.get("tokens_per_s_per_gpu"),
                     latency)


def best_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The best cell of each question (the module's rule), in the grid's order; a question no cell answers has
    a row with status ``none_meets_targets`` and the GPU types tried.

    >>> rows = [{"model": "m", "gpu": g, "status": "ok", "usd_per_million_output_tokens": p, "gpus_used": 1}
    ...         for g, p in (("H100", 2.0), ("H200", 1.5))]
    >>> [r["gpu"] for r in best_rows(rows)]
    ['H200']
    """
    questions: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in records:
        questions.setdefault(tuple(row.get(c) for c in QUESTION_COLUMNS), []).append(row)
    best = []
    for key, rows in questions.items():
        meeting = [r for r in rows if r.get("status") == "ok"]
        if meeting:
            best.append(min(meeting, key=_rank))
        else:
            tried = ", ".join(sorted({f"{r['gpu']}/{r.get('engine')}" for r in rows}))
            best.append(dict(zip(QUESTION_COLUMNS, key, strict=True)) | {"status": "none_meets_targets",
                                                                          "error": f"tried {tried}"})
    return best


def _parquet(rows: Sequence[dict[str, Any]], path: Path) -> bool:
    """Write ``rows`` as Parquet through a rename; False when pyarrow is missing."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    table = pa.Table.from_pylist([{c: r.get(c) for c in _COLUMNS} for r in rows])
    temporary = path.with_name(f".{path.name}.part")
    pq.write_table(table, temporary)
    temporary.replace(path)
    return True


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "model"


def _plots(records: Sequence[dict[str, Any]], out: Path, name: str) -> list[Path]:
    """One PNG a model: dollars per million output tokens against the rate, a line per GPU type and engine (and
    traffic shape, where the grid has several); cells without a price or missing the targets are left out."""
    priced = [r for r in records if r.get("rate") is not None and r.get("status") == "ok"
              and r.get("usd_per_million_output_tokens") is not None]
    if not priced:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for model in dict.fromkeys(r["model"] for r in priced):
        figure, axes = plt.subplots(figsize=(6.4, 4.2))
        lines: dict[str, list[dict[str, Any]]] = {}
        for r in (r for r in priced if r["model"] == model):
            shape = r.get("workload") or f"{r['isl']}/{r['osl']}"
            lines.setdefault(f"{r['gpu']} {r['engine']} {shape}", []).append(r)
        for label, rows in lines.items():
            rows.sort(key=lambda r: r["rate"])
            axes.plot([r["rate"] for r in rows], [r["usd_per_million_output_tokens"] for r in rows], marker="o",
                      label=label)
        axes.set_xscale("log")
        axes.set_xlabel("requests/s")
        axes.set_ylabel("$ per 1M output tokens (prompts included)")
        axes.set_title(f"{model}: cost against rate ({name})", fontsize=10)
        axes.legend(fontsize=8)
        axes.grid(alpha=0.3)
        path = out / f"cost_vs_rate_{_slug(model)}.png"
        temporary = path.with_name(f".{path.name}.part.png")
        figure.savefig(temporary, dpi=110, bbox_inches="tight")
        plt.close(figure)
        temporary.replace(path)
        paths.append(path)
    return paths


def write_outputs(records: Sequence[dict[str, Any]], out: Path, name: str) -> tuple[dict[str, Path], list[str]]:
    """Write results.csv, results.jsonl, results.parquet (where pyarrow is installed), best.csv and the plots
    into ``out``; returns the files by kind and what could not be written."""
    files = {
        "csv": write_atomic(out / "results.csv", csv_text(records)),
        "jsonl": write_atomic(out / "results.jsonl", "".join(json.dumps({c: r.get(c) for c in _COLUMNS}) + "\n"
                                                            for r in records)),
        "best": write_atomic(out / "best.csv", csv_text(best_rows(records))),
    }
    notes = []
    if _parquet(records, out / "results.parquet"):
        files["parquet"] = out / "results.parquet"
    else:
        notes.append(PARQUET_MISSING)
    for path in _plots(records, out, name):
        files[f"plot:{path.stem}"] = path
    return files, notes
