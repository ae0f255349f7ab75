"""Running ``shardplan``: as a user does (the installed console script, :func:`run_cli`), or in this process
(:func:`run_here`, :func:`run_main`) where the process itself is not what a test is about."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[1]
# The console script beside this interpreter is the one of this checkout; PATH may hold another.
_BESIDE = Path(sys.executable).parent / "shardplan"
SHARDPLAN = str(_BESIDE) if _BESIDE.exists() else (shutil.which("shardplan") or "shardplan")


def run_cli(*args: str, timeout: float = 120, input_text: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``shardplan ARGS`` and capture its output; never raises on a non-zero exit."""
    return subprocess.run([SHARDPLAN, *args], capture_output=True, text=True, timeout=timeout, check=False,
                          input=input_text, env=env)


def run_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` in this process, with the same result: exit code, stdout and stderr (read from ``capsys``).

    A whole-process run pays the imports (typer, pydantic, langgraph, the cost tables) again, seconds each time;
    here they are paid once per test session. Tests about the process itself (exit codes of the installed
    script, lazy imports, servers, interrupts) keep :func:`run_cli`.
    """
    capsys.readouterr()
    code = run_main(list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["shardplan", *args], code, captured.out, captured.err)


def run_main(argv: list[str]) -> int:
    """Run ``shardplan ARGV`` in this process (output left to capsys) and return its exit code."""
    import pytest

    from shardplan.cli.main import main

    # A whole-process run writes to a pipe, so shutil.get_terminal_size finds no terminal and the tables take
    # their fallback width; pointing sys.__stdout__ at the captured stream keeps that so here, even when pytest
    # itself runs in a terminal.
    saved, sys.argv = sys.argv, ["shardplan", *argv]
    saved_stdout, sys.__stdout__ = sys.__stdout__, sys.stdout
    try:
        with pytest.raises(SystemExit) as caught:
            main()
    finally:
        sys.argv, sys.__stdout__ = saved, saved_stdout
    return int(caught.value.code or 0)
