"""The batch runner: every (case, policy) pair through the planner, one JSON line per finished pair.

Each finished pair is appended to ``OUT/results.jsonl`` and flushed to disk at once, so a run that is
interrupted (Ctrl-C, a killed job, a crash) loses at most the pairs that were still running. With
``resume=True`` the runner first drops a truncated last line, then skips every pair already in the
file: no pair is lost and none is run twice. Without ``resume`` a run starts a fresh file.

What one line holds (see :func:`run_case`): the plan's status, strategy and figures; whether it is a
valid plan; how many of the case's expectations held and which failed; whether the targets were met;
the gap to the best strategy the exhaustive search finds, on the objective's metric; the policy's
model calls (``iterations``), tool calls and tokens when the run went through a chat model (else
null; counted by :mod:`.metering`); the wall time; and the error text when the run raised.

The exhaustive search and the reference strategy are computed outside the timed part, once per
request (the search shares :func:`shardplan.tools.api.search_request`'s memo with the agent's tools,
so a builtin run does not pay for it twice).
"""

from __future__ import annotations

import inspect
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shardplan.agent.parse.plan_request import to_plan_request
from shardplan.agent.parse.request import parse_request
from shardplan.agent.policies import redact
from shardplan.agent.run import run_plan
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InputError, ShardplanError
from shardplan.evals.cases import Case
from shardplan.evals.checks import CaseRun, Score, run_checks
from shardplan.evals.metering import metered
from shardplan.executor import ExecutorChoice, run_calls
from shardplan.tools.api.shared import evaluate_strategy, search_request
from shardplan.tools.planning.planner import resolve_request

__all__ = ["RESULTS_FILE", "run_eval", "run_case", "read_results", "Baselines", "pending_pairs"]

RESULTS_FILE = "results.jsonl"
"""Name of the results file inside the output folder."""


# ------------------------------------------------------------------------------------------------ results file



def _sharding(spec: str) -> tuple[tuple[int, int, int], ...]:
    """How a strategy shards the weights, per phase: (pp, tp, ep). Microbatches, replicas and how tokens are
    split (sp, adp) do not change it, so a plan can match a published layout without matching its spec."""
    strategy = parse_strategy(spec)
    return tuple((p.pp, p.tp, p.ep) for p in (strategy.prefill, strategy.decode))

def read_results(path: str | Path) -> list[dict[str, Any]]:
    """The records of a results file, in order; a truncated or malformed line is skipped, a missing
    file is empty.

    >>> read_results("/nonexistent/results.jsonl")
    []
    """
    target = Path(path)
    if not target.exists():
        return []
    records = []
    for line in target.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "case" in record and "policy" in record:
            records.append(record)
    return records


