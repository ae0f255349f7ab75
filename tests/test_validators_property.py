"""Property tests of the validators: no false alarm on any buildable strategy, and no exception on any
JSON whatever its shape."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mutation_cases import drawn_node_size, trimmed_model

from shardplan.contracts.arithmetic.feasibility import strategy_problems
from shardplan.contracts.reports import ValidationReport
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.validators.schema_check import INTERNAL_RULE, validate_json
from shardplan.validators.validate import validate

MODELS = ("llama-3.1-8b", "qwen3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b")
MAX_GPUS = 32


@st.composite
def buildable(draw: st.DrawFn) -> tuple[Any, Strategy, Workload]:
    """A model cut to a few layers, a strategy the builder accepts for it, and a workload."""
    model = trimmed_model(draw(st.sampled_from(MODELS)), draw(st.integers(2, 5)))

    def phase(prefill: bool) -> PhaseStrategy:
        pp = draw(st.integers(1, min(3, model.num_layers)))
        adp, tp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4]))
        sp = draw(st.sampled_from([1, 2, 4])) if prefill else 1
        stage = adp * sp * tp
        experts = model.moe.num_experts if model.moe else 1
        ep = draw(st.sampled_from([d for d in (1, 2, 4, 8) if stage % d == 0 and experts % d == 0]))
        return PhaseStrategy(
            dp=draw(st.sampled_from([1, 2])), pp=pp, adp=adp, sp=sp, tp=tp, ep=ep, mb=draw(st.integers(1, 3))
        )

    prefill = phase(prefill=True)
    if draw(st.booleans()):
        strategy = Strategy(prefill=prefill, decode=phase(prefill=False), disaggregated=True)
    else:  # shared GPUs: decode keeps the weight sharding and turns prefill's SP into attention DP
        decode = prefill.model_copy(
            update={"sp": 1, "adp": prefill.adp * prefill.sp, "mb": draw(st.integers(1, 3))}
        )
        strategy = Strategy(prefill=prefill, decode=decode)
    workload = Workload(
        isl=draw(st.sampled_from([16, 64, 200])),
        osl=draw(st.sampled_from([2, 16])),
        batch=draw(st.sampled_from([8, 24, 64])),
    )
    assume(strategy.gpus <= MAX_GPUS)
    assume(not strategy_problems(model, strategy, workload, strategy.gpus, drawn_node_size(strategy)))
    return model, strategy, workload


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
@given(buildable())
def test_no_error_on_any_buildable_strategy(case: tuple[Any, Strategy, Workload]) -> None:
    model, strategy, workload = case
    per_node = drawn_node_size(strategy)
    dag = build_dag(model, make_cluster("H100", strategy.gpus, per_node), strategy, workload)
    report = validate(dag)
    errors = [f"{v.rule}: {v.message}" for v in report.violations if v.severity == "error"]
    assert report.valid, (strategy.to_spec(), errors)


# -- fuzzing -----------------------------------------------------------------------------------------------
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)
# Values a careless producer would write: close to valid, so that many mutants pass the schema and reach
# the rules themselves.
PLAUSIBLE = st.one_of(
    st.integers(-3, 12),
    st.sampled_from(
        [
            "prefill",
            "decode",
            "handoff",
            "data",
            "pipeline",
            "sync",
            "state",
            "all_reduce",
            "send",
            "recv",
            "kv_read",
            "kv_write",
            "step_boundary",
            "attention",
            "expert",
            "router",
            "norm",
            "tp_reduce",
            "ep_combine",
            "sp_kv_gather",
            "decode/step_t+1",
            "prefill/end",
            "step_end",
            "row",
        ]
    ),
    st.lists(st.integers(-2, 9), max_size=4),
    st.none(),
    st.booleans(),
    st.dictionaries(st.sampled_from(["q_len", "m", "n"]), st.integers(0, 9), max_size=2),
)


def _assert_report(report: object) -> None:
    assert isinstance(report, ValidationReport)
    assert not any(v.rule == INTERNAL_RULE for v in report.violations), report.violations
    assert report.valid == (not any(v.severity == "error" for v in report.violations))


@settings(max_examples=80, deadline=None)
@given(JSON)
def test_random_json_gets_a_report_never_an_exception(value: object) -> None:
    _assert_report(validate_json(value))
    _assert_report(validate_json(json.dumps(value)))


@functools.lru_cache(maxsize=1)
def _seed_document() -> str:
    model = trimmed_model("mixtral-8x7b", 2)
    strategy = Strategy(prefill=PhaseStrategy(tp=2, ep=2, pp=2, mb=2), decode=PhaseStrategy(tp=2, ep=2, pp=2))
    return build_dag(
        model, make_cluster("H100", 4), strategy, Workload(isl=16, osl=4, batch=4)
    ).model_dump_json()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (the document itself excluded)."""
    found = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.append((*prefix, key))
        found += _paths(child, (*prefix, key))
    return found


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**6), st.sampled_from(["set", "delete", "swap"]), st.one_of(PLAUSIBLE, JSON)
        ),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_dag_json_gets_a_report_never_an_exception(edits: list[tuple[int, str, Any]]) -> None:
    document = json.loads(_seed_document())
    for pick, action, value in edits:
        paths = _paths(document)
        path = paths[pick % len(paths)]
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if action == "delete":
            del parent[key]
        elif action == "swap" and isinstance(parent, list) and parent:
            parent[key] = copy.deepcopy(parent[(key + 1) % len(parent)])
        else:
            parent[key] = value
    _assert_report(validate_json(document))
