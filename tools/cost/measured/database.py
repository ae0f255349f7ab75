"""Access to NVIDIA's measured kernel database (``aiconfigurator-core``), imported only when pricing needs it.

The package ships per-system, per-engine, per-version tables of GEMMs, attention, MLA, MoE and
collectives, and a compiled engine that interpolates between the measured points. Only its public
surface is used: ``get_database`` to load a (system, engine, version) and the engine handle's
``evaluate_ops_json`` to price a list of operations. Nothing of its tables is copied here.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

__all__ = ["Engine", "ENGINES", "MeasuredTables", "measured_available", "system_for_gpu", "measured_tables"]

Engine = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[Engine, ...] = ("vllm", "sglang", "trtllm")

# Catalog GPU name -> the database's system name. Only systems whose tables carry the kernels the
# DAG needs (GEMM, attention, MoE, custom all-reduce, NCCL) are listed; every other GPU, AMD's
# included, is priced by the roofline.
_SYSTEMS: dict[str, str] = {
    "H100": "h100_sxm",
    "H200": "h200_sxm",
    "B200": "b200_sxm",
    "A100": "a100_sxm",
    "L40S": "l40s",
}


def measured_available() -> bool:
    """Whether ``aiconfigurator-core`` can be imported on this install."""
    return importlib.util.find_spec("aiconfigurator_core") is not None


def system_for_gpu(gpu: str) -> str | None:
    """The database system that measured ``gpu``, or None when it has no tables."""
    return _SYSTEMS.get(gpu)


@dataclass(frozen=True)
class MeasuredTables:
    """One loaded (system, engine, version) of the database and the handle that evaluates operations on it."""

    system: str
    engine: Engine
    version: str
    package_version: str
    handle: Any

    @property
    def label(self) -> str:
        """``aiconfigurator-core 0.12.0, h200_sxm/vllm 0.24.0``: what a report names as its data."""
        return f"aiconfigurator-core {self.package_version}, {self.system}/{self.engine} {self.version}"


@lru_cache(maxsize=16)
def measured_tables(gpu: str, engine: Engine) -> MeasuredTables | None:
    """The tables for ``gpu`` under ``engine`` at the database's current version, or None.

    None when the package is not installed, the GPU was not measured, or the load fails (a broken
    install must not stop planning: the roofline prices everything then).
    """
    system = system_for_gpu(gpu)
    if system is None or not measured_available():
        return None
    # The package logs every shape it fills from older data at WARNING; a cost report states its data
    # version instead.
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    try:
        from importlib.metadata import version as package_version

        from aiconfigurator_core.sdk.engine import EngineHandle
        from aiconfigurator_core.sdk.perf_database import get_database

        database = get_database(system, engine, "current")
        if database is None:
            return None
        handle = EngineHandle.for_database(database)
        return MeasuredTables(system, engine, str(database.version), package_version("aiconfigurator-core"), handle)
    except Exception:  # noqa: BLE001 - any failure of an optional backend falls back to the roofline
        logging.getLogger(__name__).debug("measured tables for %s/%s unavailable", gpu, engine, exc_info=True)
        return None
