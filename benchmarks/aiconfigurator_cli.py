"""Reading AIConfigurator's command line (``aiconfigurator cli default`` and ``cli estimate``).

:mod:`aiconfigurator_run` installs and runs it; this module reads what it leaves behind: the
``best_config_topn.csv`` and ``exp_config.yaml`` files that ``cli default`` saves per experiment (agg,
disagg), and the summary box that ``cli estimate`` prints. The parsing functions are pure (text in,
dataclasses out) so that tests can feed them captured output without AIConfigurator installed. Nothing here
imports shardplan: the comparison treats both tools as black boxes.

Deployment vocabulary, shared with ``compare_aiconfigurator.py``: a *worker* is one engine instance with
its parallel layout (AIConfigurator's ``tp x pp x dp`` GPUs, where ``dp`` is attention data parallelism
and MoE layers regroup ``tp x dp`` as ``moe_tp x moe_ep``); an aggregated deployment is ``replicas``
identical workers; a disaggregated one is ``prefill_workers`` plus ``decode_workers``. Batch sizes that
AIConfigurator takes (``--batch-size``, ``--d-bs``) count sequences per attention-DP rank.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from typing import Literal

import yaml

__all__ = [
    "AIC_VERSION",
    "AicError",
    "Deployment",
    "Estimate",
    "SearchResult",
    "Worker",
    "best_deployment",
    "estimate_args",
    "outside_search_space",
    "parse_error",
    "parse_estimate",
    "parse_search_space",
    "slot_fill",
]

AIC_VERSION = "0.12.0"
# AIConfigurator's system names for the GPUs both tools know.
SYSTEMS = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm", "A100": "a100_sxm"}


class AicError(RuntimeError):
    """AIConfigurator could not be installed, did not finish, or said why it gave no result."""


@dataclass(frozen=True)
class Worker:
    """One engine instance's parallel layout, in AIConfigurator's terms."""

    tp: int = 1
    pp: int = 1
    dp: int = 1  # attention data parallelism inside the worker
    moe_tp: int = 1
    moe_ep: int = 1

    @property
    def gpus(self) -> int:
        """GPUs of the worker: ``tp x pp x dp``."""
        return self.tp * self.pp * self.dp

    def label(self, moe: bool) -> str:
        """Compact layout, e.g. ``tp4`` or ``tp1dp4 ep4`` (only the degrees above 1 beyond tp)."""
        text = f"tp{self.tp}" + (f"pp{self.pp}" if self.pp > 1 else "") + (f"dp{self.dp}" if self.dp > 1 else "")
        if moe and (self.moe_ep > 1 or self.moe_tp != self.tp * self.dp):
            text += f" ep{self.moe_ep}" + (f"etp{self.moe_tp}" if self.moe_tp > 1 else "")
        return text


@dataclass(frozen=True)
class Deployment:
    """A whole deployment: aggregated replicas, or prefill and decode pools, at a total concurrency."""

    mode: Literal["agg", "disagg"]
    concurrency: int  # sequences in flight across the deployment
    agg: Worker | None = None
    replicas: int = 1
    prefill: Worker | None = None
    prefill_workers: int = 0
    decode: Worker | None = None
    decode_workers: int = 0
    prefill_batch: int = 1  # prompts per prefill-worker step (disagg)
    decode_batch: int | None = None
    """Sequences in one decode worker's batch (disagg), when the planner says: AIConfigurator's disagg mode
    counts only decoding sequences as its concurrency, while the deployment's also holds those waiting for
    or in prefill."""

    @property
    def decoding(self) -> int:
        """Sequences AIConfigurator's ``--d-bs`` slots hold across the decode pool (disagg)."""
        if self.mode == "disagg" and self.decode_batch is not None:
            return self.decode_batch * self.decode_workers
        return self.concurrency

    @property
    def gpus_used(self) -> int:
        """GPUs of every worker of the deployment."""
        if self.mode == "agg":
            assert self.agg is not None
            return self.agg.gpus * self.replicas
        assert self.prefill is not None and self.decode is not None
        return self.prefill.gpus * self.prefill_workers + self.decode.gpus * self.decode_workers

    def label(self, moe: bool) -> str:
        """``4x tp2`` for replicas, ``2P tp1 + 1D tp8`` for pools."""
        if self.mode == "agg":
            assert self.agg is not None
            return f"{self.replicas}x {self.agg.label(moe)}"
        assert self.prefill is not None and self.decode is not None
        return f"{self.prefill_workers}P {self.prefill.label(moe)} + {self.decode_workers}D {self.decode.label(moe)}"


@dataclass(frozen=True)
class Estimate:
    """AIConfigurator's figures for one deployment (``cli estimate``'s summary box)."""

    ttft_ms: float
    tpot_ms: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    concurrency: float
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchResult:
    """``cli default``: its best deployment on the budget, with AIConfigurator's own figures."""

    best: Deployment
    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_gpu: float  # per GPU of the worker set, as AIConfigurator reports it
    tokens_per_s_per_budget_gpu: float  # idle GPUs of the budget count as zero (its own ranking)
    space: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    wall_s: float = 0.0


