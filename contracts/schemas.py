"""JSON Schemas of the public contracts, generated from the pydantic models.

The committed copies in ``schemas/`` are what other agents consume; a test fails when they drift.
Regenerate with ``python -m shardplan.contracts.schemas schemas/``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from shardplan.contracts.dag import DAG
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import Plan
from shardplan.contracts.reports import CostReport, ValidationReport
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError

__all__ = ["SCHEMA_NAMES", "json_schema", "write_schemas"]

SCHEMA_NAMES = ("plan", "dag", "strategy", "model", "cluster", "workload", "validation", "cost", "simulation")


def _model_for(name: str) -> Any:
    return {
        "plan": Plan,
        "dag": DAG,
        "strategy": Strategy,
        "model": ModelSpec,
        "cluster": Cluster,
        "workload": Workload,
        "validation": ValidationReport,
        "cost": CostReport,
        "simulation": SimulationSummary,
    }[name]


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of contract ``name``.

    Raises:
        InputError: ``name`` is not one of SCHEMA_NAMES.
    """
    key = name.strip().lower()
    if key not in SCHEMA_NAMES:
        raise InputError(f"unknown schema '{name}'", field="name", fix=f"choose one of {', '.join(SCHEMA_NAMES)}")
    schema = _model_for(key).model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://shardplan.dev/schemas/{key}.schema.json"
    return schema


def write_schemas(folder: str | Path) -> list[Path]:
    """Write every schema as ``<name>.schema.json`` into ``folder``; returns the paths written."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SCHEMA_NAMES:
        path = out / f"{name}.schema.json"
        path.write_text(json.dumps(json_schema(name), indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_schemas(sys.argv[1] if len(sys.argv) > 1 else "schemas"):
        print(written)
