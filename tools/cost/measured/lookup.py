"""Evaluate queries against the measured tables, many at a time, and remember every answer.

One call into the compiled engine costs about a millisecond whatever it prices, so queries that share
a lookup point (phase, batch, sequence length) go in one call; answers are cached per loaded table
set for the life of the process, which is what keeps a whole strategy search fast.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from shardplan.tools.cost.measured.database import MeasuredTables
from shardplan.tools.cost.measured.queries import Query

__all__ = ["lookup_seconds"]

# Per table set: query -> seconds, or None when the tables do not cover it (or only extrapolate).
_CACHE: dict[str, dict[Query, float | None]] = defaultdict(dict)
# Provenance tiers the engine reports for an answer read from measured points (``mixed``: some of
# the op's sub-kernels measured, the rest interpolated from neighbours).
_MEASURED_TIERS = {"silicon", "mixed"}


def _build_op(query: Query, name: str) -> Any:
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk import operations as ops

    a = query.args
    if query.op == "gemm":
        return ops.GEMM(name, 1, a[0], a[1], common.GEMMQuantMode[str(a[2])])
    if query.op == "context_attention":
        kv, fmha = common.KVCacheQuantMode[str(a[2])], common.FMHAQuantMode[str(a[3])]
        return ops.ContextAttention(name, 1, a[0], a[1], kv, fmha, head_size=a[4], window_size=a[5])
    if query.op == "generation_attention":
        return ops.GenerationAttention(
            name, 1, a[0], a[1], common.KVCacheQuantMode[str(a[2])], head_size=a[3], window_size=a[4]
        )
    if query.op == "context_mla":
        return ops.ContextMLA(name, 1, a[0], common.KVCacheQuantMode[str(a[1])], common.FMHAQuantMode[str(a[2])])
    if query.op == "generation_mla":
        return ops.GenerationMLA(name, 1, a[0], common.KVCacheQuantMode[str(a[1])])
    if query.op in ("generation_mla_module", "context_mla_module"):
        # vLLM's module rows are measured with bf16 attention math (``mla_dtype``) whatever the KV format.
        kv, gemm = common.KVCacheQuantMode[str(a[1])], common.GEMMQuantMode[str(a[2])]
        return ops.MLAModule(name, 1, query.context, a[0], kv, common.FMHAQuantMode.bfloat16, gemm,
                             native_num_heads=a[3])
    if query.op == "moe":
        quant = common.MoEQuantMode[str(a[6])]
        return ops.MoE(name, 1, a[0], a[1], a[2], a[3], a[4], a[5], quant, str(a[7]), 1)
    if query.op == "custom_allreduce":
        return ops.CustomAllReduce(name, 1, a[0], a[1])
    if query.op == "nccl":
        return ops.NCCL(name, 1, str(a[0]), a[1], a[2], common.CommQuantMode.half)
    raise ValueError(f"unknown measured operation {query.op!r}")


def _point(query: Query) -> tuple[bool, int, int, int]:
    """Where the engine reads the query: token-shaped ops take their rows as the batch."""
    if query.op in ("context_attention", "generation_attention", "context_mla", "generation_mla",
                    "generation_mla_module", "context_mla_module"):
        return query.context, query.batch, query.seq, query.prefix
    return False, query.batch, 1, 0


def _uncovered() -> tuple[type[Exception], ...]:
    """What the engine raises for an operation its tables do not cover: data missing for the op's key or the
    system (``PerfDataNotAvailableError``: "MoE data missing for MoeKey ...", "OneCCL data not configured"), a
    compute format the system has no peak for (``MissingSystemFlopsError``: nvfp4 on a GPU without FP4), no
    neighbours to interpolate from, or no analytic fallback. Each is an answer (no measured time), not a fault;
    anything else (a bug here, an interrupt, a caller's alarm) must surface."""
    from aiconfigurator_core.sdk import errors

    return (errors.PerfDataNotAvailableError, errors.MissingSystemFlopsError,
            errors.InterpolationDataNotAvailableError, errors.EmpiricalNotImplementedError,
            errors.SolNotImplementedError, errors.UnsupportedAttentionBackendError,
            errors.UnsupportedWideepConfigError)


def _ops_json(queries: list[Query]) -> str:
    """The engine's JSON of ``queries``, named ``q0``, ``q1``, ... (a malformed query raises here)."""
    from aiconfigurator_core.sdk.engine import build_ops_json

    return str(build_ops_json([_build_op(q, f"q{i}") for i, q in enumerate(queries)]))


def _evaluate(
    tables: MeasuredTables, point: tuple[bool, int, int, int], queries: list[Query], ops_json: str | None = None
) -> list[float | None]:
    """Seconds of each of ``queries`` at ``point``, in one call to the engine; None where the tables do not cover
    one. An uncovered op fails the whole call, so the call is split in halves until that op stands alone.
    ``ops_json``: the queries already built (:func:`_ops_json`)."""
    context, batch, seq, prefix = point
    ops_json = ops_json if ops_json is not None else _ops_json(queries)
    try:
        rows = tables.handle.evaluate_ops_json(ops_json, is_context=context, batch_size=batch, s=seq, prefix=prefix)
    except _uncovered():
        if len(queries) == 1:
            return [None]
        half = len(queries) // 2
        return _evaluate(tables, point, queries[:half]) + _evaluate(tables, point, queries[half:])
    by_name = {row[0]: row for row in rows}
    answers: list[float | None] = []
    for i in range(len(queries)):
        row = by_name.get(f"q{i}")
        answers.append(float(row[1]) * 1e-3 if row and row[3] in _MEASURED_TIERS and row[1] > 0 else None)
    return answers


def lookup_seconds(tables: MeasuredTables, queries: Iterable[Query]) -> dict[Query, float | None]:
    """Seconds of each query on ``tables`` (None where the tables do not cover it)."""
    cache = _CACHE[tables.label]
    wanted = set(queries)
    missing: dict[tuple[bool, int, int, int], list[Query]] = defaultdict(list)
    for query in wanted:
        if query.op == "none":
            cache[query] = 0.0
        elif query not in cache:
            missing[_point(query)].append(query)
    # Every query is built before any is evaluated: a malformed one is a bug that shows before the engine runs,
    # whatever order the lookup points come in.
    built = {point: _ops_json(group) for point, group in missing.items()}
    for point, group in missing.items():
        for query, seconds in zip(group, _evaluate(tables, point, group, built[point]), strict=True):
            cache[query] = seconds
    return {q: cache[q] for q in wanted}
