"""Exported launch commands are safe to paste: a hostile model name or a path with spaces stays one inert
word, checked with ``shlex.split`` and by a real shell that must not run the embedded command."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from test_mcp import BUNDLED

from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.launch.commands import ENGINES, launch_command, shell_word
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request

HOSTILE = ["my models", "x$(touch PWNED)", "a'b", "`touch PWNED`", "x;touch PWNED", "$HOME", "${HOME}", "-rf *"]
LAYOUTS = ["tp=2", "dp=2", "prefill:tp=1;decode:tp=1;disagg", "pp=2"]


def _plan(config: Path, spec: str) -> Plan:
    request = PlanRequest(model=str(config), gpu="H100", gpus=2, workload=Workload(isl=512, osl=64, batch=4))
    model, cluster = resolve_request(request)
    return plan_for_strategy(request, model, cluster, parse_strategy(spec))


def _command_lines(plan: Plan) -> list[str]:
    lines = []
    for engine in ENGINES:
        spec = launch_command(plan, engine)  # type: ignore[arg-type]
        lines += [line for role, text in spec.commands.items() if role != "router"  # the router names no model
                  for line in text.splitlines() if line.strip()]
    return lines


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_model_paths_round_trip_through_shlex(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    config = folder / "config.json"
    shutil.copy(BUNDLED, config)
    for layout in LAYOUTS:
        for line in _command_lines(_plan(config, layout)):
            words = shlex.split(line)
            assert str(config) in words or f"--model-path={config}" in words, line


def test_a_real_shell_reads_the_words_back_and_runs_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "x$(touch PWNED) `touch PWNED`;touch PWNED"
    folder.mkdir()
    config = folder / "config.json"
    shutil.copy(BUNDLED, config)
    for line in _command_lines(_plan(config, "dp=2")):
        # The shell parses the line as it would run it, but prints each word instead of running the engine.
        shown = subprocess.run(["bash", "-c", f"printf '%s\\0' {line.replace(' &', '')}"], cwd=tmp_path,
                               capture_output=True, check=True, env={"PATH": "/usr/bin:/bin", "HEAD_IP": "10.0.0.1"})
        words = shown.stdout.decode().rstrip("\0").split("\0")
        assert words == [w.replace("${HEAD_IP}", "10.0.0.1") for w in shlex.split(line.replace(" &", ""))]
        assert str(config) in words
    assert not (tmp_path / "PWNED").exists()


def test_only_exact_placeholders_stay_expandable() -> None:
    assert shell_word("${HEAD_IP}:5000") == '"${HEAD_IP}:5000"'
    for sneaky in ("${HEAD_IP}$(id)", "${x}", "${HEAD_IP}:5000;id", "$(id)"):
        assert shlex.split(shell_word(sneaky)) == [sneaky]
        assert shell_word(sneaky).startswith("'")


def test_export_keeps_a_newline_in_the_model_path_inside_its_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli_helpers import run_here

    folder = tmp_path / "m\ntouch PWNED;"
    folder.mkdir()
    shutil.copy(BUNDLED, folder / "config.json")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(_plan(folder / "config.json", "dp=2").model_dump_json())
    for engine in ENGINES:
        result = run_here(capsys, "export", str(plan_file), "--engine", engine)
        assert result.returncode == 0, result.stderr
        # Paste the whole output into a shell whose engines do nothing: nothing else may run.
        stubs = "vllm() { :; }; python() { :; }; trtllm-serve() { :; }; trtllm-llmapi-launch() { :; }\n"
        subprocess.run(["bash", "-c", stubs + result.stdout], cwd=tmp_path, check=True, capture_output=True)
        assert not (tmp_path / "PWNED").exists(), engine
