"""The request traces bundled with shardplan: samples of public production traces under ``tools/data/traces``.

A bundled trace is named by its file's stem without the year (``azure-conv`` for ``azure-conv-2023.csv``); the
whole stem works too. ``tools/data/traces/README.md`` says where each one comes from, its license and how it
was sampled.

>>> bundled_trace_name("Azure-Conv")
'azure-conv'
>>> bundled_trace_name("traces/azure-conv.csv") is None
True
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["bundled_traces", "bundled_trace_name", "bundled_trace_text"]

_TRACE_SUFFIXES = (".csv", ".jsonl")


def _traces_dir() -> Any:
    return resources.files("shardplan.tools") / "data" / "traces"


@lru_cache(maxsize=1)
def bundled_traces() -> dict[str, str]:
    """Bundled trace names mapped to their file names, sorted by name.

    >>> bundled_traces()["azure-code"]
    'azure-code-2023.csv'
    """
    names = {}
    for entry in _traces_dir().iterdir():
        if entry.name.endswith(_TRACE_SUFFIXES):
            stem = entry.name.rsplit(".", 1)[0]
            names[re.sub(r"-\d{4}$", "", stem)] = entry.name
    return dict(sorted(names.items()))


def bundled_trace_name(value: str) -> str | None:
    """The bundled trace ``value`` names (its name or its file's stem, any case); None when it names none."""
    wanted = value.strip().lower()
    for name, file_name in bundled_traces().items():
        if wanted in (name, file_name.rsplit(".", 1)[0]):
            return name
    return None


def bundled_trace_text(name: str) -> str:
    """The text of the bundled trace ``name`` (a key of :func:`bundled_traces`)."""
    return (_traces_dir() / bundled_traces()[name]).read_text(encoding="utf-8")
