"""Input guards: size limits and the folders a path may point into."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import InputError

MAX_DAG_CHARS = 32_000_000
"""Largest DAG JSON text accepted, in characters, checked before parsing."""
MAX_DAG_NODES = 200_000
"""Largest DAG accepted, in nodes."""
MAX_VIOLATIONS = 10
"""Violations listed one by one in a compact result; the rest are counted."""
SEARCH_DEPTH = 20
"""Candidates kept per cached search; ``top`` slices them."""


def allowed_roots() -> list[Path]:
    raw = os.environ.get("SHARDPLAN_ALLOWED_ROOTS")
    roots = [Path(p) for p in raw.split(os.pathsep) if p] if raw else [Path.cwd()]
    return [r.expanduser().resolve() for r in roots]


def check_path(value: str, field: str, *, always: bool = False) -> None:
    """Refuse a file path outside the allowed roots (the working directory, or $SHARDPLAN_ALLOWED_ROOTS)."""
    from ..models import bundled_models

    looks_like_path = (
        always
        or value.endswith((".json", ".yaml", ".yml"))
        or os.sep in value
        and (value.strip().lower() not in {r.lower() for r in bundled_models()})
    )
    if not looks_like_path:
        return
    target = Path(value).expanduser().resolve()
    if not any(target == root or root in target.parents for root in allowed_roots()):
        raise InputError(
            f"{field} path {value} lies outside the allowed folders",
            field=field,
            fix="use a bundled model name, or a file under the working directory "
            "(or a folder listed in SHARDPLAN_ALLOWED_ROOTS)",
        )


def read_dag_json(source: str | dict[str, Any]) -> Any:
    """Parse and size-check DAG JSON before any schema work."""
    from ...validators.schema_check import parse_json

    if isinstance(source, str):
        if len(source) > MAX_DAG_CHARS:
            raise InputError(
                f"dag_json: {len(source):,} characters exceed the limit of {MAX_DAG_CHARS:,}",
                field="dag_json",
                fix="send a smaller DAG (fewer GPUs or microbatches)",
            )
        # Every node has one "id" key and edges have none: count them in the text, so a DAG that claims a
        # million nodes is refused before a million dicts are built.
        claimed = source.count('"id"')
        if claimed > MAX_DAG_NODES:
            raise InputError(
                f"dag_json: {claimed:,} nodes exceed the limit of {MAX_DAG_NODES:,}",
                field="dag_json",
                fix="send a smaller DAG (fewer GPUs or microbatches)",
            )
        source = parse_json(source)
    obj = source.get("dag") if isinstance(source, dict) and "dag" in source and "nodes" not in source else source
    nodes = obj.get("nodes") if isinstance(obj, dict) else None
    if isinstance(nodes, list) and len(nodes) > MAX_DAG_NODES:
        raise InputError(
            f"dag_json: {len(nodes):,} nodes exceed the limit of {MAX_DAG_NODES:,}",
            field="dag_json",
            fix="send a smaller DAG (fewer GPUs or microbatches)",
        )
    return source
