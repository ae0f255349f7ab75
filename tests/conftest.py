"""The suite's process-wide setup: a test sees the same environment whether pytest runs it in its own process or
in a pytest-xdist worker (``.ci/run`` runs ``pytest -n auto``)."""

from __future__ import annotations

import os
from typing import Any

import pytest

# Read by shutil.get_terminal_size, hence by the width of shardplan's tables (cli/app.py): a worker process
# starts with COLUMNS=80 and LINES=24 that the process running pytest did not have, and the tables that
# tests read would wrap at 80 columns instead of the 140 a pipe gets.
_TERMINAL = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """In the process running pytest: hand each worker the terminal variables as they are here (None: unset)."""
    node.workerinput["terminal_environment"] = {name: os.environ.get(name) for name in _TERMINAL}


def pytest_configure(config: pytest.Config) -> None:
    """In a worker: set the terminal variables back to what the process running pytest has."""
    given = getattr(config, "workerinput", {}).get("terminal_environment")
    for name, value in (given or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
