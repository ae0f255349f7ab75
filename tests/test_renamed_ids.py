"""A DAG whose node ids are all renamed validates and prices exactly as the original, through the CLI and the MCP
tools: the phase boundaries and the node roles pricing depends on are read from fields, never from ids or names.

Each renamed DAG also relabels every node's ``name`` and every ``kv_state``, as a DAG from another tool would,
so a test fails if any id, name or KV-state label is parsed for meaning again. The cases cover a dense model in
a pipeline (pp=2), a disaggregated layout (its KV handoff) and DeepSeek-V3's shared experts, whose all-reduce
pricing folds into the routed experts' one.
"""

from __future__ import annotations

import doctest
import json
import random
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_here, run_main
from mcp import Client
from test_mcp import error, ok, talk

from shardplan.contracts import dag_roles
from shardplan.contracts.dag import DAG
from shardplan.contracts.dag_roles import BOUNDARY_ROLES, phase_bounds
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.cost.estimate import estimate_cost
from shardplan.tools.cost.schedule import schedule_dag
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request
from shardplan.tools.report.timeline import phase_windows, trace_events
from shardplan.tools.surfaces.mcp_server import build_server

WORKLOAD = ["--isl", "128", "--osl", "8", "-b", "4"]
CASES: dict[str, list[str]] = {
    "dense pipeline": ["-m", "llama-3.1-8b", "-n", "4", "-s", "tp=2,pp=2"],
    "disaggregated": ["-m", "llama-3.1-8b", "-n", "4", "-s", "prefill:tp=2;decode:tp=2;disagg"],
    "shared experts": ["-m", "deepseek-ai/DeepSeek-V3", "-g", "H200", "-n", "8", "-s", "tp=8"],
}


def renamed(dag: dict[str, Any], seed: int = 7) -> tuple[dict[str, Any], dict[str, str]]:
    """``dag`` with every node id replaced by ``n0``, ``n1``, ... in a shuffled order (edges rewritten), every
    name set to the new id and every kv_state to ``kv0``, ``kv1``, ...; and the map from old ids to new."""
    ids = [node["id"] for node in dag["nodes"]]
    numbers = list(range(len(ids)))
    random.Random(seed).shuffle(numbers)
    new = {old: f"n{k}" for old, k in zip(ids, numbers, strict=True)}
    states: dict[str, str] = {}
    nodes = []
    for node in dag["nodes"]:
        node = {**node, "id": new[node["id"]], "name": new[node["id"]]}
        if node.get("kv_state") is not None:
            node["kv_state"] = states.setdefault(node["kv_state"], f"kv{len(states)}")
        nodes.append(node)
    edges = [{**edge, "src": new[edge["src"]], "dst": new[edge["dst"]]} for edge in dag["edges"]]
    return {**dag, "nodes": nodes, "edges": edges}, new


def without(dag: dict[str, Any], doomed: set[str]) -> dict[str, Any]:
    """``dag`` without the nodes ``doomed`` and their edges."""
    return {**dag, "nodes": [n for n in dag["nodes"] if n["id"] not in doomed],
            "edges": [e for e in dag["edges"] if e["src"] not in doomed and e["dst"] not in doomed]}


def boundary_ids(dag: dict[str, Any], *roles: str) -> set[str]:
    """Ids of the step boundaries of ``roles``, found by fields."""
    found = dag_roles.step_boundaries(DAG.model_validate(dag).nodes)
    return {node_id for role in roles for node_id in found[role]}  # type: ignore[index]


def write(path: Path, dag: dict[str, Any]) -> str:
    path.write_text(json.dumps(dag))
    return str(path)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each case's DAG as ``shardplan build`` writes it."""
    folder = tmp_path_factory.mktemp("built")
    dags = {}
    for name, args in CASES.items():
        path = folder / f"{name.replace(' ', '_')}.json"
        assert run_main(["build", *args, *WORKLOAD, "-o", str(path)]) == 0
        dags[name] = json.loads(path.read_text())
    return dags


