"""The MCP server as a hostile client meets it: paths that try to leave the allowed folders (``..``, ``~``,
``~user``, absolute paths, symlinked files and folders, NUL bytes) on every transport, and calls that run past
their time limit or are cancelled, after which the server's memory is back at its baseline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_helpers import SHARDPLAN
from mcp import Client, StdioServerParameters
from test_mcp import BUNDLED, _free_port, _wait_for_port, error, ok, talk

from shardplan.errors import InputError
from shardplan.tools.api.guards import check_path
from shardplan.tools.surfaces.mcp_server import HTTP_PATH, build_server


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(root, outside): a root with a real config and three symlinks that lead out, and an outside folder."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "inside").mkdir(parents=True)
    (root / "folder").mkdir()
    outside.mkdir()
    shutil.copy(BUNDLED, root / "inside" / "config.json")
    shutil.copy(BUNDLED, outside / "config.json")
    (outside / "cluster.yaml").write_text("gpu: H100\nnodes: 1\n")
    (root / "file_link.json").symlink_to(outside / "config.json")
    (root / "dir_link").symlink_to(outside, target_is_directory=True)
    (root / "folder" / "config.json").symlink_to(outside / "config.json")
    yield root, outside


def hostile(outside: Path) -> list[str]:
    """Model arguments that all lead outside the root (when the server runs in it)."""
    return ["../outside/config.json", "../outside", "inside/../../outside/config.json", str(outside / "config.json"),
            "~", "~/config.json", "~root", "~root/config.json", "file_link.json", "dir_link",
            "dir_link/config.json", "folder", "folder/config.json", "inside\x00/config.json", "/etc/passwd",
            "/nonexistent/config.json", str(outside / "missing.json")]


ALLOWED = ["inside/config.json", "inside", "llama-3.1-8b"]


def _describe_all(values: list[str]) -> Any:
    async def scenario(client: Client) -> list[Any]:
        return [await client.call_tool("describe_model", {"model": value}) for value in values]

    return scenario


def _check(results: list[Any], outside: Path) -> None:
    """Every hostile value refused with a message naming only what was given; every allowed one served."""
    values = hostile(outside)
    refusals = [error(result) for result in results[:len(values)]]
    for value, refusal in zip(values, refusals, strict=True):
        assert refusal["field"] == "model", (value, refusal)
        message = refusal["message"]
        assert ("outside the allowed folders" in message or "NUL byte" in message), (value, message)
        assert "no config file" not in message and "\n" not in message
        for revealing in (str(outside), "/root", os.path.expanduser("~")):
            assert revealing not in message or revealing in value, (value, message)
    # The same answer whether or not the outside file exists: nothing to learn about the outside.
    existing, missing = refusals[3]["message"], refusals[-1]["message"]
    assert existing.replace("config.json", "missing.json") == missing
    for result in results[len(values):]:
        assert ok(result)["layers"] == 32


def test_check_path_resolves_symlinks_dots_and_home(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tree
    monkeypatch.chdir(root)
    monkeypatch.delenv("SHARDPLAN_ALLOWED_ROOTS", raising=False)
    for value in hostile(outside):
        with pytest.raises(InputError):
            check_path(value, "model")
        with pytest.raises(InputError):
            check_path(value, "cluster", always=True)
    for value in ALLOWED:
        check_path(value, "model")
    monkeypatch.setenv("SHARDPLAN_ALLOWED_ROOTS", "")  # set but empty: no folder at all
    with pytest.raises(InputError, match="outside the allowed folders"):
        check_path("inside/config.json", "model")
    check_path("llama-3.1-8b", "model")


def test_in_memory_server_refuses_every_way_out(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tree
    monkeypatch.chdir(root)
    monkeypatch.setenv("SHARDPLAN_ALLOWED_ROOTS", str(root))
    server = build_server()
    _check(talk(server, _describe_all(hostile(outside) + ALLOWED)), outside)

    async def cluster(client: Client) -> Any:
        arguments = {"model": "llama-3.1-8b", "gpus": 1, "cluster": "../outside/cluster.yaml"}
        return await client.call_tool("plan", arguments)

    assert "outside the allowed folders" in error(talk(server, cluster))["message"]


def test_stdio_server_refuses_every_way_out(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    env = {**os.environ, "SHARDPLAN_ALLOWED_ROOTS": str(root)}
    params = StdioServerParameters(command=SHARDPLAN, args=["mcp"], cwd=str(root), env=env)
    _check(talk(params, _describe_all(hostile(outside) + ALLOWED)), outside)


def test_http_server_refuses_every_way_out(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    port = _free_port()
    env = {**os.environ, "SHARDPLAN_ALLOWED_ROOTS": str(root)}
    process = subprocess.Popen([SHARDPLAN, "mcp", "--transport", "http", "--port", str(port)], cwd=root, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(process, port)
        _check(talk(f"http://127.0.0.1:{port}{HTTP_PATH}", _describe_all(hostile(outside) + ALLOWED)), outside)
    finally:
        process.kill()
        process.wait(timeout=10)


# ------------------------------------------------------------------------------------ bounded calls


def _tree_rss_kb(pid: int) -> tuple[int, int]:
    """(resident KB, process count) of ``pid`` and all its descendants, read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    family, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in family} - family
        family |= more
        grew = bool(more)
    total = 0
    for member in family:
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total, len(family)