def _drop_partial_tail(path: Path) -> None:
    """Cut a last line that was being written when the run stopped, so the next append starts clean."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


def pending_pairs(cases: Sequence[Case], policies: Sequence[str],
                  done: set[tuple[str, str]]) -> list[tuple[Case, str]]:
    """The (case, policy) pairs not yet in ``done``, case by case in order."""
    return [(case, policy) for case in cases for policy in policies if (case.id, policy) not in done]


# -------------------------------------------------------------------------------------------- baselines


class Baselines:
    """The exhaustive search's best and the reference strategies' evaluations, computed once per request
    (shared by every policy of a run, and by threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._values: dict[str, Any] = {}

    def _once(self, key: str, compute: Callable[[], Any]) -> Any:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._values:
                try:
                    self._values[key] = ("ok", compute())
                except Exception as exc:  # recorded on the case's line, never fatal to the run
                    self._values[key] = ("error", _error_text(exc))
            return self._values[key]

    def best(self, request: PlanRequest) -> tuple[Score | None, str | None]:
        """The search's best strategy for ``request``; None (and why) when nothing fits or it failed."""
        def compute() -> Score | None:
            result = search_request(request)
            if isinstance(result, Exception) or not result.candidates:
                return None
            c = result.candidates[0]
            f = c.figures
            return Score(c.spec, f.ttft_ms, f.tpot_ms, f.tokens_per_s_per_gpu, c.meets_targets)

        state, value = self._once("search:" + request.model_copy(update={"policy": "builtin"}).model_dump_json(),
                                  compute)
        return (value, None) if state == "ok" else (None, value)

    def reference(self, request: PlanRequest, spec: str) -> tuple[Any, str | None]:
        """The reference strategy built, validated and priced (a StrategyCheck), or None and why."""
        def compute() -> Any:
            return evaluate_strategy(request, spec)

        key = "reference:" + spec + ":" + request.model_copy(update={"policy": "builtin"}).model_dump_json()
        state, value = self._once(key, compute)
        return (value, None) if state == "ok" else (None, value)


# ----------------------------------------------------------------------------------------------- one case


def _error_text(exc: BaseException) -> str:
    text = redact(str(exc) or type(exc).__name__)
    return f"{type(exc).__name__}: {text}"[:1000]


def _run_plan(request: PlanRequest, policy: str) -> Plan:
    if "policy" in inspect.signature(run_plan).parameters:
        return run_plan(request, progress=False, policy=policy)
    if policy != "builtin":
        raise ShardplanError(f"this build's run_plan takes no policy, so policy {policy!r} cannot run")
    return run_plan(request, progress=False)


def _read_prompt(case: Case, policy: str, run: CaseRun) -> PlanRequest | None:
    """The request a plain-language case stands for; None (with ``run.contradictions`` set) when the
    runner has to ask back instead of planning."""

    parsed = parse_request(case.request.prompt or "")
    if parsed.contradictions:
        run.contradictions = list(parsed.contradictions)
        return None
    return to_plan_request(parsed, policy=policy)


def _resolve_per_node(request: PlanRequest) -> int | None:
    try:
        return resolve_request(request)[1].gpus_per_node
    except ShardplanError:
        return None


def run_case(case: Case, policy: str, baselines: Baselines | None = None) -> dict[str, Any]:
    """Run ``case`` through ``policy`` and score it: the JSON record of one results line. Never raises
    for a failing run; the error text goes into the record."""
    baselines = baselines or Baselines()
    run = CaseRun(case=case)
    asked_back: str | None = None
    began = time.perf_counter()
    with metered() as meter:
        try:
            if case.request.prompt is not None:
                run.request = _read_prompt(case, policy, run)
                if run.request is None:
                    asked_back = " ".join(run.contradictions)
            else:
                run.request = case.request.to_plan_request(policy)
            if run.request is not None:
                run.plan = _run_plan(run.request, policy)
        except InputError as exc:
            if case.request.prompt is not None and run.plan is None and run.request is None:
                asked_back = str(exc)  # the parser's question back (a missing field)
            else:
                run.error = _error_text(exc)
        except Exception as exc:  # any failure of the policy is a scored result, not a crash of the run
            run.error = _error_text(exc)
    wall_s = time.perf_counter() - began

    search_error = None
    if run.request is not None:
        run.gpus_per_node = _resolve_per_node(run.request)
        run.best, search_error = baselines.best(run.request)
        if case.reference is not None:
            run.reference, run.reference_error = baselines.reference(run.request, case.reference)
    elif case.reference is not None:
        run.reference_error = "no request to evaluate the reference against"

    checks = run_checks(run)
    failures = [c.message for c in checks if not c.passed]
    plan, score, gap = run.plan, run.score, run.cost_gap
    workload = run.request.workload if run.request is not None else None
    used_model = meter.model_calls > 0
    return {
        "case": case.id,
        "policy": policy,
        "status": plan.status if plan is not None else ("error" if run.error else "asked_back"),
        "strategy": score.strategy if score else None,
        "valid_plan": bool(plan is not None and plan.strategy is not None and plan.validation is not None
                           and plan.validation.valid),
        "expects_plan": case.expects_plan,
        "expectations": len(checks),
        "expectations_met": len(checks) - len(failures),
        "passed": not failures,
        "failures": failures,
        "targets_met": (not plan.misses if plan is not None and plan.figures is not None
                        and workload is not None and (workload.ttft_ms or workload.tpot_ms) else None),
        "objective": workload.objective if workload else None,
        "metric": round(score.value(workload), 6) if score and workload else None,
        "reference": case.reference,
        "matches_reference": (score.strategy == parse_strategy(case.reference).to_spec()
                              if score is not None and case.reference is not None else None),
        "matches_reference_sharding": (_sharding(score.strategy) == _sharding(case.reference)
                                       if score is not None and case.reference is not None else None),
        "best_strategy": run.best.strategy if run.best else None,
        "best_metric": round(run.best.value(workload), 6) if run.best and workload else None,
        "cost_gap": round(gap, 6) if gap is not None else None,
        "ttft_ms": round(plan.figures.ttft_ms, 4) if plan is not None and plan.figures else None,
        "tpot_ms": round(plan.figures.tpot_ms, 4) if plan is not None and plan.figures else None,
        "tokens_per_s_per_gpu": round(plan.figures.tokens_per_s_per_gpu, 4) if plan is not None and plan.figures
        else None,
        "min_gpus": plan.min_gpus if plan is not None else None,
        "iterations": meter.model_calls if used_model else None,
        "tool_calls": meter.tool_calls if used_model else None,
        "tokens": meter.tokens,
        "wall_s": round(wall_s, 4),
        "asked_back": asked_back,
        "search_error": search_error,
        "error": run.error,
        "tags": list(case.tags),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


# ------------------------------------------------------------------------------------------------- the run


def _append(handle: Any, record: dict[str, Any]) -> None:
    handle.write(json.dumps(record, separators=(",", ":")) + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def _run_pair(pair: tuple[Case, str, Baselines | None]) -> dict[str, Any]:
    """One (case, policy) pair's record: the executor's unit of work."""
    return run_case(*pair)


def run_eval(cases: Sequence[Case], policies: Sequence[str], out_dir: str | Path, workers: int = 1,
             resume: bool = False,
             on_result: Callable[[dict[str, Any], int, int], None] | None = None,
             choice: ExecutorChoice | None = None) -> list[dict[str, Any]]:
    """Run every (case, policy) pair and append one line per finished pair to ``out_dir/results.jsonl``.

    ``workers`` threads run pairs at once (the planner is CPU-bound Python, so 1 or 2 is the useful
    range); ``choice`` runs them elsewhere instead (local processes, a Ray cluster: the sweep's executor).
    ``on_result(record, done, total)`` is called in the calling thread after each line is on
    disk; ``done`` and ``total`` count the pairs of this run, resumed ones included.

    Returns the records of the requested pairs, in case and policy order (earlier runs' records
    included when resuming).

    Raises:
        InputError: no policies, a repeated policy, workers below 1, or an output folder that cannot be made.
    """
    if not policies:
        raise InputError("no policy to evaluate", field="policy", fix="give --policy builtin or --policy openai:MODEL")
    if len(set(policies)) != len(policies):
        raise InputError("a policy is given twice", field="policy", fix="give each --policy once")
    if workers < 1:
        raise InputError(f"workers={workers} is below 1", field="workers", fix="use 1 or 2 workers")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {out}: {exc.strerror}", field="out", fix="choose a writable folder") from None
    path = out / RESULTS_FILE
    if resume:
        _drop_partial_tail(path)
    else:
        path.write_text("")
    wanted = {(case.id, policy) for case in cases for policy in policies}
    kept: dict[tuple[str, str], dict[str, Any]] = {}
    for record in read_results(path):
        if (record["case"], record["policy"]) in wanted:
            kept[(record["case"], record["policy"])] = record
    todo = pending_pairs(cases, policies, set(kept))
    total, done = len(wanted), len(kept)
    # Threads share one memo of the searches; processes and Ray workers each keep their own.
    choice = choice or ExecutorChoice("threads", workers=workers)
    baselines = Baselines() if choice.backend == "threads" else None
    with path.open("a") as handle:
        for _, record in run_calls(_run_pair, [(case, policy, baselines) for case, policy in todo], choice):
            _append(handle, record)
            kept[(record["case"], record["policy"])] = record
            done += 1
            if on_result is not None:
                on_result(record, done, total)
    order = {pair: i for i, pair in enumerate((c.id, p) for c in cases for p in policies)}
    return sorted(kept.values(), key=lambda r: order[(r["case"], r["policy"])])
