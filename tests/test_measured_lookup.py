"""The measured-table lookup treats only the engine's "not covered" errors as an answer (no measured time): a
batch with one uncovered op is split until that op stands alone, and every other error (a bug, an interrupt, a
caller's alarm) reaches the caller instead of turning into a silent None."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from shardplan.tools.cost.measured.database import measured_available, measured_tables
from shardplan.tools.cost.measured.lookup import lookup_seconds
from shardplan.tools.cost.measured.queries import Query

pytestmark = pytest.mark.skipif(not measured_available(), reason="aiconfigurator-core is not installed")

GEMMS = [Query("gemm", (4096, 4096, "bfloat16"), False, m) for m in (8, 16, 32, 64)]


class _Engine:
    """The real engine, except that a batch holding ``refused`` raises ``error`` (as the engine does for an op
    its tables lack: the whole call fails)."""

    def __init__(self, real: Any, refused: int, error: Exception) -> None:
        self.real, self.refused, self.error, self.calls = real, refused, error, 0

    def evaluate_ops_json(self, ops_json: str, **point: Any) -> Any:
        self.calls += 1
        if point["batch_size"] == self.refused:
            raise self.error
        return self.real.evaluate_ops_json(ops_json, **point)


def _tables(engine: _Engine, label: str) -> Any:
    tables = measured_tables("H100", "vllm")
    assert tables is not None
    # A version of its own, so the lookup's per-table cache starts empty for this test.
    return replace(tables, handle=engine, version=f"{tables.version}+{label}")


def test_an_uncovered_op_is_none_and_the_others_keep_their_times() -> None:
    from aiconfigurator_core.sdk.errors import PerfDataNotAvailableError

    tables = measured_tables("H100", "vllm")
    assert tables is not None
    engine = _Engine(tables.handle, refused=16, error=PerfDataNotAvailableError("GEMM data missing"))
    answers = lookup_seconds(_tables(engine, "uncovered"), GEMMS)
    assert answers[GEMMS[1]] is None
    assert all(answers[q] is not None and answers[q] > 0 for q in GEMMS if q is not GEMMS[1])


@pytest.mark.parametrize("error", [RuntimeError("a bug in the query"), KeyboardInterrupt(), TimeoutError("alarm")])
def test_any_other_error_reaches_the_caller(error: BaseException) -> None:
    tables = measured_tables("H100", "vllm")
    assert tables is not None
    engine = _Engine(tables.handle, refused=32, error=error)  # type: ignore[arg-type]
    with pytest.raises(type(error)):
        lookup_seconds(_tables(engine, type(error).__name__), GEMMS)


def test_a_query_that_cannot_be_built_is_a_bug_that_surfaces() -> None:
    tables = measured_tables("H100", "vllm")
    assert tables is not None
    engine = _Engine(tables.handle, refused=-1, error=RuntimeError())
    with pytest.raises(ValueError, match="unknown measured operation"):
        lookup_seconds(_tables(engine, "unbuildable"), [Query("no_such_op", (1,), False, 8), *GEMMS])
    assert engine.calls == 0