HEAVY = {"model": "deepseek-v3", "gpu": "H200", "gpus": 4096, "isl": 1024, "osl": 64}
"""A search of about a minute and a half on a small machine: far past the limits set below."""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads memory from /proc")
def test_a_call_past_its_limit_or_cancelled_is_stopped_and_memory_returns() -> None:
    env = {**os.environ, "SHARDPLAN_TOOL_TIMEOUT": "3"}
    params = StdioServerParameters(command=SHARDPLAN, args=["mcp"], env=env)

    async def scenario(client: Client) -> dict[str, Any]:
        ok(await client.call_tool("list_gpus", {}))  # a worker started, served and idle: the baseline
        pid = next(p for p in _children_named("shardplan") if p != os.getpid())
        baseline = _tree_rss_kb(pid)
        began = time.monotonic()
        stopped = error(await client.call_tool("search_strategies", HEAVY))
        took = time.monotonic() - began
        after_limit = _tree_rss_kb(pid)
        with anyio.move_on_after(1.5):
            await client.call_tool("search_strategies", HEAVY)  # the client gives up: a cancellation
        await anyio.sleep(1.0)
        after_cancel = _tree_rss_kb(pid)
        again = ok(await client.call_tool("get_rule", {"rule_id": "DEC-1"}))
        return {"baseline": baseline, "stopped": stopped, "took": took, "after_limit": after_limit,
                "after_cancel": after_cancel, "again": again}

    seen = talk(params, scenario)
    assert seen["stopped"]["error"] == "TimeoutError" and "within 3 s" in seen["stopped"]["message"]
    assert seen["took"] < 15
    assert seen["again"]["id"] == "DEC-1"  # the server kept serving
    base_kb, base_count = seen["baseline"]
    for kb, count in (seen["after_limit"], seen["after_cancel"]):
        assert count <= base_count  # the busy worker is gone, not left running
        assert kb <= base_kb + 30_000, (kb, base_kb)


