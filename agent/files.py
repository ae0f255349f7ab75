"""Reading DAG and plan files given on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import InputError
from ..tools.contracts import DAG

__all__ = ["read_json", "read_dag"]


def read_json(path: Path) -> Any:
    """Parsed JSON of ``path``.

    Raises:
        InputError: the file is missing or is not JSON.
    """
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"no file {path}", field="file", fix="give the path of a DAG or plan JSON") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"{path} is not readable JSON: {exc}",
            field="file",
            fix="give a DAG (shardplan build -o) or plan (shardplan plan -o) file",
        ) from None


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