def verdict(path: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """``shardplan validate``'s exit code and the rule ids it reports, sorted."""
    result = run_here(capsys, "validate", path, "--json")
    report = json.loads(result.stdout)
    return result.returncode, sorted(v["rule"] for v in report["violations"])


def priced(path: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``shardplan cost FILE --json``, which must succeed."""
    result = run_here(capsys, "cost", path, "--json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


@pytest.mark.parametrize("case", CASES)
def test_a_renamed_dag_validates_and_prices_as_the_original_through_the_cli(
    case: str, built: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = built[case]
    twin, new = renamed(original)
    assert not {n["id"] for n in twin["nodes"]} & {n["id"] for n in original["nodes"]}
    first, second = write(tmp_path / "original.json", original), write(tmp_path / "renamed.json", twin)

    assert verdict(second, capsys) == verdict(first, capsys) == (0, [])
    expected, got = priced(first, capsys), priced(second, capsys)
    # The critical paths name nodes: the same nodes, under their new ids. Every figure is identical.
    for phase in ("prefill", "decode"):
        for step in expected[phase]["critical_path"]:
            step["node"] = new[step["node"]]
    assert got == expected
    figures = got["figures"]
    assert figures["ttft_ms"] > 0 and figures["tpot_ms"] > 0 and figures["tokens_per_s"] > 0 and got["memory"]
    if case == "disaggregated":
        assert got["kv_transfer_ms"] > 0


def test_a_renamed_dag_breaks_the_same_rules(
    built: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = built["dense pipeline"]
    [end] = boundary_ids(original, "decode_end")
    # Step t+1 no longer waits for the decode KV writes (DEC-5), found by kind, not by id.
    writes = {n["id"] for n in original["nodes"] if n["kind"] == "kv_write" and n["phase"] == "decode"}
    broken = {**original, "edges": [e for e in original["edges"] if not (e["src"] in writes and e["dst"] == end)]}
    code, rules = verdict(write(tmp_path / "broken.json", broken), capsys)
    assert code != 0 and "DEC-5" in rules
    assert verdict(write(tmp_path / "renamed.json", renamed(broken)[0]), capsys) == (code, rules)


def test_the_mcp_tools_check_and_price_a_renamed_dag_as_the_original(built: dict[str, dict[str, Any]]) -> None:
    cases = ("shared experts", "disaggregated")

    async def scenario(c: Client) -> list[tuple[Any, ...]]:
        answers = []
        for case in cases:
            original, twin = built[case], renamed(built[case])[0]
            answers.append(tuple([ok(await c.call_tool("validate_dag", {"dag_json": dag}))
                                  for dag in (original, twin)]
                                 + [ok(await c.call_tool("estimate_cost", {"dag_json": json.dumps(dag)}))
                                    for dag in (original, twin)]))
        return answers

    for case, (checked, checked_twin, cost, cost_twin) in zip(cases, talk(build_server(), scenario), strict=True):
        assert checked["valid"] is True and checked_twin == checked, case
        assert cost["figures"]["tpot_ms"] > 0 and cost_twin == cost, case


def test_a_dag_without_a_phase_boundary_is_refused_in_one_line(
    built: dict[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = built["dense pipeline"]
    # Without its prefill start the DAG still validates; pricing names the fields the boundary needs.
    no_start = write(tmp_path / "no_start.json", renamed(without(original, boundary_ids(original, "prefill_start")))[0])
    assert verdict(no_start, capsys) == (0, [])
    # Without its decode boundaries the DAG fails validation, which the cost command reports in one line too.
    no_decode = write(tmp_path / "no_decode.json", without(original, boundary_ids(original, "decode_start",
                                                                                    "decode_end")))
    for path, says in ((no_start, "phase 'prefill', boundary 'step_start'"), (no_decode, "DEC-1")):
        result = run_here(capsys, "cost", path, "--json")
        assert result.returncode == 2 and result.stdout == ""
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("error:") and says in line and "Traceback" not in result.stderr


def test_pricing_a_dag_without_decode_boundaries_raises_an_input_error(built: dict[str, dict[str, Any]]) -> None:
    original = built["dense pipeline"]
    dag = DAG.model_validate(without(original, boundary_ids(original, "decode_start", "decode_end")))
    with pytest.raises(InputError) as caught:
        estimate_cost(dag)
    assert caught.value.field == "nodes"
    assert "phase 'decode', boundary 'step_start', step 0" in str(caught.value)


def test_the_mcp_cost_tool_refuses_a_dag_without_a_prefill_start(built: dict[str, dict[str, Any]]) -> None:
    original = built["dense pipeline"]
    dag = renamed(without(original, boundary_ids(original, "prefill_start")))[0]
    refused = error(talk(build_server(), lambda c: c.call_tool("estimate_cost", {"dag_json": dag})))
    assert refused["field"] == "nodes" and "the start of prefill" in refused["message"]


def test_phase_bounds_are_read_from_fields(built: dict[str, dict[str, Any]]) -> None:
    original = built["disaggregated"]
    twin, new = renamed(original)
    bounds = phase_bounds(DAG.model_validate(original).nodes)
    assert phase_bounds(DAG.model_validate(twin).nodes) == type(bounds)(*(new[getattr(bounds, r)]
                                                                        for r in BOUNDARY_ROLES))
    # Two boundaries that open decode step t: ambiguous, so refused rather than one picked.
    start = next(n for n in original["nodes"] if n["id"] == bounds.decode_start)
    doubled = DAG.model_validate({**original, "nodes": [*original["nodes"], {**start, "id": "again"}]})
    with pytest.raises(InputError, match="2 step boundaries for the start of decode step t"):
        phase_bounds(doubled.nodes)
    assert doctest.testmod(dag_roles).failed == 0


def test_the_timeline_and_trace_of_a_renamed_plan_mark_the_same_phase_boundaries() -> None:
    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=4, workload=Workload(isl=128, osl=8, batch=4))
    model, cluster = resolve_request(request)
    original = plan_for_strategy(request, model, cluster, parse_strategy("prefill:tp=2;decode:tp=2;disagg"))
    assert original.dag is not None
    twin_dag, new = renamed(original.dag.model_dump(mode="json"))
    twin = original.model_copy(update={"dag": DAG.model_validate(twin_dag)})
    assert twin.dag is not None

    def marks(trace: dict[str, object], names: dict[str, str]) -> list[tuple[str, float]]:
        events = trace["traceEvents"]
        assert isinstance(events, list)
        return [(names.get(e["name"], e["name"]), e["ts"]) for e in events if e["ph"] == "i"]

    expected = marks(trace_events(original), new)
    assert len(expected) == 4 and marks(trace_events(twin), {}) == expected
    assert phase_windows(twin.dag, schedule_dag(twin.dag, cluster)) == phase_windows(
        original.dag, schedule_dag(original.dag, cluster))