def _children_named(word: str) -> list[int]:
    """Processes of this test run whose command line mentions ``word`` (the stdio server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if word in cmd and " mcp" in cmd and int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(entry.name))
    return found


def test_a_dead_idle_worker_is_replaced() -> None:
    from shardplan.tools.api.workers import CapabilityWorkers

    workers = CapabilityWorkers()

    async def scenario() -> list[bool]:
        answers = [(await workers.call("get_rule", {"rule_id": "DEC-1"}, 30))[0]]
        for worker in workers._idle:  # the system kills the idle worker (out of memory, say)
            worker.process.kill()
            worker.process.join()
        answers.append((await workers.call("get_rule", {"rule_id": "DEC-1"}, 30))[0])
        return answers

    try:
        assert anyio.run(scenario) == [True, True]
    finally:
        workers.close()


def _large_dag_json(nodes: int) -> str:
    """A DAG of ``nodes`` wide nodes: under the size and node limits, but tens of MB once parsed and checked."""
    rows = [{"id": f"n{i}", "kind": "linear", "op": "matmul", "phase": "decode", "layer": i, "flops": 1.5e9 + i,
             "bytes": 2e6 + i} for i in range(nodes)]
    return json.dumps({"schema_version": "1", "nodes": rows, "edges": []})


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads memory from /proc")
def test_a_call_past_the_memory_limit_is_refused_and_the_server_goes_on() -> None:
    env = {**os.environ, "SHARDPLAN_WORKER_MEMORY": "300M", "SHARDPLAN_TOOL_TIMEOUT": "25"}
    params = StdioServerParameters(command=SHARDPLAN, args=["mcp"], env=env)
    dag_json = _large_dag_json(150_000)

    async def scenario(client: Client) -> dict[str, Any]:
        first = ok(await client.call_tool("get_rule", {"rule_id": "DEC-1"}))
        refused = error(await client.call_tool("validate_dag", {"dag_json": dag_json}))
        again = ok(await client.call_tool("get_rule", {"rule_id": "DEC-1"}))
        return {"first": first, "refused": refused, "again": again}

    seen = talk(params, scenario)
    refused = seen["refused"]
    assert seen["first"]["id"] == "DEC-1"  # a small call runs under the limit
    assert refused["error"] == "MemoryError", refused
    assert "memory limit of 0.293 GiB" in refused["message"] and "SHARDPLAN_WORKER_MEMORY" in refused["fix"]
    assert "\n" not in refused["message"]
    assert seen["again"]["id"] == "DEC-1"  # the server goes on with a fresh worker


def test_concurrency_follows_the_memory_available() -> None:
    from shardplan.tools.api.workers import MAX_WORKERS, concurrent_calls

    gib = 1024**3
    assert concurrent_calls(4 * gib, 64 * gib) == MAX_WORKERS
    assert concurrent_calls(4 * gib, 9 * gib) == 2
    assert concurrent_calls(4 * gib, 1 * gib) == 1  # one call still runs: its own limit guards it
    assert concurrent_calls(4 * gib, None) == MAX_WORKERS


def test_a_bad_memory_setting_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardplan.limits import worker_memory_bytes

    monkeypatch.setenv("SHARDPLAN_WORKER_MEMORY", "6G")
    assert worker_memory_bytes() == 6 * 1024**3
    monkeypatch.setenv("SHARDPLAN_WORKER_MEMORY", "512MiB")
    assert worker_memory_bytes() == 512 * 1024**2
    for bad in ("lots", "-1G", "0", "1" * 40):
        monkeypatch.setenv("SHARDPLAN_WORKER_MEMORY", bad)
        with pytest.raises(InputError, match="SHARDPLAN_WORKER_MEMORY=") as caught:
            worker_memory_bytes()
        assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------ the served roots
def _served(root: Path, *options: str) -> StdioServerParameters:
    """``shardplan mcp OPTIONS`` launched in ``root`` as an MCP client launches it, without SHARDPLAN_ALLOWED_ROOTS."""
    env = {k: v for k, v in os.environ.items() if k != "SHARDPLAN_ALLOWED_ROOTS"}
    return StdioServerParameters(command=SHARDPLAN, args=["mcp", *options], cwd=str(root), env=env)


def _model_and_trace(client: Client) -> Any:
    async def scenario() -> list[Any]:
        return [await client.call_tool("describe_model", {"model": "inside/config.json"}),
                await client.call_tool("plan", {"model": "llama-3.1-8b", "gpus": 1, "workload": "inside/t.csv"}),
                await client.call_tool("describe_model", {"model": "llama-3.1-8b"})]

    return scenario()


def test_the_served_tools_read_no_folder_unless_started_with_one(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "inside" / "t.csv").write_text("input_tokens,output_tokens\n100,10\n200,20\n")
    # Launched in the folder that holds the files, with no root given: the working directory is no root.
    confined = talk(_served(root), _model_and_trace)
    for result, field in zip(confined[:2], ("model", "workload"), strict=True):
        refusal = error(result)
        assert refusal["field"] == field and "outside the allowed folders" in refusal["message"], refusal
        assert "--allow-root" in refusal["fix"]
    assert ok(confined[2])["layers"] == 32  # bundled names need no folder
    # Started with --allow-root, the same calls read the files.
    allowed = talk(_served(root, "--allow-root", str(root / "inside")), _model_and_trace)
    assert ok(allowed[0])["layers"] == 32
    assert ok(allowed[1])["request"]["workload"]["isl"] == 150


def test_an_allowed_root_that_is_no_folder_stops_the_server(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    result = subprocess.run([SHARDPLAN, "mcp", "--allow-root", str(root / "missing")], capture_output=True, text=True,
                            timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("error: allow-root")
