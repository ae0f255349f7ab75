"""Input guards: size limits (from :mod:`shardplan.limits`) and the folders a path may point into."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from shardplan.contracts.plan import dag_part
from shardplan.errors import InputError
from shardplan.limits import MAX_DAG_CHARS, check_dag_size
from shardplan.reading import parse_json_text
from shardplan.text import one_line
from shardplan.tools.catalogs.models import resolve_model_name

MAX_VIOLATIONS = 10
"""Violations listed one by one in a compact result; the rest are counted."""
SEARCH_DEPTH = 20
"""Candidates kept per cached search; ``top`` slices them."""
_DAG_JSON_FIX = "send a DAG or plan as JSON (build_dag with include_dag) with finite numbers of at most 19 digits"


def allowed_roots() -> list[Path]:
    """The folders files may be read from: $SHARDPLAN_ALLOWED_ROOTS (``os.pathsep``-separated), fully resolved.

    Unset, it is the working directory; set but empty, no folder at all (bundled models only).
    """
    raw = os.environ.get("SHARDPLAN_ALLOWED_ROOTS")
    entries = [str(Path.cwd())] if raw is None else [p for p in raw.split(os.pathsep) if p.strip() and "\x00" not in p]
    return [Path(os.path.expanduser(entry)).resolve() for entry in entries]


def server_roots(given: Sequence[str]) -> str:
    """The $SHARDPLAN_ALLOWED_ROOTS a served process (``shardplan mcp``) runs under: the folders it was started
    with (``given``) and those the variable already lists; with neither, none at all, so its callers read bundled
    models, GPUs and traces and send everything else inline.

    An MCP client launches the server in a folder of its own choosing (the home folder, or ``/``), so the working
    directory, the library's default root, is no choice the person made; a served process reads only what it was
    told it may.

    Raises:
        InputError: a given folder that does not exist or is not a folder.
    """
    roots = [p for p in os.environ.get("SHARDPLAN_ALLOWED_ROOTS", "").split(os.pathsep) if p.strip()]
    for entry in given:
        folder = Path(os.path.expanduser(entry))
        if "\x00" in entry or not folder.is_dir():
            raise InputError(f"allow-root {one_line(entry, 200)!r} is not a folder", field="allow_root",
                             fix="give an existing folder the tools may read model, cluster and trace files from")
        roots.append(str(folder.resolve()))
    return os.pathsep.join(roots)


_TRUSTED: set[Path] = set()
"""Files the person at the terminal named themselves (see :func:`trusting`): readable wherever they are."""


@contextlib.contextmanager
def trusting(*values: str | None) -> Iterator[None]:
    """Let the capabilities read the files ``values`` name (a model config or folder, a cluster file, a request
    trace) while the block runs, wherever they lie.

    The command line hands its own request to the agent, whose tools confine paths like any other caller's;
    the files the user named are theirs to read, while any other path the model puts in a tool call stays
    confined.
    """
    added = set()
    for value in values:
        if value and "\x00" not in value and os.path.lexists(os.path.expanduser(value)):
            target = Path(os.path.expanduser(value)).resolve()
            added |= {target, (target / "config.json").resolve()} if target.is_dir() else {target}
    added -= _TRUSTED
    _TRUSTED.update(added)
    try:
        yield
    finally:
        _TRUSTED.difference_update(added)


def _looks_like_path(value: str) -> bool:
    return (os.sep in value or "/" in value or value.startswith(("~", "."))
            or value.lower().endswith((".json", ".yaml", ".yml")))


def _is_bundled_name(value: str) -> bool:
    try:
        resolve_model_name(value)
    except InputError:
        return False
    return True


def _inside(target: Path, roots: list[Path]) -> bool:
    return any(target == root or root in target.parents for root in roots)


def check_path(value: str, field: str, *, always: bool = False, names: str = "a bundled model name") -> None:
    """Refuse a file path that resolves outside the allowed roots (:func:`allowed_roots`).

    ``value`` is a bundled model name or a path; with ``always`` it is a path in every case. A path is
    resolved as it would be read: ``~`` and ``~user`` expanded, relative to the working directory, ``..``
    and every symlink followed (a folder's ``config.json`` too, since that is the file read), and only then
    compared with the roots. The error names only what the caller gave, never the resolved path, and is the
    same whether or not the outside file exists; its fix offers ``names`` instead.

    Raises:
        InputError: a NUL byte, or a path outside the allowed roots.
    """
    fix = (f"use {names}, or a file under the folders the tools may read (the working directory, or those "
           "SHARDPLAN_ALLOWED_ROOTS or shardplan mcp --allow-root lists)")
    if "\x00" in value:
        raise InputError(f"{field} holds a NUL byte", field=field, fix=fix)
    expanded = os.path.expanduser(value)
    exists = os.path.lexists(expanded)
    if not always and not exists and (_is_bundled_name(value) or not _looks_like_path(value)):
        return  # a name: nothing is read from disk (an unknown one is refused by the model catalog)
    target = Path(expanded).resolve()
    targets = [target, (target / "config.json").resolve()] if target.is_dir() else [target]
    roots = allowed_roots()
    if not all(t in _TRUSTED or _inside(t, roots) for t in targets):
        raise InputError(f"{field} path {one_line(value, 200)!r} lies outside the allowed folders",
                         field=field, fix=fix)


def read_dag_json(source: str | dict[str, Any]) -> Any:
    """Parse and size-check DAG JSON before any schema work."""

    if isinstance(source, str):
        if len(source) > MAX_DAG_CHARS:
            raise InputError(
                f"dag_json: {len(source):,} characters exceed the limit of {MAX_DAG_CHARS:,}",
                field="dag_json",
                fix="send a smaller DAG (fewer GPUs or microbatches)",
            )
        # Every node has one "id" key and every edge one "src": count them in the text, so a DAG that claims a
        # million nodes is refused before a million dicts are built.
        check_dag_size(source.count('"id"'), source.count('"src"'), what="dag_json", field="dag_json")
        source = parse_json_text(source, what="dag_json", field="dag_json", fix=_DAG_JSON_FIX)
    obj = dag_part(source)
    nodes = obj.get("nodes") if isinstance(obj, dict) else None
    edges = obj.get("edges") if isinstance(obj, dict) else None
    check_dag_size(len(nodes) if isinstance(nodes, list) else 0, len(edges) if isinstance(edges, list) else 0,
                   what="dag_json", field="dag_json")
    return source
