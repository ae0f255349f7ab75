"""Running the installed console script as a user does: one place for the path and the timeout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The console script beside this interpreter is the one of this checkout; PATH may hold another.
_BESIDE = Path(sys.executable).parent / "shardplan"
SHARDPLAN = str(_BESIDE) if _BESIDE.exists() else (shutil.which("shardplan") or "shardplan")


def run_cli(*args: str, timeout: float = 120, input_text: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``shardplan ARGS`` and capture its output; never raises on a non-zero exit."""
    return subprocess.run([SHARDPLAN, *args], capture_output=True, text=True, timeout=timeout, check=False,
                          input=input_text, env=env)


def run_main(argv: list[str]) -> int:
    """Run ``shardplan ARGV`` in this process (output left to capsys) and return its exit code."""
    import pytest

    from shardplan.cli.main import main

    saved, sys.argv = sys.argv, ["shardplan", *argv]
    try:
        with pytest.raises(SystemExit) as caught:
            main()
    finally:
        sys.argv = saved
    return int(caught.value.code or 0)
