"""Malformed calls against the MCP server, through the official SDK client over stdio (a real ``shardplan mcp``
subprocess, as tests/test_mcp.py does): wrong types, booleans for integers, non-finite numbers and numbers as
strings, huge strings and numbers, unknown keys, paths that leave the working directory, broken DAG JSON, and
hostile traffic arguments (distribution, arrival and speculation strings of ``fuzz_traffic.py``; a FIFO, a folder,
``/dev/zero`` and broken traces as ``workload``).
Prints, per kind and in total: calls, refused, accepted, tracebacks (an ``InternalError`` or a traceback in
the text), calls over 30 s, errors that are not one line with a field or a fix, and whether the server
still answered at the end.

Run: .venv/bin/python benchmarks/fuzz_mcp.py [--per-kind 60] [--seed 15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from fuzz_table import print_counts
from fuzz_traffic import ARRIVAL_PARTS, DIST_PARTS, SPEC_VALUES
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

SLOW_S = 30
SMALL: dict[str, Any] = {"model": "llama-3.1-8b", "gpu": "H100", "gpus": 2, "isl": 512, "osl": 64}
INT_FIELDS = ["gpus", "isl", "osl", "batch", "prefill_batch", "gpus_per_node", "max_batched_tokens", "top"]
FLOAT_FIELDS = ["ttft_ms", "tpot_ms", "rate", "gpu_memory_utilization", "spec_accept", "prefix_hit"]
STR_FIELDS = ["model", "gpu", "isl_dist", "arrival", "workload", "cluster", "spec", "slo_percentile"]
WRONG: list[Any] = [True, False, "8", "eight", "", None, [8], {"n": 8}, 8.0, 8.5, -1, 0, "1e3"]
NON_FINITE: list[Any] = ["Infinity", "-Infinity", "NaN", "inf", "1e999", 1e308, -1e308, "0x10"]
TRACE_FILES = ["fuzz-fifo.csv", "fuzz-folder.jsonl", "fuzz-broken.csv", "fuzz-span.csv", "fuzz-group.jsonl",
               "/dev/zero", "fuzz-missing.csv"]
"""Trace files the server is sent, made in the working directory by :func:`_trace_files` (one is left missing)."""
PATHS = ["../../etc/passwd", "/etc/passwd", "~/.ssh/id_rsa", "~root", "..", "a/../../x.json", "x\x00.json",
         "/proc/self/environ", "../" * 40 + "etc/hosts", "file:///etc/passwd"]


def _huge_text(rng: random.Random) -> str:
    return rng.choice(["x", "9", "\u202e", "\n", "é"]) * rng.choice([1_000, 100_000, 1_000_000])


def calls(rng: random.Random, per_kind: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, tool, arguments) of every malformed call."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    tools = ["plan", "search_strategies", "build_dag", "estimate_cost"]
    for _ in range(per_kind):
        tool = rng.choice(tools)
        base = dict(SMALL, strategy="tp=2") if tool in ("build_dag", "estimate_cost") else dict(SMALL)
        every = INT_FIELDS + FLOAT_FIELDS + STR_FIELDS
        out.append(("wrong types", tool, {**base, rng.choice(every): rng.choice(WRONG)}))
        out.append(("booleans for integers", tool, {**base, rng.choice(INT_FIELDS): rng.choice([True, False])}))
        numeric = FLOAT_FIELDS + INT_FIELDS
        out.append(("non-finite numbers", tool, {**base, rng.choice(numeric): rng.choice(NON_FINITE)}))
        big = int("9" * rng.choice([20, 300, 4000]))
        out.append(("huge numbers", tool, {**base, rng.choice(INT_FIELDS + FLOAT_FIELDS): rng.choice([big, -big])}))
        out.append(("huge strings", rng.choice(tools + ["search_knowledge", "get_rule", "describe_model"]),
                    _huge_string_args(rng)))
        out.append(("path traversal", rng.choice(["describe_model", "plan"]),
                    {**SMALL, rng.choice(["model", "cluster", "workload"]): rng.choice(PATHS)}))
        out.append(("unknown keys and shapes", rng.choice(tools),
                    rng.choice([{**SMALL, "gpuz": 8}, {}, {"model": "llama-3.1-8b"}, {**SMALL, "extra": {"a": [1]}},
                                {**SMALL, "constraints": "tp<=4"}, {**SMALL, "constraints": [["tp<=4"]]},
                                {**SMALL, "constraints": ["tp<=" + "9" * 5000]}])))
        out.append(("broken DAG JSON", "validate_dag", {"dag_json": _broken_dag(rng)}))
        out.append(("traffic strings", rng.choice(["plan", "search_strategies"]), {**SMALL, **_traffic_args(rng)}))
    return out


def _traffic_args(rng: random.Random) -> dict[str, Any]:
    """Hostile traffic, speculation and prefix arguments, spelled as ``fuzz_traffic.py`` spells the CLI's flags;
    traces are files under the working directory (the server's allowed root): a FIFO, a folder, a broken CSV."""
    args: dict[str, Any] = {}
    for name in rng.sample(["isl_dist", "osl_dist", "arrival", "spec", "prefix_hit", "workload"], rng.randint(1, 3)):
        if name in ("isl_dist", "osl_dist"):
            args[name] = "".join(rng.choice(DIST_PARTS) for _ in range(rng.randint(1, 6)))
        elif name == "arrival":
            args.update(arrival="".join(rng.choice(ARRIVAL_PARTS) for _ in range(rng.randint(1, 4))), rate=2.0)
        elif name == "spec":
            args.update(spec=rng.choice(SPEC_VALUES), spec_accept=rng.choice([0.0, 1.0, 4.0, -1.0, "nan", True]))
        elif name == "prefix_hit":
            args[name] = rng.choice([0.0, 0.5, 1.0, -0.1, "0.5", 1e308, None])
        else:
            args[name] = rng.choice(TRACE_FILES)
    return args


def _huge_string_args(rng: random.Random) -> dict[str, Any]:
    choice = rng.randrange(4)
    if choice == 0:
        return {"query": _huge_text(rng)}
    if choice == 1:
        return {"rule_id": _huge_text(rng)}
    if choice == 2:
        return {"model": _huge_text(rng)}
    return {**SMALL, rng.choice(STR_FIELDS): _huge_text(rng)}


def _broken_dag(rng: random.Random) -> Any:
    choice = rng.randrange(6)
    if choice == 0:
        return "[" * 100_000
    if choice == 1:
        return '{"schema_version": "1", "nodes": [], "edges": [], "x": ' + "1" * 5000 + "}"
    if choice == 2:
        return '{"schema_version": "1", "nodes": [{"id": "a", "flops": Infinity}], "edges": []}'
    if choice == 3:
        return json.dumps({"schema_version": "1", "nodes": [{"id": f"n{i}"} for i in range(210_000)], "edges": []})
    if choice == 4:
        return {"schema_version": "1", "nodes": [{"id": "a", "kind": True}], "edges": "x"}
    return rng.choice(["", "null", "{}", "42", '{"nodes": 3}', "\u202e"])


def _trace_files(folder: Path) -> None:
    """The hostile trace files of :data:`TRACE_FILES`, in ``folder``."""
    if hasattr(os, "mkfifo") and not (folder / "fuzz-fifo.csv").exists():
        os.mkfifo(folder / "fuzz-fifo.csv")
    (folder / "fuzz-folder.jsonl").mkdir(exist_ok=True)
    (folder / "fuzz-broken.csv").write_bytes(b"\xef\xbb\xbfinput_tokens,output_tokens\r\n512,\xff\r\n")
    (folder / "fuzz-span.csv").write_text("timestamp,input_tokens,output_tokens\n1e308,64,8\n-1e308,64,8\n")
    (folder / "fuzz-group.jsonl").write_text('{"input_tokens": 64, "output_tokens": 8, "session_id": {"a": 1}}\n')


def one_line_with_fix(error: dict[str, Any]) -> bool:
    """A refusal as promised: the JSON of error, message, field and fix; the message one line, and a field or a
    fix (a timeout or memory error names no field, only the fix)."""
    message = error.get("message")
    return (isinstance(message, str) and "\n" not in message and bool(error.get("error"))
            and bool(error.get("field") or error.get("fix")))


async def run_all(items: list[tuple[str, str, dict[str, Any]]]) -> tuple[dict[str, Counter[str]], dict[str, str], bool]:
    env = {**os.environ, "SHARDPLAN_TOOL_TIMEOUT": str(SLOW_S)}
    folder = Path(tempfile.mkdtemp(prefix="shardplan-fuzz-mcp-"))  # the server's working directory: its allowed root
    _trace_files(folder)
    params = StdioServerParameters(command=str(Path(sys.executable).with_name("shardplan")), args=["mcp"], env=env,
                                   cwd=folder)
    totals: dict[str, Counter[str]] = {}
    examples: dict[str, str] = {}
    async with Client(params, read_timeout_seconds=SLOW_S + 30) as client:
        for kind, tool, arguments in items:
            counts = totals.setdefault(kind, Counter())
            counts["calls"] += 1
            began = time.perf_counter()
            try:
                result = await client.call_tool(tool, arguments)
            except Exception as exc:  # noqa: BLE001  (a protocol error is what the client saw: count it)
                counts["protocol errors"] += 1
                examples.setdefault(f"protocol error ({kind})", f"{tool}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            seconds = time.perf_counter() - began
            counts["max ms"] = max(counts["max ms"], int(seconds * 1000))
            if seconds > SLOW_S:
                counts["over 30 s"] += 1
            text = "".join(b.text for b in result.content if isinstance(b, TextContent))
            if not result.is_error:
                counts["accepted"] += 1
                continue
            counts["refused"] += 1
            try:
                error = json.loads(text)
            except ValueError:
                error = {"message": text}
            if error.get("error") == "InternalError" or "Traceback" in text:
                counts["tracebacks"] += 1
                examples.setdefault(f"traceback ({kind})", f"{tool}: {text[:300]}")
            elif not one_line_with_fix(error):
                counts["errors not one line with a fix"] += 1
                examples.setdefault(f"error shape ({kind})", f"{tool}: {text[:300]}")
        alive = not (await client.call_tool("get_rule", {"rule_id": "DEC-1"})).is_error
    shutil.rmtree(folder, ignore_errors=True)
    return totals, examples, alive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=60, help="calls per kind (nine kinds)")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    items = calls(random.Random(args.seed), args.per_kind)
    print(f"{len(items):,} malformed MCP calls, {args.per_kind:,} per kind, seed {args.seed}, over stdio")
    began = time.perf_counter()
    totals, examples, alive = anyio.run(run_all, items)
    columns = ["calls", "refused", "accepted", "tracebacks", "protocol errors", "over 30 s",
               "errors not one line with a fix", "max ms"]
    print_counts(totals, columns)
    print(f"{time.perf_counter() - began:.0f} s in all; the server {'still answers' if alive else 'DIED'}")
    for what, example in examples.items():
        print(f"example {what}: {example!r}")


if __name__ == "__main__":
    main()
