"""The first error of a DAG or plan that pydantic refuses, found without listing every error.

``ValidationError.errors()`` builds every error: for a DAG whose 200,000 nodes all fail that is 200,000 dicts
and several seconds, to print one line. These helpers validate the document's parts instead (everything but
the node and edge lists, then each node and edge until one fails) and return the first error's place.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from shardplan.contracts.dag import DAG, Edge, Node

__all__ = ["first_error"]

_FEW = 20
"""Errors listed the plain way; past this many the parts are validated one by one."""
_ITEMS: dict[str, TypeAdapter[Any]] = {"nodes": TypeAdapter(Node), "edges": TypeAdapter(Edge)}


def _plain(exc: ValidationError, prefix: tuple[str | int, ...]) -> tuple[str, str]:
    error = exc.errors(include_url=False, include_context=False)[0]
    return ".".join(str(p) for p in (*prefix, *error["loc"])), str(error["msg"])


def _dag_error(data: Any, prefix: tuple[str | int, ...]) -> tuple[str, str] | None:
    """The first error of ``data`` as a DAG, part by part; None when every part passes alone."""
    if not isinstance(data, dict):
        return None
    skeleton = {k: ([] if k in _ITEMS and isinstance(v, list) else v) for k, v in data.items()}
    try:
        DAG.model_validate(skeleton)
    except ValidationError as exc:
        return _plain(exc, prefix)
    for key, adapter in _ITEMS.items():
        items = data.get(key)
        for index, item in enumerate(items if isinstance(items, list) else []):
            try:
                adapter.validate_python(item)
            except ValidationError as exc:
                return _plain(exc, (*prefix, key, index))
    return None


def first_error(exc: ValidationError, data: Any, model: type[Any] = DAG) -> tuple[str, str]:
    """The place (``nodes.3.kind``) and message of the first error ``exc`` holds for ``data`` validated as
    ``model`` (a DAG, or a plan holding one under ``dag``)."""
    if exc.error_count() <= _FEW:
        return _plain(exc, ())
    if model is DAG:
        found = _dag_error(data, ())
    elif isinstance(data, dict) and isinstance(data.get("dag"), dict):
        try:
            model.model_validate({**data, "dag": None})
        except ValidationError as outer:
            return _plain(outer, ())
        found = _dag_error(data["dag"], ("dag",))
    else:
        found = None
    return found if found is not None else _plain(exc, ())