# --------------------------------------------------------------------------------------------------------
# Pure parsing


def _int(row: dict[str, str], key: str, default: int = 1) -> int:
    value = (row.get(key) or "").strip()
    return int(float(value)) if value else default


def _worker(row: dict[str, str], prefix: str = "") -> Worker:
    return Worker(
        tp=_int(row, f"{prefix}tp"),
        pp=_int(row, f"{prefix}pp"),
        dp=_int(row, f"{prefix}dp"),
        moe_tp=_int(row, f"{prefix}moe_tp"),
        moe_ep=_int(row, f"{prefix}moe_ep"),
    )


def best_deployment(agg_csv: str | None, disagg_csv: str | None, total_gpus: int) -> SearchResult:
    """The best row of ``cli default``'s ``best_config_topn.csv`` files, scaled to the GPU budget.

    Each CSV row is one replica (an agg worker, or one xPyD unit of a disagg deployment); the deployment
    is ``total_gpus // num_total_gpus`` copies of it, the rule AIConfigurator's own table applies. The best
    is the row with the most tokens/s per GPU of the budget. Raises ``AicError`` when neither file has a
    row (no configuration met the targets).
    """
    candidates: list[tuple[float, SearchResult]] = []
    for mode, text in (("agg", agg_csv), ("disagg", disagg_csv)):
        if not text:
            continue
        for row in csv.DictReader(io.StringIO(text)):
            unit_gpus = _int(row, "num_total_gpus")
            copies = max(total_gpus // unit_gpus, 0)
            if copies == 0:
                continue
            per_gpu = float(row["tokens/s/gpu"])
            per_budget = per_gpu * copies * unit_gpus / total_gpus
            concurrency = _int(row, "concurrency") * copies
            if mode == "agg":
                deployment = Deployment("agg", concurrency, agg=_worker(row), replicas=copies)
            else:
                deployment = Deployment(
                    "disagg",
                    concurrency,
                    prefill=_worker(row, "(p)"),
                    prefill_workers=_int(row, "(p)workers") * copies,
                    decode=_worker(row, "(d)"),
                    decode_workers=_int(row, "(d)workers") * copies,
                    prefill_batch=_int(row, "(p)bs"),
                )
            result = SearchResult(deployment, float(row["ttft"]), float(row["tpot"]), per_gpu, per_budget)
            candidates.append((per_budget, result))
    if not candidates:
        raise AicError("AIConfigurator found no configuration that meets the targets")
    return max(candidates, key=lambda item: item[0])[1]


_SPACE_KEYS = {"num_gpu": "gpus", "tp": "tp", "pp": "pp", "dp": "dp", "moe_tp": "moe_tp", "moe_ep": "moe_ep"}


def parse_search_space(exp_config_yaml: str) -> dict[str, dict[str, list[int]]]:
    """The candidate degrees of one ``exp_config.yaml``: ``{"agg": {"tp": [1, 2], ...}, "prefill": ...}``."""
    config = yaml.safe_load(exp_config_yaml) or {}
    space: dict[str, dict[str, list[int]]] = {}
    for role in ("agg", "prefill", "decode"):
        for key, name in _SPACE_KEYS.items():
            values = config.get(f"{role}_{key}_candidates")
            if values:
                space.setdefault(role, {})[name] = [int(value) for value in values]
    return space


def _outside_worker(worker: Worker, space: dict[str, list[int]], role: str, moe: bool) -> list[str]:
    checks = [("gpus", worker.gpus), ("tp", worker.tp), ("pp", worker.pp), ("dp", worker.dp)]
    if moe:
        checks += [("moe_tp", worker.moe_tp), ("moe_ep", worker.moe_ep)]
    reasons = []
    for name, value in checks:
        allowed = space.get(name)
        if allowed and value not in allowed:
            what = f"{value}-GPU worker" if name == "gpus" else f"{name}={value}"
            reasons.append(f"{role} {what} (AIC searches {name} in {allowed})")
    return reasons


def outside_search_space(
    deployment: Deployment, space: dict[str, dict[str, list[int]]], moe: bool, gpus_per_node: int
) -> list[str]:
    """Why AIConfigurator's default search could not have found this deployment (empty: it could).

    Compares each worker's degrees with the candidates that search swept (read from its own
    ``exp_config.yaml``), and names workers that span nodes.
    """
    workers: list[tuple[str, Worker | None]] = (
        [("agg", deployment.agg)]
        if deployment.mode == "agg"
        else [("prefill", deployment.prefill), ("decode", deployment.decode)]
    )
    reasons: list[str] = []
    for role, worker in workers:
        if worker is None:
            continue
        reasons += _outside_worker(worker, space.get(role, {}), role, moe)
        if worker.gpus > gpus_per_node:
            reasons.append(f"{role} worker spans {math.ceil(worker.gpus / gpus_per_node)} nodes")
    return reasons


_BOX_LINE = re.compile(r"^\s*([A-Za-z/() ]+?):\s+([-+0-9.,]+)\s*(ms|GB)?\s*$")
_ERROR_LINE = re.compile(r"^(\w*Error): (.+)$")


def parse_estimate(stdout: str, stderr: str = "") -> Estimate:
    """The figures of ``cli estimate``'s summary box; its KV-capacity warning goes into ``warnings``.

    Raises ``AicError`` with AIConfigurator's own message when there is no box (out of memory, bad layout).
    """
    start = stdout.find("Performance Estimate")
    if start < 0:
        raise AicError(parse_error(stdout + "\n" + stderr))
    fields: dict[str, float] = {}
    for line in stdout[start:].splitlines():
        match = _BOX_LINE.match(line)
        if match:
            fields.setdefault(match.group(1).strip(), float(match.group(2).replace(",", "")))
    needed = ("TTFT", "TPOT", "tokens/s", "tokens/s/gpu", "tokens/s/user", "Concurrency")
    missing = [name for name in needed if name not in fields]
    if missing:
        raise AicError(f"AIConfigurator's estimate lacks {', '.join(missing)}")
    warnings = tuple(
        line.split("] ", 1)[-1].strip()
        for line in (stdout + "\n" + stderr).splitlines()
        if "exceeds estimated KV cache capacity" in line
    )
    return Estimate(
        ttft_ms=fields["TTFT"],
        tpot_ms=fields["TPOT"],
        tokens_per_s=fields["tokens/s"],
        tokens_per_s_per_gpu=fields["tokens/s/gpu"],
        tokens_per_s_per_user=fields["tokens/s/user"],
        concurrency=fields["Concurrency"],
        warnings=warnings,
    )


def parse_error(output: str) -> str:
    """A failed command's own one-line reason: the last ``...Error: message`` line, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        match = _ERROR_LINE.match(line)
        if match:  # a generic exception type says nothing; a specific one (KeyError) is part of the reason
            return match.group(2) if match.group(1) in ("Error", "RuntimeError") else line
    meaningful = [line for line in lines if "DeprecationWarning" not in line and "sys.exit" not in line]
    return meaningful[-1] if meaningful else "AIConfigurator gave no output"


def estimate_args(deployment: Deployment, moe: bool, static: bool = False) -> list[str]:
    """``cli estimate`` options that describe the deployment: ``agg`` mode for one replica, ``disagg`` for
    the pools. Batch sizes are per attention-DP rank, rounded up so that every sequence has a slot.

    ``static`` asks for one static batch of an aggregated deployment instead (``--estimate-mode static``:
    the batch prefilled together, then decoded together), the same options otherwise."""

    def layout(worker: Worker, prefix: str) -> list[str]:
        args = [f"--{prefix}tp", str(worker.tp), f"--{prefix}pp", str(worker.pp), f"--{prefix}dp", str(worker.dp)]
        if moe:
            args += [f"--{prefix}etp", str(worker.moe_tp), f"--{prefix}ep", str(worker.moe_ep)]
        return args

    if deployment.mode == "agg":
        assert deployment.agg is not None
        per_rank = math.ceil(deployment.concurrency / (deployment.replicas * deployment.agg.dp))
        mode = "static" if static else "agg"
        return ["--estimate-mode", mode, *layout(deployment.agg, ""), "--batch-size", str(max(per_rank, 1))]
    assert deployment.prefill is not None and deployment.decode is not None
    per_rank = math.ceil(deployment.decoding / (deployment.decode_workers * deployment.decode.dp))
    return [
        "--estimate-mode",
        "disagg",
        *layout(deployment.prefill, "p-"),
        "--p-bs",
        str(deployment.prefill_batch),
        "--p-workers",
        str(deployment.prefill_workers),
        *layout(deployment.decode, "d-"),
        "--d-bs",
        str(max(per_rank, 1)),
        "--d-workers",
        str(deployment.decode_workers),
    ]


def slot_fill(deployment: Deployment) -> float:
    """Fraction of the batch slots given to ``cli estimate`` that the deployment's concurrency fills.

    ``estimate_args`` rounds the per-rank batch up; when the concurrency does not divide evenly (batch 1
    over 2 replicas) the estimate's throughput is scaled down by this fraction.
    """
    if deployment.mode == "agg":
        assert deployment.agg is not None
        ranks = deployment.replicas * deployment.agg.dp
    else:
        assert deployment.decode is not None
        ranks = deployment.decode_workers * deployment.decode.dp
    slots = max(math.ceil(deployment.decoding / ranks), 1) * ranks
    return deployment.decoding / slots
