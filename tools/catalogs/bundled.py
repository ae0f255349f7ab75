"""The model configs bundled with shardplan: Hugging Face ``config.json`` files under ``tools/data/models``."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = ["bundled_models", "bundled_config"]


def _bundled_dir() -> Any:
    return resources.files("shardplan.tools") / "data" / "models"


@lru_cache(maxsize=1)
def bundled_models() -> dict[str, str]:
    """Bundled Hugging Face repository ids mapped to their file names.

    >>> "deepseek-ai/DeepSeek-V3" in bundled_models()
    True
    """
    names = {}
    for entry in _bundled_dir().iterdir():
        if entry.name.endswith(".json"):
            names[entry.name[: -len(".json")].replace("__", "/")] = entry.name
    return dict(sorted(names.items()))


def bundled_config(repo: str) -> dict[str, Any]:
    """The bundled ``config.json`` of ``repo`` (a key of :func:`bundled_models`), parsed."""
    data: dict[str, Any] = json.loads((_bundled_dir() / bundled_models()[repo]).read_text())
    return data
