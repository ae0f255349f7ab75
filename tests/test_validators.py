"""The validators: rule coverage of the knowledge base, no false alarms on builder DAGs, every mutant
caught by the rule it breaks, JSON Schema errors with paths, and ``shardplan validate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_here
from mutation_cases import CASES, WORKLOAD, Case, case_dag, format_kill_table, kill_table, trimmed_model
from mutations import MUTATIONS

from shardplan.contracts.dag import DAG
from shardplan.contracts.reports import ValidationReport
from shardplan.contracts.strategy import parse_strategy
from shardplan.knowledge.rules import get_rule, load_rules
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.views.exports import collapse
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import INFORMATIONAL, MAX_LISTED, RULES
from shardplan.validators.schema_check import validate_json
from shardplan.validators.validate import validate

# One strategy per combination of TP, SP, PP and EP (all 15), on models cut to a few layers.
COMBINATIONS: list[Case] = [
    Case("llama-3.1-8b", 4, 2, "tp=2"),
    Case("llama-3.1-8b", 4, 2, "sp=2"),
    Case("llama-3.1-8b", 4, 2, "pp=2"),
    Case("mixtral-8x7b", 4, 2, "adp=2,ep=2"),
    Case("qwen3-8b", 4, 4, "sp=2,tp=2"),
    Case("llama-3.1-8b", 4, 4, "tp=2,pp=2"),
    Case("mixtral-8x7b", 4, 2, "tp=2,ep=2"),
    Case("llama-3.1-8b", 4, 4, "sp=2,pp=2"),
    Case("qwen3-30b-a3b", 4, 2, "sp=2,ep=2"),
    Case("mixtral-8x7b", 4, 4, "adp=2,ep=2,pp=2"),
    Case("llama-3.1-8b", 4, 8, "sp=2,tp=2,pp=2"),
    Case("deepseek-v3", 5, 4, "sp=2,tp=2,ep=4"),
    Case("mixtral-8x7b", 4, 4, "tp=2,ep=2,pp=2"),
    Case("gpt-oss-20b", 4, 4, "sp=2,pp=2,ep=2"),
    Case("mixtral-8x7b", 4, 8, "sp=2,tp=2,ep=2,pp=2,mb=2"),
]
# Whole models, per-phase strategies, disaggregation, data parallelism.
FULL_MODELS: list[tuple[str, int, str]] = [
    ("meta-llama/Llama-3.1-70B", 8, "tp=8"),
    ("Qwen/Qwen3-235B-A22B", 16, "prefill:sp=2,tp=4,ep=8,pp=2;decode:adp=2,tp=4,ep=8,pp=2"),
    ("openai/gpt-oss-120b", 6, "prefill:tp=4,ep=4;decode:tp=2,ep=2;disagg"),
    ("mistralai/Mixtral-8x22B-v0.1", 8, "dp=2,tp=2,ep=2,pp=2,mb=2"),
]


def _errors(report: ValidationReport) -> set[str]:
    return {v.rule for v in report.violations if v.severity == "error"}


# -- the registry against the knowledge base -------------------------------------------------------
def test_every_registered_rule_cites_an_existing_knowledge_rule() -> None:
    severity = {"mandatory": "error", "recommended": "warning", "informational": "info"}
    for rule_id, entry in RULES.items():
        knowledge = get_rule(rule_id)
        assert entry.id == knowledge.id == rule_id
        assert entry.severity == severity[knowledge.severity]
        assert entry.citation == f"{knowledge.doc} § {knowledge.section}"
        assert entry.title and entry.check.__doc__


def test_every_knowledge_rule_is_checked_or_informational_with_a_reason() -> None:
    knowledge = set(load_rules())
    assert set(RULES) | set(INFORMATIONAL) == knowledge
    assert not set(RULES) & set(INFORMATIONAL)
    for rule_id, reason in INFORMATIONAL.items():
        assert get_rule(rule_id).id == rule_id
        assert len(reason) > 40, f"{rule_id} needs a real reason"
    mandatory_unchecked = {r for r in INFORMATIONAL if load_rules()[r].severity == "mandatory"}
    assert mandatory_unchecked == {"MEM-1"}, "only memory is left to the cost model"


# -- no false alarms -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", COMBINATIONS, ids=lambda c: c.spec)
def test_builder_dags_of_the_15_combinations_are_valid(case: Case) -> None:
    report = validate(case_dag(case))
    assert report.valid, [v.message for v in report.violations]
    assert report.violations == []
    assert report.rules_checked == list(RULES)


@pytest.mark.parametrize(("model", "gpus", "spec"), FULL_MODELS, ids=[m[2] for m in FULL_MODELS])
def test_builder_dags_of_whole_models_are_valid(model: str, gpus: int, spec: str) -> None:
    dag = build_dag(load_model(model), make_cluster("H100", gpus), parse_strategy(spec), WORKLOAD)
    report = validate(dag)
    assert _errors(report) == set(), [v.message for v in report.violations]
    assert (report.nodes, report.edges) == (len(dag.nodes), len(dag.edges))


@pytest.mark.parametrize("case", COMBINATIONS[-4:], ids=lambda c: c.spec)
def test_collapsed_views_are_checked_by_the_rules_that_survive_folding(case: Case) -> None:
    view = collapse(case_dag(case))
    report = validate(view)
    assert report.valid, [v.message for v in report.violations]
    skipped = {rule_id for rule_id, entry in RULES.items() if entry.full_graph}
    assert {"EP-1", "HIER-2", "DAG-5"} <= skipped
    assert set(report.rules_checked) == set(RULES) - skipped


def test_a_tp_group_wider_than_a_node_is_a_warning_only() -> None:
    dag = build_dag(
        trimmed_model("llama-3.1-70b", 2), make_cluster("H100", 16), parse_strategy("tp=16"), WORKLOAD
    )
    report = validate(dag)
    assert report.valid
    assert [(v.rule, v.severity) for v in report.violations] == [("TP-5", "warning")]
    assert "16" in report.violations[0].message and "8 GPUs" in report.violations[0].message


# -- mutation testing ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_mutant_is_caught_by_the_rule_it_breaks(name: str) -> None:
    op = MUTATIONS[name]
    severity = RULES[op.rule].severity
    applied = 0
    for case in CASES:
        mutant = op.apply(case_dag(case))
        if mutant is None:
            continue
        applied += 1
        report = validate(mutant)
        hits = [v for v in report.violations if v.rule == op.rule and v.severity == severity]
        assert hits, f"{name} on {case.label} not caught by {op.rule}: {[v.rule for v in report.violations]}"
        assert severity != "error" or not report.valid
        for v in hits:
            assert v.fix and v.citation and v.message
    assert applied, f"{name} ({op.applies}) applies to none of the cases"


def test_kill_rate_is_100_percent() -> None:
    rows = kill_table()
    table = format_kill_table(rows)
    print("\n" + table)
    assert sum(r.applied for r in rows) >= 3 * len(rows)
    assert all(r.killed == r.applied for r in rows), [r for r in rows if r.missed]
    assert table.endswith("kill rate 100.0%")


def test_every_registered_rule_has_a_mutation_that_triggers_it() -> None:
    assert len(MUTATIONS) >= 12
    assert set(RULES) <= {op.rule for op in MUTATIONS.values()}


def test_mutations_leave_their_input_untouched() -> None:
    case = CASES[2]
    dag = case_dag(case)
    before = dag.model_dump()
    for op in MUTATIONS.values():
        op.apply(dag)
    assert dag.model_dump() == before
    assert validate(dag).valid


# -- reports ---------------------------------------------------------------------------------------
def _bypass_all_reduces(dag: DAG) -> DAG:
    """The DAG with every all-reduce removed and its producer joined to its consumers."""
    reduces = {n.id for n in dag.nodes if n.kind == "all_reduce"}
    into = {e.dst: e.src for e in dag.edges if e.dst in reduces}
    edges = [e for e in dag.edges if e.src not in reduces and e.dst not in reduces]
    edges += [e.model_copy(update={"src": into[e.src]}) for e in dag.edges if e.src in reduces]
    return DAG.model_construct(
        schema_version="1", meta=dag.meta, nodes=[n for n in dag.nodes if n.id not in reduces], edges=edges
    )


def test_violations_name_nodes_quote_counts_and_cap_the_lists() -> None:
    report = validate(_bypass_all_reduces(case_dag(CASES[0])))
    tp2 = next(v for v in report.violations if v.rule == "TP-2")
    assert 0 < len(tp2.nodes) <= MAX_LISTED and 0 < len(tp2.edges) <= MAX_LISTED
    count = int(tp2.message.split()[0])
    assert count > MAX_LISTED, "the message counts every offender, the lists show the first few"
    assert tp2.citation == "02-tensor-parallelism.md § TP as one logical operation"
    assert "all-reduce" in tp2.fix


def test_errors_come_before_warnings() -> None:
    dag = case_dag(CASES[0])
    mutant = MUTATIONS["tp_group_across_nodes"].apply(MUTATIONS["drop_kv_read"].apply(dag))  # type: ignore[arg-type]
    assert mutant is not None
    severities = [v.severity for v in validate(mutant).violations]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert {"error", "warning"} <= set(severities)


def test_validate_can_run_a_subset_of_rules() -> None:
    mutant = MUTATIONS["drop_kv_read"].apply(case_dag(CASES[0]))
    assert mutant is not None
    report = validate(mutant, only=["dec-2", "TP-2"])
    assert report.rules_checked == ["DEC-2", "TP-2"]
    assert _errors(report) == {"DEC-2"}


def test_index_finds_a_real_cycle() -> None:
    mutant = MUTATIONS["close_cycle"].apply(case_dag(CASES[0]))
    assert mutant is not None
    ix = DagIndex(mutant)
    cycle = [ix.ids[i] for i in ix.cycle]
    edges = {(e.src, e.dst) for e in mutant.edges}
    assert len(cycle) >= 2
    assert all((cycle[k], cycle[(k + 1) % len(cycle)]) in edges for k in range(len(cycle)))
    assert DagIndex(case_dag(CASES[0])).cycle == []


# -- JSON input ------------------------------------------------------------------------------------
def _dag_json(case: Case = CASES[0]) -> dict[str, object]:
    return json.loads(case_dag(case).model_dump_json())


def test_valid_json_gives_the_same_report_as_the_dag() -> None:
    document = _dag_json()
    assert validate_json(json.dumps(document)) == validate(case_dag(CASES[0]))
    assert validate_json(document).valid


def test_every_schema_error_is_reported_with_its_json_path() -> None:
    document = _dag_json()
    nodes = document["nodes"]
    assert isinstance(nodes, list)
    nodes[3]["kind"] = "bogus"
    nodes[5]["ranks"] = "0,1"
    nodes[7]["stage"] = -1
    del document["meta"]["gpus"]  # type: ignore[index]
    report = validate_json(document)
    assert not report.valid and {v.rule for v in report.violations} == {"SCHEMA"}
    messages = [v.message for v in report.violations]
    for path in ("$.nodes[3].kind", "$.nodes[5].ranks", "$.nodes[7].stage", "$.meta"):
        assert any(m.startswith(path) for m in messages), (path, messages)
    assert len(messages) == 4
    assert all(v.citation.startswith("schemas/dag.schema.json") for v in report.violations)


def test_a_plan_is_checked_through_its_dag() -> None:
    plan = {"shardplan_version": "0.1.0", "dag": _dag_json()}
    assert validate_json(plan).valid
    plan["dag"]["edges"][0]["kind"] = "wormhole"  # type: ignore[index]
    report = validate_json(plan)
    assert report.violations[0].message.startswith("$.dag.edges[0].kind")
    empty = validate_json({"status": "infeasible", "dag": None})
    assert not empty.valid and "holds no DAG" in empty.violations[0].message


def test_model_errors_beyond_the_schema_get_paths_too() -> None:
    document = _dag_json()
    document["meta"]["model"]["layer_types"] = ["full"]  # type: ignore[index]
    report = validate_json(document)
    assert not report.valid
    assert report.violations[0].rule == "SCHEMA" and report.violations[0].message.startswith("$.meta.model")


def test_too_many_nodes_are_refused_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDPLAN_MAX_DAG_NODES", "10")
    report = validate_json(_dag_json())
    assert not report.valid
    assert "exceed the limit of 10" in report.violations[0].message


@pytest.mark.parametrize(
    "text", ["", "not json", "[1, 2", "\xff", "null", "[]", "42", '{"nodes": 3}', "[" * 100_000]
)
def test_unreadable_or_foreign_input_gets_a_report(text: str) -> None:
    report = validate_json(text)
    assert not report.valid
    assert report.violations and all(v.rule == "SCHEMA" for v in report.violations)


# -- the command line ------------------------------------------------------------------------------
def test_cli_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dag = case_dag(CASES[0])
    good, bypassed, broken = tmp_path / "dag.json", tmp_path / "bypassed.json", tmp_path / "broken.json"
    good.write_text(dag.model_dump_json())
    bypassed.write_text(_bypass_all_reduces(dag).model_dump_json())
    broken.write_text("{not json")

    ok = run_here(capsys, "validate", str(good))
    assert ok.returncode == 0, ok.stderr
    assert "valid" in ok.stdout

    bad = run_here(capsys, "validate", str(bypassed), "--json")
    assert bad.returncode == 1, bad.stderr
    report = json.loads(bad.stdout)
    assert report["valid"] is False
    assert "TP-2" in {v["rule"] for v in report["violations"]}

    table = run_here(capsys, "validate", str(bypassed))
    assert table.returncode == 1 and "TP-2" in table.stdout

    for path in (broken, tmp_path / "missing.json"):
        unreadable = run_here(capsys, "validate", str(path))
        assert unreadable.returncode == 2
        assert unreadable.stderr.startswith("error:") and len(unreadable.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("spec", ["tp=2", "prefill:sp=2;decode:adp=2"])
def test_a_dag_whose_concurrency_the_search_chooses_validates(spec: str) -> None:
    # Workload.batch None means "the search chooses"; every rule must read the sequences in flight instead.
    from shardplan.contracts.workload import Workload

    model = load_model("meta-llama/Llama-3.1-8B")
    workload = Workload(isl=8192, osl=64)
    assert workload.batch is None
    report = validate(build_dag(model, make_cluster("H100", 2), parse_strategy(spec), workload))
    assert not [v for v in report.violations if v.rule == "INTERNAL"]
    assert report.valid, [v.rule for v in report.violations]
