"""Validation of DAG JSON from outside: JSON Schema first, then the rule registry.

:func:`validate_json` accepts JSON text, bytes or an already parsed object; a DAG or a whole plan (whose
``dag`` it checks). Every schema error becomes a violation of rule ``SCHEMA`` naming its JSON path, e.g.
``$.nodes[3].kind``; only a schema-valid DAG is loaded and handed to :func:`validate`. It never raises:
malformed input gets a report, not an exception.

>>> report = validate_json('{"schema_version": "1"}')
>>> report.valid, sorted({v.rule for v in report.violations})
(False, ['SCHEMA'])
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticError

from shardplan.contracts.dag import DAG, Edge, Node
from shardplan.contracts.plan import dag_part
from shardplan.contracts.reports import ValidationReport, Violation
from shardplan.contracts.schemas import json_schema
from shardplan.contracts.units import rename_old_fields
from shardplan.errors import InputError
from shardplan.limits import check_dag_size
from shardplan.reading import parse_json_text
from shardplan.text import counted
from shardplan.validators.validate import validate

__all__ = [
    "SCHEMA_RULE",
    "INTERNAL_RULE",
    "MAX_SCHEMA_VIOLATIONS",
    "validate_json",
    "schema_violations",
]

SCHEMA_RULE = "SCHEMA"
"""Rule ID of JSON and JSON Schema problems; not a knowledge rule, it cites the published schema."""
INTERNAL_RULE = "INTERNAL"
"""Rule ID of a validator that failed on its input: a bug to report, never expected."""
MAX_SCHEMA_VIOLATIONS = 200
"""Schema errors listed one by one; the rest are counted in one closing violation."""

_NODE: TypeAdapter[Any] = TypeAdapter(Node)
_EDGE: TypeAdapter[Any] = TypeAdapter(Edge)
_CITATION = "schemas/dag.schema.json (shardplan schema dag)"
_SCHEMA_FIX = "make the document match the DAG JSON Schema (shardplan schema dag)"
_JSON_FIX = "give a DAG or plan JSON file (shardplan build -o, plan -o) with finite numbers of at most 19 digits"
_MESSAGE_CHARS = 240


def _validator() -> Draft202012Validator:
    return Draft202012Validator(json_schema("dag"))


def _path(prefix: str, parts: Any) -> str:
    """A JSON path such as ``$.nodes[3].kind`` below ``prefix``."""
    text = prefix
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            text += f".{part}"
        else:
            text += f"[{json.dumps(str(part))}]"
    return text


def _short(text: str) -> str:
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


def _leaves(error: ValidationError) -> list[ValidationError]:
    """The errors to report for ``error``: for a node (``oneOf`` over node kinds), those of the branch its
    ``kind`` selects, since the other branches fail only because the kind differs."""
    if error.validator != "oneOf" or not error.context or not isinstance(error.instance, dict):
        return [error]
    mapping = (
        error.schema.get("discriminator", {}).get("mapping", {}) if isinstance(error.schema, dict) else {}
    )
    target = mapping.get(error.instance.get("kind")) if isinstance(error.instance.get("kind"), str) else None
    branches = error.validator_value if isinstance(error.validator_value, list) else []
    for index, branch in enumerate(branches):
        if target and isinstance(branch, dict) and branch.get("$ref") == target:
            chosen = [
                e for e in error.context if e.relative_schema_path and e.relative_schema_path[0] == index
            ]
            if chosen:
                return [leaf for e in chosen for leaf in _leaves(e)]
    return [error]


def _describe(error: ValidationError, prefix: str) -> Violation:
    path = _path(prefix, error.absolute_path)
    if error.validator == "oneOf" and isinstance(error.instance, dict):
        mapping = (
            error.schema.get("discriminator", {}).get("mapping", {}) if isinstance(error.schema, dict) else {}
        )
        kind = error.instance.get("kind")
        message = (
            f"{path}.kind: {json.dumps(kind)[:60] if kind is not None else 'missing'} is not a node kind "
            f"(one of {', '.join(sorted(mapping))})"
        )
    else:
        message = f"{path}: {_short(error.message)}"
    return Violation(
        rule=SCHEMA_RULE, severity="error", message=message, nodes=[], citation=_CITATION, fix=_SCHEMA_FIX
    )


def schema_violations(obj: Any, prefix: str = "$") -> Iterator[Violation]:
    """Every JSON Schema error of ``obj`` as a DAG, one violation each, in document order."""
    for error in _validator().iter_errors(obj):
        for leaf in _leaves(error):
            yield _describe(leaf, prefix)


def _report(violations: list[Violation], nodes: int = 0, edges: int = 0) -> ValidationReport:
    return ValidationReport(
        valid=not any(v.severity == "error" for v in violations),
        violations=violations,
        rules_checked=[SCHEMA_RULE],
        nodes=nodes,
        edges=edges,
    )


def _schema_error(message: str, fix: str = _SCHEMA_FIX) -> Violation:
    return Violation(rule=SCHEMA_RULE, severity="error", message=message, citation=_CITATION, fix=fix)


def _size(obj: Any, key: str) -> int:
    value = obj.get(key) if isinstance(obj, dict) else None
    return len(value) if isinstance(value, list) else 0


def validate_json(source: Any) -> ValidationReport:
    """Validate a DAG (or a plan holding one) given as JSON text, bytes or a parsed object.

    Never raises: unreadable JSON, schema errors (each with its JSON path), a DAG too large to check
    and a validator failure all come back as violations of a report whose ``valid`` is false.
    """
    try:
        return _validate_json(source)
    except RecursionError:
        return _report([_schema_error("$: the document nests too deeply to be checked")])
    except Exception as exc:  # noqa: BLE001  (the promise is a report, never an exception)
        return _report(
            [
                Violation(
                    rule=INTERNAL_RULE,
                    severity="error",
                    message=f"the validator failed on this input: {type(exc).__name__}: {_short(str(exc))}",
                    fix="report this input as a shardplan bug",
                )
            ]
        )


def _renamed_cluster_fields(dag: Any) -> Any:
    """``dag`` with the old ``*_gbps`` bandwidth names of its cluster moved to ``*_gb_per_s`` (with a
    deprecation warning), so that a DAG written before the rename still meets the schema."""
    meta = dag.get("meta") if isinstance(dag, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("cluster"), dict):
        return dag
    cluster = meta["cluster"]
    try:
        cluster = rename_old_fields(cluster, "cluster")
        if isinstance(cluster.get("gpu"), dict):
            cluster = {**cluster, "gpu": rename_old_fields(cluster["gpu"], "gpu")}
    except ValueError:
        return dag  # both names given: the schema check names the unknown key
    return {**dag, "meta": {**meta, "cluster": cluster}}


def _validate_json(source: Any) -> ValidationReport:
    if isinstance(source, (str, bytes)):
        try:
            source = parse_json_text(source, what="the input", field="dag", fix=_JSON_FIX)
        except InputError as exc:
            return _report([_schema_error(str(exc), fix=exc.fix or _SCHEMA_FIX)])
    obj, prefix = dag_part(source), "$"
    if obj is not source:
        prefix = "$.dag"
        if obj is None:
            return _report(
                [
                    _schema_error(
                        "$.dag: the plan holds no DAG (an infeasible plan has none)",
                        fix="validate a plan with status ok or targets_missed, or its DAG",
                    )
                ]
            )
    obj = _renamed_cluster_fields(obj)
    nodes, edges = _size(obj, "nodes"), _size(obj, "edges")
    try:
        check_dag_size(nodes, edges, what=f"{prefix}", field="dag")
    except InputError as exc:
        return _report([_schema_error(str(exc).removesuffix(f"; {exc.fix}"), fix=exc.fix or _SCHEMA_FIX)], nodes,
                       edges)
    # The strict model accepts a subset of what the schema accepts (the schema is generated from it, and strict
    # mode coerces nothing), in compiled code: a valid DAG of 100,000 nodes passes in about a second, where the
    # generic JSON Schema walk takes a millisecond per node. Only the items it refuses are walked by the schema,
    # for their JSON paths and messages.
    try:
        dag = DAG.model_validate(obj, strict=True)
    except PydanticError as exc:
        refused = exc
    else:
        return validate(dag)
    violations, more = _first_schema_violations(obj, prefix)
    if more:
        violations.append(_schema_error(f"{prefix}: more nodes or edges fail the schema, not listed "
                                        f"({counted(refused.error_count(), 'error', spec=',')} in all)"))
    if violations:
        return _report(violations, nodes, edges)
    try:
        dag = DAG.model_validate(obj)
    except PydanticError as exc:
        return _report(
            [
                _schema_error(f"{_path(prefix, error['loc'])}: {_short(error['msg'])}")
                for error in exc.errors()[:MAX_SCHEMA_VIOLATIONS]
            ],
            nodes,
            edges,
        )
    return validate(dag)


def _refused_items(obj: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """The nodes and edges (``("nodes", 3)``) the strict model refuses one by one, in document order."""
    for key, adapter in (("nodes", _NODE), ("edges", _EDGE)):
        items = obj.get(key)
        for index, item in enumerate(items if isinstance(items, list) else []):
            try:
                adapter.validate_python(item, strict=True)
            except PydanticError:
                yield key, index


def _first_schema_violations(obj: Any, prefix: str) -> tuple[list[Violation], bool]:
    """Schema violations of ``obj`` without its node and edge lists, then of each refused node and edge alone,
    at most :data:`MAX_SCHEMA_VIOLATIONS`; and whether refused items were left unchecked past them. Stopping
    there keeps a DAG of 200,000 bad nodes from costing 200,000 schema walks."""
    if not isinstance(obj, dict):
        return list(itertools.islice(schema_violations(obj, prefix), MAX_SCHEMA_VIOLATIONS)), False
    skeleton = {k: ([] if k in ("nodes", "edges") and isinstance(v, list) else v) for k, v in obj.items()}
    violations = list(itertools.islice(schema_violations(skeleton, prefix), MAX_SCHEMA_VIOLATIONS))
    root = json_schema("dag")
    for key, index in _refused_items(obj):
        if len(violations) >= MAX_SCHEMA_VIOLATIONS:
            return violations, True
        item_schema = {"$defs": root.get("$defs", {}), **root["properties"][key]["items"]}
        for error in Draft202012Validator(item_schema).iter_errors(obj[key][index]):
            violations.extend(_describe(leaf, f"{prefix}.{key}[{index}]") for leaf in _leaves(error))
    return violations[:MAX_SCHEMA_VIOLATIONS], False
