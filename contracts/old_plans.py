"""Plans written by shardplan 0.1, read for one more version.

A 0.1 plan kept one ``cost`` report whose headline (TTFT, TPOT, throughput) held the deployment's steady
state over the DAG's own static-batch figures, and its alternatives and frontier points carried loose
figures. Since 0.2 a plan keeps the deployment's ``figures`` and the DAG's ``dag_cost`` apart, and every
priced deployment carries one :class:`~shardplan.contracts.figures.Figures` record. :func:`read_old_plan`
moves a 0.1 plan's keys to their places, with one warning line naming them; the old figures were the
deployment's steady state, so they are read as such.
"""

from __future__ import annotations

import warnings
from typing import Any

from shardplan.contracts.figures import Figures
from shardplan.contracts.targets import Targets, misses
from shardplan.errors import DeprecatedFieldWarning

__all__ = ["OLD_HEADLINE", "read_old_plan"]

OLD_HEADLINE = (
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "memory_per_gpu_gb",
    "fits",
    "meets_targets",
    "target_misses",
)
"""The headline keys of a 0.1 cost report, now the keys of its ``figures`` and ``misses``."""


def _figures(flat: dict[str, Any], osl: int, gpus: int, budget: int, capacity: float) -> dict[str, Any]:
    """Figures of a 0.1 record's loose keys (steady state); a key it lacks is derived or, for memory, zero."""
    per_gpu = float(flat.get("tokens_per_s_per_gpu", 0.0))
    total = float(flat.get("tokens_per_s", per_gpu * gpus))
    ttft, tpot = float(flat.get("ttft_ms", 0.0)), float(flat.get("tpot_ms", 0.0))
    return {
        "source": "steady_state",
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2e_ms": float(flat.get("e2e_ms", ttft + (osl - 1) * tpot)),
        "tokens_per_s": total,
        "tokens_per_s_per_gpu": per_gpu,
        "tokens_per_s_per_budget_gpu": total / max(budget, gpus, 1),
        "tokens_per_s_per_user": float(flat.get("tokens_per_s_per_user", 1e3 / tpot if tpot > 0 else 0.0)),
        "requests_per_s": float(flat.get("requests_per_s", total / max(osl, 1))),
        "memory_per_gpu_gb": float(flat.get("memory_per_gpu_gb", 0.0)),
        "gpu_memory_gb": capacity,
        "fits": bool(flat.get("fits", True)),
        "gpus_used": max(gpus, 1),
        "gpu_budget": max(budget, gpus, 1),
    }


def read_old_plan(data: Any) -> Any:
    """``data`` (a plan as JSON data) with the keys of a 0.1 plan moved to their 0.2 places, warning once.

    A 0.2 plan, or anything that is not a plan, is returned as it is.
    """
    if not isinstance(data, dict) or "cost" not in data or "dag_cost" in data:
        return data
    plan = dict(data)
    cost = dict(plan.pop("cost") or {})
    request = plan.get("request") or {}
    workload = request.get("workload") or {}
    osl = int(workload.get("osl", 1))
    budget = int(request.get("gpus", 1))
    deployment = dict(plan["deployment"]) if isinstance(plan.get("deployment"), dict) else None
    memory = cost.get("memory") or [{}]
    capacity = float(memory[0].get("capacity_gb", 1.0)) or 1.0
    gpus = int(deployment["gpus_used"]) if deployment else budget
    moved = ["cost -> figures and dag_cost"]
    if cost:
        rps = deployment.pop("requests_per_s", None) if deployment else None
        flat = {**cost, **({"requests_per_s": rps} if rps is not None else {})}
        figures = _figures(flat, osl, gpus, budget, capacity)
        plan["figures"] = figures
        targets = Targets(ttft_ms=workload.get("ttft_ms"), tpot_ms=workload.get("tpot_ms"), rate=workload.get("rate"))
        plan["misses"] = [m.model_dump() for m in misses(Figures.model_validate(figures), targets)]
        plan["dag_cost"] = {**{k: v for k, v in cost.items() if k not in OLD_HEADLINE}, "figures": figures}
    if deployment is not None:
        deployment.pop("requests_per_s", None)
        points = []
        for point in deployment.get("frontier", []):
            used = int(point.get("gpus_used", gpus))
            kept = {k: point[k] for k in ("strategy", "concurrency", "meets_targets", "chosen") if k in point}
            points.append({**kept, "figures": _figures(point, osl, used, budget, capacity)})
        deployment["frontier"] = points
        plan["deployment"] = deployment
        moved.append("deployment.frontier[] figures -> figures (memory not recorded: read as 0)")
    alternatives = []
    for alt in plan.get("alternatives", []):
        used = int(alt.get("gpus_used") or gpus)
        kept = {k: alt[k] for k in ("strategy", "concurrency", "why_not") if k in alt}
        alternatives.append({**kept, "figures": _figures(alt, osl, used, budget, capacity)})
    plan["alternatives"] = alternatives
    warnings.warn(
        "a plan written by shardplan 0.1: read with its keys moved (" + "; ".join(moved) + "); write it again with "
        "`shardplan plan -o` before 0.3 drops this reading",
        DeprecatedFieldWarning,
        stacklevel=2,
    )
    return plan
