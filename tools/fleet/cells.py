"""One cell of a sweep: its request planned, its row of results, and the cache that makes a sweep resumable.

A cell is keyed by the hash of its request's JSON and the shardplan version: a rerun finds the cells already
done under ``OUT/cells/KEY.json`` and plans only the rest; a change of request (a price, a target) or of
version is a new key. Each record is written whole through a rename, so a kill never leaves half of one.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from shardplan import __version__
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.errors import ShardplanError
from shardplan.io import write_atomic
from shardplan.tools.planning.planner import plan

__all__ = ["cell_key", "run_cell", "plan_row", "read_cached", "write_cached", "ROW_COLUMNS", "RESULT_COLUMNS"]

RESULT_COLUMNS = [
    "status", "gpus_used", "layout", "ttft_ms", "tpot_ms", "tokens_per_s", "tokens_per_s_per_gpu",
    "usd_per_gpu_hour", "usd_per_hour", "usd_per_million_output_tokens", "usd_per_million_input_tokens",
    "usd_per_million_output_tokens_decode", "power_kw", "joules_per_output_token", "price_source", "pricing", "error",
]
"""What a cell's plan gives, in the order of the results table."""

ROW_COLUMNS = ["cell", "model", "gpu", "gpu_count", "engine", "isl", "osl", "workload", "rate", "ttft_target_ms",
               "tpot_target_ms", *RESULT_COLUMNS]
"""The columns of the results table: the cell's coordinates, then its results."""


def cell_key(request: PlanRequest) -> str:
    """The cache key of a cell: the first 24 hex digits of SHA-256 over the shardplan version and the request.

    >>> from shardplan.contracts.workload import Workload
    >>> a = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=8, workload=Workload(isl=1, osl=2))
    >>> cell_key(a) == cell_key(a.model_copy()), cell_key(a) == cell_key(a.model_copy(update={"gpus": 4}))
    (True, False)
    """
    text = __version__ + "\n" + request.model_dump_json()
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _rounded(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def plan_row(result: Plan) -> dict[str, Any]:
    """The results of one cell's plan (RESULT_COLUMNS): figures, layout, dollars and energy; None where the
    plan has none (an infeasible cell, a GPU without a price)."""
    f, d = result.figures, result.deployment
    usd = result.economics.dollars if result.economics else None
    energy = result.economics.energy if result.economics else None
    return {
        "status": result.status,
        "gpus_used": d.gpus_used if d else None,
        "layout": result.strategy.to_spec() if result.strategy else None,
        "ttft_ms": _rounded(f.ttft_ms) if f else None,
        "tpot_ms": _rounded(f.tpot_ms) if f else None,
        "tokens_per_s": _rounded(f.tokens_per_s) if f else None,
        "tokens_per_s_per_gpu": _rounded(f.tokens_per_s_per_gpu) if f else None,
        "usd_per_gpu_hour": usd.price.usd_per_gpu_hour if usd else None,
        "usd_per_hour": _rounded(usd.usd_per_hour) if usd else None,
        "usd_per_million_output_tokens": _rounded(usd.usd_per_million_output_tokens) if usd else None,
        "usd_per_million_input_tokens": _rounded(usd.usd_per_million_input_tokens) if usd else None,
        "usd_per_million_output_tokens_decode": _rounded(usd.usd_per_million_output_tokens_decode) if usd else None,
        "power_kw": _rounded(energy.power_kw) if energy else None,
        "joules_per_output_token": _rounded(energy.joules_per_output_token) if energy else None,
        "price_source": usd.price.source if usd else None,
        # measured (the engine's kernel tables for this GPU) or roofline: how far the engines' rows can differ
        "pricing": result.dag_cost.pricing.backend if result.dag_cost and result.dag_cost.pricing else None,
        "error": None,
    }


def run_cell(request_json: str) -> dict[str, Any]:
    """Plan one cell (its PlanRequest as JSON, so it crosses to a process or a Ray worker as text) with the
    builtin planner: its results (RESULT_COLUMNS) and ``wall_s``. A request the planner refuses is a row with
    status ``error`` and the reason, never an exception: one bad cell does not end a sweep (and, the planner being
    deterministic, a rerun would fail it the same way, so it is cached like any other)."""
    began = time.perf_counter()
    request = PlanRequest.model_validate_json(request_json)
    try:
        row = plan_row(plan(request))
    except Exception as exc:  # one failing cell is a row that says why, as in shardplan eval, not a lost sweep
        text = str(exc) if isinstance(exc, ShardplanError) else f"{type(exc).__name__}: {exc}"
        row = {column: None for column in RESULT_COLUMNS} | {"status": "error", "error": text[:500]}
    row["wall_s"] = round(time.perf_counter() - began, 3)
    return row


def _path(folder: Path, key: str) -> Path:
    return folder / f"{key}.json"


def read_cached(folder: Path, key: str) -> dict[str, Any] | None:
    """The finished record of cell ``key`` in ``folder``; None when it is not there (or unreadable)."""
    try:
        record = json.loads(_path(folder, key).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("cell") == key else None


def write_cached(folder: Path, record: dict[str, Any]) -> None:
    """Write a cell's finished record whole (a temporary file, then a rename)."""
    write_atomic(_path(folder, record["cell"]), json.dumps(record, separators=(",", ":")))
