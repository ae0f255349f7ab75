"""Reading DAG and plan files given on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shardplan.contracts.dag import DAG
from shardplan.contracts.deployment_checks import check_deployment
from shardplan.contracts.first_error import first_error
from shardplan.contracts.plan import Plan, dag_part
from shardplan.errors import InputError
from shardplan.limits import MAX_DAG_CHARS, check_dag_size
from shardplan.reading import parse_json_text, read_text
from shardplan.text import counted, one_line
from shardplan.validators.validate import validate

__all__ = ["read_json", "read_dag", "read_plan", "require_valid"]


def read_json(path: Path) -> Any:
    """Parsed JSON of ``path``.

    Raises:
        InputError: the file is missing or is not JSON.
    """
    fix = "give a DAG (shardplan build -o) or plan (shardplan plan -o) file"
    if not path.exists():
        raise InputError(f"no file {one_line(str(path), 200)}", field="file", fix="give the path of a DAG or plan JSON")
    what = one_line(str(path), 200)
    text = read_text(path, what=what, field="file", fix=fix, limit=MAX_DAG_CHARS)
    data = parse_json_text(text, what=what, field="file", fix=fix)
    dag = dag_part(data)
    if isinstance(dag, dict):
        nodes, edges = dag.get("nodes"), dag.get("edges")
        check_dag_size(len(nodes) if isinstance(nodes, list) else 0, len(edges) if isinstance(edges, list) else 0,
                       what=what, field="dag")
    return data


def read_dag(path: Path) -> DAG:
    """The DAG in a DAG file, or in a plan file's ``dag`` key.

    Raises:
        InputError: unreadable file, or JSON that is not a DAG; the message names the first bad field.
    """
    data = dag_part(read_json(path))
    if data is None:
        raise InputError(f"{path} holds no DAG (an infeasible plan?)", field="dag", fix="give a plan with a strategy")
    try:
        return DAG.model_validate(data)
    except ValidationError as exc:
        where, message = first_error(exc, data)
        raise InputError(
            f"{path} is not a DAG: {where}: {message}", field=where, fix="check it with shardplan validate FILE"
        ) from None


def read_plan(path: Path) -> Plan:
    """The Plan in ``path``, its deployment in agreement with its strategy and request.

    Raises:
        InputError: a missing or unreadable file, one that is not a plan (a DAG, a malformed plan), or a plan
            whose deployment disagrees with itself (:func:`~shardplan.contracts.deployment_checks.check_deployment`).
    """
    data = read_json(path)
    fix = "write one with shardplan plan ... -o plan.json"
    if not isinstance(data, dict) or "request" not in data or "status" not in data:
        hint = " (it looks like a DAG; give the plan file)" if isinstance(data, dict) and "nodes" in data else ""
        raise InputError(f"{path} is not a plan file{hint}", field="file", fix=fix)
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        where, message = first_error(exc, data, Plan)
        raise InputError(f"{path} is not a valid plan: {where}: {message}", field=where, fix=fix) from None
    return check_deployment(plan)  # a plan edited out of agreement with itself is refused by every command


def require_valid(dag: DAG, path: Path) -> DAG:
    """``dag`` when it passes validation, so it can be scheduled and priced.

    A DAG that ``shardplan validate`` rejects (a cycle, an edge to a missing node, a broken decode step)
    has no schedule to price or draw; it is refused here with the first violation rather than failing
    deep in the scheduler.

    Raises:
        InputError: the first error-level violation, and how many there are.
    """

    check_dag_size(len(dag.nodes), len(dag.edges), what=one_line(str(path), 200), field="dag")
    report = validate(dag)
    errors = [v for v in report.violations if v.severity == "error"]
    if errors:
        first = errors[0]
        raise InputError(f"{one_line(str(path), 200)} holds a DAG that fails validation "
                         f"({counted(len(errors), 'error')}; "
                         f"first {first.rule}: {one_line(first.message, 200)})", field="dag",
                         fix=f"see shardplan validate {one_line(str(path), 200)}, and price a valid DAG")
    return dag
