"""shardplan's side of the AIConfigurator comparison: a plan JSON read as a deployment AIConfigurator can price.

``read_pick`` reads the plan's ``deployment`` section (concurrency, replicas, gpus_used, batching, prefill and
decode workers) when there is one, and otherwise the older plan's meaning (concurrency = the request's batch,
replicas = ``dp``). ``shardplan_spec`` goes the other way, so that shardplan can price AIConfigurator's best
deployment with ``-s SPEC --batch N``. shardplan is run as a command, never imported: any version compares.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiconfigurator_cli import Deployment, Worker, parse_error

__all__ = ["Pick", "read_pick", "run_shardplan", "shardplan_spec"]


@dataclass(frozen=True)
class Pick:
    """shardplan's answer, in AIConfigurator's deployment vocabulary, with shardplan's own figures."""

    status: str
    spec: str
    deployment: Deployment | None
    batching: str
    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_gpu: float  # shardplan's own prediction, per GPU of the budget
    notes: tuple[str, ...] = ()
    beyond_aic: tuple[str, ...] = ()  # parts of the plan that AIConfigurator cannot express at all
    fallback: Deployment | None = None  # a second reading of the plan, scored when the first one fails


def _phase_worker(phase: dict[str, Any], sp_as_attention_dp: bool = True) -> Worker:
    """A phase's layout as one AIConfigurator worker.

    AIConfigurator has no sequence parallelism. By default SP shards become attention-DP ranks of the
    same worker (the same GPUs, the MoE group kept whole); with ``sp_as_attention_dp=False`` they are left
    out, for a caller that scores each shard as a worker of its own.
    """
    ranks = int(phase.get("adp", 1)) * (int(phase.get("sp", 1)) if sp_as_attention_dp else 1)
    tp, ep = int(phase.get("tp", 1)), int(phase.get("ep", 1))
    if not sp_as_attention_dp:
        ep = min(ep, ranks * tp)  # the shard's own GPUs are all its experts can spread over
    return Worker(tp=tp, pp=int(phase.get("pp", 1)), dp=ranks, moe_tp=max(ranks * tp // ep, 1), moe_ep=ep)


def _spec(phase: dict[str, Any]) -> str:
    parts = [f"{key}={phase[key]}" for key in ("dp", "pp", "adp", "sp", "tp", "ep", "mb") if phase.get(key, 1) != 1]
    return ",".join(parts) or "tp=1"


def _prefill_batch(deployment_info: dict[str, Any], workload: dict[str, Any]) -> int:
    """Prompts one prefill worker takes per step: its pool's ``concurrency_per_worker``, else the request's."""
    return _pool_batch(deployment_info, "prefill") or int(workload.get("prefill_batch") or 1)


def _pool_batch(deployment_info: dict[str, Any], role: str) -> int | None:
    """Sequences one worker of the ``role`` pool holds, when the plan reports its pools."""
    for pool in deployment_info.get("pools") or []:
        if pool.get("role") == role and pool.get("concurrency_per_worker"):
            return int(pool["concurrency_per_worker"])
    return None


def shardplan_spec(deployment: Deployment) -> str:
    """AIConfigurator's deployment as a shardplan SPEC: replicas as ``dp``, attention DP as ``adp``."""

    def phase(worker: Worker, count: int) -> str:
        degrees = {"dp": count, "pp": worker.pp, "adp": worker.dp, "tp": worker.tp, "ep": worker.moe_ep}
        return ",".join(f"{key}={value}" for key, value in degrees.items() if value > 1 or key == "tp")

    if deployment.mode == "agg":
        assert deployment.agg is not None
        return phase(deployment.agg, deployment.replicas)
    assert deployment.prefill is not None and deployment.decode is not None
    prefill = phase(deployment.prefill, deployment.prefill_workers)
    return f"prefill:{prefill};decode:{phase(deployment.decode, deployment.decode_workers)};disagg"


def read_pick(plan: dict[str, Any]) -> Pick:
    """shardplan's plan JSON as a deployment AIConfigurator can estimate.

    Reads ``deployment`` (concurrency, replicas, gpus_used, batching, prefill/decode workers) when the plan
    has one; older plans without it mean concurrency = the request's batch and replicas = ``dp``.
    """
    budget = int(plan["request"]["gpus"])
    workload = plan["request"]["workload"]
    strategy = plan.get("strategy")
    figures = plan.get("figures") or {}
    status = str(plan.get("status", "ok"))
    if not strategy or not figures:
        reason = "; ".join(plan.get("messages") or []) or status
        return Pick(status, "-", None, "-", math.nan, math.nan, 0.0, (f"no strategy: {reason}",))
    deployment_info = plan.get("deployment") or {}
    prefill, decode = strategy["prefill"], strategy["decode"]
    concurrency = int(deployment_info.get("concurrency") or workload.get("batch") or 1)
    notes = [] if status == "ok" else [f"shardplan status {status}"]
    beyond: list[str] = []
    fallback: Deployment | None = None
    if strategy.get("disaggregated"):
        p_worker, d_worker = _phase_worker(prefill), _phase_worker(decode)
        # Worker counts are totals over the deployment (a split plan's ``replicas`` counts its decode workers).
        p_count = int(deployment_info.get("prefill_workers") or prefill.get("dp", 1))
        d_count = int(deployment_info.get("decode_workers") or decode.get("dp", 1))
        spec = f"{p_count}P {_spec({**prefill, 'dp': 1})} + {d_count}D {_spec({**decode, 'dp': 1})}"
        deployment = Deployment(
            "disagg",
            concurrency,
            prefill=p_worker,
            prefill_workers=p_count,
            decode=d_worker,
            decode_workers=d_count,
            prefill_batch=_prefill_batch(deployment_info, workload),
            decode_batch=_pool_batch(deployment_info, "decode"),
        )
        sp = int(prefill.get("sp", 1))
        if sp > 1:
            beyond.append(f"prefill sp={sp} (AIC has no sequence parallelism)")
            notes.append(f"AIC scores prefill sp={sp} as attention DP")
            # When AIConfigurator cannot price that width, each SP shard becomes a prefill worker of its own:
            # the same GPUs and prompt throughput, at a longer TTFT per prompt than SP gives.
            shard = _phase_worker(prefill, sp_as_attention_dp=False)
            fallback = replace(deployment, prefill=shard, prefill_workers=p_count * sp)
    else:
        replicas = int(deployment_info.get("replicas") or decode.get("dp", 1))
        deployment = Deployment("agg", concurrency, agg=_phase_worker(decode), replicas=replicas)
        if _spec({**prefill, "dp": 1}) != _spec({**decode, "dp": 1}):
            beyond.append(f"prefill layout {_spec({**prefill, 'dp': 1})} differs from decode's")
            notes.append("AIC's agg mode prices the decode layout for both phases")
        spec = f"{replicas}x {_spec({**decode, 'dp': 1})}"
    gpus_used = int(deployment_info.get("gpus_used") or deployment.gpus_used)
    own_per_budget = float(figures["tokens_per_s_per_gpu"]) * gpus_used / budget
    prefill_batch = workload.get("prefill_batch")
    batching = deployment_info.get("batching") or (f"prefill-batch {prefill_batch}" if prefill_batch else "static")
    return Pick(
        status=status,
        spec=f"{spec} c={concurrency}",
        deployment=deployment,
        batching=str(batching),
        ttft_ms=float(figures["ttft_ms"]),
        tpot_ms=float(figures["tpot_ms"]),
        tokens_per_s_per_gpu=own_per_budget,
        notes=tuple(notes),
        beyond_aic=tuple(beyond),
        fallback=fallback,
    )


def run_shardplan(shardplan: str, options: Sequence[str], timeout_s: float) -> tuple[Pick, float]:
    """``shardplan plan OPTIONS -o FILE``: the plan read as a ``Pick``, and the command's wall time.

    Raises ``RuntimeError`` with shardplan's last line of output when it fails or does not finish in time.
    """
    with tempfile.TemporaryDirectory(prefix="shardplan-") as folder:
        output = Path(folder) / "plan.json"
        command = [shardplan, "plan", *options, "--json", "-o", str(output)]
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as error:
            raise RuntimeError(f"shardplan plan did not finish within {timeout_s:.0f} s") from error
        wall = time.perf_counter() - started
        if done.returncode != 0 or not output.exists():
            # The exception line of a traceback (or shardplan's one-line error), not a note printed after it.
            raise RuntimeError(f"shardplan plan exited {done.returncode}: {parse_error(done.stderr or done.stdout)}")
        return read_pick(json.loads(output.read_text())), wall
