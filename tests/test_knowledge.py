"""The knowledge base: rule IDs, rule lookup, BM25 search and strategy-driven section selection."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.resources import files

import pytest

from shardplan.knowledge.retriever import Section, search, sections_for_strategy
from shardplan.knowledge.rules import KnowledgeRule, get_rule, iter_rule_lines, load_rules, split_sections

REQUIRED_RULES: dict[str, str] = {
    **{f"DAG-{i}": "mandatory" for i in range(1, 6)},
    "PH-1": "mandatory",
    "PH-2": "informational",
    **{f"DEC-{i}": "mandatory" for i in range(1, 6)},
    **{f"TP-{i}": "mandatory" for i in range(1, 5)},
    "TP-5": "recommended",
    "TP-6": "informational",
    **{f"PP-{i}": "mandatory" for i in range(1, 5)},
    "PP-5": "informational",
    **{f"EP-{i}": "mandatory" for i in range(1, 4)},
    "EP-4": "mandatory",
    **{f"SP-{i}": "mandatory" for i in range(1, 6)},
    **{f"HIER-{i}": "mandatory" for i in range(1, 4)},
    **{f"MB-{i}": "mandatory" for i in range(1, 5)},
    "OVL-1": "mandatory",
    "OVL-2": "informational",
    "KV-1": "mandatory",
    "KV-2": "mandatory",
    "MEM-1": "mandatory",
    "SPEC-1": "mandatory",
}

DOCS = [
    "01-phases.md",
    "02-tensor-parallelism.md",
    "03-pipeline-parallelism.md",
    "04-expert-parallelism.md",
    "05-sequence-parallelism.md",
    "06-data-parallelism.md",
    "07-microbatching.md",
    "08-overlap.md",
    "09-combinations.md",
    "10-decode-constraints.md",
    "11-dag-vocabulary.md",
    "12-tp-allreduce-and-pp-vs-tp.md",
    "13-memory.md",
    "14-data-flow-and-state.md",
]

RULE_DEFINITION = re.compile(r"^- \*\*([A-Z]+-\d+)\*\* \(", re.MULTILINE)


def _doc_texts() -> dict[str, str]:
    root = files("shardplan.knowledge") / "docs"
    return {p.name: p.read_text(encoding="utf-8") for p in root.iterdir() if p.name.endswith(".md")}


def test_every_topic_document_ships() -> None:
    assert sorted(_doc_texts()) == DOCS


def test_every_listed_rule_is_defined_exactly_once_in_the_raw_documents() -> None:
    definitions = [rule_id for text in _doc_texts().values() for rule_id in RULE_DEFINITION.findall(text)]
    for rule_id in REQUIRED_RULES:
        assert definitions.count(rule_id) == 1, f"{rule_id} defined {definitions.count(rule_id)} times"
    assert len(definitions) == len(set(definitions)), "some rule ID is defined twice"


def test_listed_rules_parse_with_the_expected_severity() -> None:
    rules = load_rules()
    for rule_id, severity in REQUIRED_RULES.items():
        assert rules[rule_id].severity == severity, rule_id


def test_every_rule_has_a_valid_severity_text_doc_and_section() -> None:
    rules = load_rules()
    headings = {
        (name, heading)
        for name, text in _doc_texts().items()
        for heading, _ in split_sections(text)
        if heading
    }
    for rule_id, rule in rules.items():
        assert rule.id == rule_id
        assert rule.severity in {"mandatory", "recommended", "informational"}
        assert len(rule.text.split()) >= 5, rule_id
        assert (rule.doc, rule.section) in headings, rule_id


def test_rules_sit_in_the_document_of_their_topic() -> None:
    rules = load_rules()
    assert rules["SP-1"].doc == "05-sequence-parallelism.md"
    assert rules["TP-6"].doc == "12-tp-allreduce-and-pp-vs-tp.md"
    assert rules["DEC-1"].doc == "10-decode-constraints.md"
    assert rules["DAG-1"].doc == "11-dag-vocabulary.md"
    assert {rules[f"HIER-{i}"].doc for i in (1, 2)} == {"09-combinations.md"}


def test_get_rule_returns_the_parsed_rule_case_insensitively() -> None:
    rule = get_rule(" sp-1 ")
    assert isinstance(rule, KnowledgeRule)
    assert rule.id == "SP-1"
    assert "decode" in rule.text


def test_get_rule_of_unknown_id_names_a_close_one() -> None:
    with pytest.raises(KeyError, match=r"DEC-\d"):
        get_rule("DEC-99")
    with pytest.raises(KeyError, match="HIER-1"):
        get_rule("HEIR-1")


def test_duplicate_or_malformed_rule_lines_are_rejected() -> None:
    with pytest.raises(ValueError, match="does not match"):
        list(iter_rule_lines("x.md", "## S\n- **AB-1** (must): text\n"))
    parsed = list(iter_rule_lines("x.md", "# T\n## First\n- **AB-1** (recommended): do this thing.\n"))
    assert [(r.id, r.severity, r.section, r.text) for r in parsed] == [
        ("AB-1", "recommended", "First", "do this thing.")
    ]


def test_search_puts_the_seed_001_section_in_the_top_three() -> None:
    results = search("all-reduce blocks residual add")
    top = [(s.doc, s.heading) for s in results[:3]]
    assert ("12-tp-allreduce-and-pp-vs-tp.md", "Why the all-reduce blocks the residual add") in top
    assert results[0].doc == "12-tp-allreduce-and-pp-vs-tp.md"


def test_search_for_decode_sequence_parallelism_finds_sp_1() -> None:
    results = search("decode sequence parallelism", k=3)
    assert any("SP-1" in s.rule_ids for s in results)


def test_search_scores_are_positive_and_descending() -> None:
    results = search("expert dispatch all-to-all", k=5)
    assert 0 < len(results) <= 5
    scores = [s.score for s in results]
    assert scores == sorted(scores, reverse=True)
    assert all(score > 0 for score in scores)
    assert any("EP-1" in s.rule_ids for s in results)


def test_search_without_known_terms_is_empty_and_bad_k_is_rejected() -> None:
    assert search("zzzqqq xyzzy") == []
    assert search("") == []
    with pytest.raises(ValueError, match="k must be"):
        search("tensor", k=0)


def test_sections_for_tp_and_pp_cover_tp_pp_and_decode_but_not_ep() -> None:
    sections = sections_for_strategy({"tp": 4, "pp": 2}, {"tp": 4, "pp": 2, "dp": 1, "mb": 1}, moe=False)
    docs = {s.doc for s in sections}
    assert {"01-phases.md", "02-tensor-parallelism.md", "03-pipeline-parallelism.md"} <= docs
    assert "10-decode-constraints.md" in docs
    assert "04-expert-parallelism.md" not in docs
    assert "05-sequence-parallelism.md" not in docs
    combination_headings = {s.heading for s in sections if s.doc == "09-combinations.md"}
    assert combination_headings == {"Nesting order and GPU count", "TP + PP"}


def test_sections_for_strategy_is_deterministic_and_duplicate_free() -> None:
    prefill = {"tp": 4, "pp": 2, "sp": 2, "ep": 8, "mb": 2}
    decode = {"tp": 4, "pp": 2, "ep": 8, "adp": 2}
    first = sections_for_strategy(prefill, decode, moe=True)
    second = sections_for_strategy(dict(reversed(prefill.items())), decode, moe=True)
    keys = [(s.doc, s.heading) for s in first]
    assert keys == [(s.doc, s.heading) for s in second]
    assert len(keys) == len(set(keys))
    assert keys == sorted(keys, key=lambda key: (DOCS.index(key[0]), keys.index(key)))
    docs = {s.doc for s in first}
    assert {"04-expert-parallelism.md", "05-sequence-parallelism.md", "06-data-parallelism.md"} <= docs
    assert {"07-microbatching.md", "10-decode-constraints.md"} <= docs
    headings = {s.heading for s in first if s.doc == "09-combinations.md"}
    assert headings == {"Nesting order and GPU count", "TP + SP + PP + EP", "TP + PP + EP"}


def test_sections_for_a_single_gpu_still_include_phases_and_decode_constraints() -> None:
    docs = {s.doc for s in sections_for_strategy({}, {}, moe=False)}
    assert docs == {"01-phases.md", "09-combinations.md", "10-decode-constraints.md"}
    assert "04-expert-parallelism.md" in {s.doc for s in sections_for_strategy({}, {}, moe=True)}


def test_sections_for_strategy_rejects_bad_degrees() -> None:
    with pytest.raises(ValueError, match="unknown degree 'tpp'"):
        sections_for_strategy({"tpp": 2}, {}, moe=False)
    with pytest.raises(ValueError, match="tp=0"):
        sections_for_strategy({}, {"tp": 0}, moe=False)


def test_sections_carry_their_rule_ids() -> None:
    section = next(s for s in sections_for_strategy({}, {}, moe=False) if "DEC-1" in s.rule_ids)
    assert isinstance(section, Section)
    assert section.doc == "10-decode-constraints.md"
    assert "**DEC-1**" in section.text


def test_importing_the_package_does_not_import_bm25s() -> None:
    code = "import sys, shardplan.knowledge; print('bm25s' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
