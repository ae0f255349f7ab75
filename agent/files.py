"""Reading DAG and plan files given on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import InputError
from ..limits import MAX_DAG_CHARS
from ..reading import one_line, parse_json_text, read_text
from ..tools.contracts import DAG

__all__ = ["read_json", "read_dag"]


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
    return parse_json_text(text, what=what, field="file", fix=fix)


def read_dag(path: Path) -> DAG:
    """The DAG in a DAG file, or in a plan file's ``dag`` key.

    Raises:
        InputError: unreadable file, or JSON that is not a DAG; the message names the first bad field.
    """
    data = read_json(path)
    if isinstance(data, dict) and "dag" in data and "nodes" not in data:
        data = data["dag"]
    if data is None:
        raise InputError(f"{path} holds no DAG (an infeasible plan?)", field="dag", fix="give a plan with a strategy")
    try:
        return DAG.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(
            f"{path} is not a DAG: {where}: {first['msg']}", field=where, fix="check it with shardplan validate FILE"
        ) from None
