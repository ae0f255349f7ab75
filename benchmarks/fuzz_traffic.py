"""The traffic kinds of ``fuzz_cli.py``: hostile request traces, distribution and arrival strings, speculation and
prefix flags, and plan files edited by hand for ``shardplan simulate``.

* trace files: CSV and JSON Lines built from hostile parts (a BOM, CRLF, tabs, quoted and non-numeric cells,
  NaN, ``1e309``, zero, negative, fractional and absurd token counts, missing, extra and repeated columns,
  unsorted, negative and far-apart timestamps, odd prefix groups, a JSON array or object of arrays, text cut
  short), and things that are not trace files (a FIFO, ``/dev/zero``, a folder, random bytes).
* traffic strings: ``--isl-dist``, ``--osl-dist``, ``--arrival``, ``--spec``, ``--spec-accept`` and
  ``--prefix-hit`` spelled from hostile parts (unknown, repeated and missing keys, unicode digits, ``nan``,
  ``1e309``, trailing commas), alone and together with split pools.
* simulate plans: a plan file with its deployment, strategy or workload edited (``fuzz_cli.mutate``) or cut
  short, simulated with hostile ``--rate``, ``--requests`` and ``-o``/``--trace`` destinations (a missing
  folder, a folder); a run that fails must leave neither output.

Each generator yields ``fuzz_cli.Case`` objects.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CaseMaker = Callable[..., Any]
Mutate = Callable[[Any, random.Random, int], Any]

_HEADERS = ["input_tokens", "output_tokens", "timestamp", "session_id", "prefix_tokens", "input_tokens",
            "ContextTokens", "arrival_time_ms", "x", "", "output tokens", "\u202e", "input_tokens\t"]
_CELLS = ["512", "128", "1", "0", "-5", "5.5", "512.0", "nan", "inf", "1e309", "-1e308", "1e308", "abc", "",
          '"64"', " 64 ", "16777216", "16777217", "99999999999999999999", "2023-11-16 18:15:46.68",
          "2023-11-16T18:15:46+05:00", "\u0661\u0662", "true", "\x00", "\u202e7", "9" * 400]
_JSON_VALUES: list[Any] = [512, 128, 1, 0, -5, 5.5, "512", "nan", None, True, [], {}, [1, 2], {"a": 1}, 10**19,
                           1e308, -1e308, "2023-11-16T18:15:46", "x" * 1000]


def _csv_text(rng: random.Random) -> str:
    header = rng.sample(_HEADERS, rng.randint(0, 5)) if rng.random() < 0.3 else \
        ["timestamp", "input_tokens", "output_tokens", "session_id"][: rng.randint(2, 4)]
    rows = []
    for _ in range(rng.randint(0, 6)):
        width = len(header) + rng.choice([0, 0, 0, -1, 1])
        # Short requests where a row is well formed: a trace that reads is simulated by search, at its cost.
        rows.append([rng.choice(_CELLS) if rng.random() < 0.4 else str(rng.randint(1, 256)) for _ in range(width)])
    separator = rng.choice([",", ",", ",", "\t", ";"])
    newline = rng.choice(["\n", "\n", "\r\n", "\r"])
    text = newline.join(separator.join(row) for row in [header, *rows]) + newline
    return ("\ufeff" if rng.random() < 0.1 else "") + text


def _json_rows(rng: random.Random) -> list[dict[str, Any]]:
    keys = ["input_tokens", "output_tokens", "timestamp", "session_id", "prefix_tokens"]
    rows = []
    for _ in range(rng.randint(0, 6)):
        row: dict[str, Any] = {"input_tokens": rng.randint(1, 256), "output_tokens": rng.randint(1, 64)}
        for key in rng.sample(keys, rng.randint(0, 3)):
            row[key] = rng.choice(_JSON_VALUES)
        if rng.random() < 0.1:
            row.pop(rng.choice(list(row)), None)
        rows.append(row)
    return rows


def _json_text(rng: random.Random) -> str:
    rows = _json_rows(rng)
    shape = rng.randrange(4)
    if shape == 0:
        return json.dumps(rows)  # a JSON array instead of JSON Lines
    if shape == 1:
        keys = {k for row in rows for k in row}
        return json.dumps({k: [row.get(k) for row in rows][: rng.choice([len(rows), max(0, len(rows) - 1)])]
                           for k in keys})
    text = "\n".join(json.dumps(row) for row in rows)
    return text[: rng.randrange(len(text) + 1)] if shape == 2 and text else text


def _special_file(folder: Path, index: int, rng: random.Random) -> str:
    choice = rng.randrange(4)
    if choice == 0 and hasattr(os, "mkfifo"):
        path = folder / f"fifo{index}.csv"
        os.mkfifo(path)  # opening it would block until a writer came
        return str(path)
    if choice == 1 and Path("/dev/zero").exists():
        return "/dev/zero"
    if choice == 2:
        path = folder / f"folder{index}.jsonl"
        path.mkdir()
        return str(path)
    path = folder / f"binary{index}.csv"
    path.write_bytes(rng.randbytes(rng.choice([1, 100, 5000])))
    return str(path)


def trace_file_cases(case: CaseMaker, model: Path, folder: Path, rng: random.Random, count: int) -> Iterator[Any]:
    folder.mkdir(exist_ok=True)
    for i in range(count):
        if rng.random() < 0.1:
            source = _special_file(folder, i, rng)
        else:
            suffix = rng.choice([".csv", ".jsonl", ".json", ".txt"])
            path = folder / f"trace{i}{suffix}"
            path.write_text(_csv_text(rng) if suffix == ".csv" or rng.random() < 0.3 else _json_text(rng),
                            encoding="utf-8")
            source = str(path)
        argv = ["search", "-m", str(model), "--gpus", "2", "--top", "1", "--json", "--workload", source]
        if rng.random() < 0.3:
            argv += ["--arrival", rng.choice(["trace", "poisson", "closed:4"]), "--rate", rng.choice(["2", "0.5"])]
        yield case("trace files", argv)


DIST_PARTS = ["fixed", "lognormal", "uniform", "weibull", "Fixed", ":", "mean=", "cv=", "low=", "high=", "tokens=",
               "foo=", ",", ",,", "=", "2048", "0.8", "0", "-1", "2.5", "1e309", "nan", "inf", "1e-300", "\u0661\u0662",
               " ", "\u202e", "\n", "99999999999999999999"]
ARRIVAL_PARTS = ["poisson", "gamma", "closed", "trace", ":", "cv=", "clients=", ",", "3", "0", "0.5", "2.7", "1e9",
                  "1e-300", "1e-160", "nan", "-1", " ", "\u00b2"]
SPEC_VALUES = ["mtp:1", "mtp:0", "mtp:\u00b2", "mtp:\u0663", "eagle:3", "eagle::3", "eagle:/dev/zero:3",
                "draft:llama-3.1-70b:3", "draft:nope:2", "draft::2", "mtp:17", "mtp:1:2", "", "x"]
_GOOD_DISTS = ["fixed:512", "lognormal:mean=512,cv=0.8", "lognormal:mean=256,cv=2,low=16,high=2048", "uniform:64,1024",
               " Fixed: 64 ,", "uniform:1,1"]
_GOOD_ARRIVALS = ["poisson", "gamma:cv=3", "gamma:0.01", "closed:4", "closed:clients=1"]
_FLOATS = ["0", "-0.1", "0.5", "1", "3", "4", "nan", "inf", "1e309", "x", "0.999999999"]


def _spelled(parts: list[str], rng: random.Random, most: int) -> str:
    return "".join(rng.choice(parts) for _ in range(rng.randint(1, most)))


def traffic_string_cases(case: CaseMaker, model: Path, rng: random.Random, count: int) -> Iterator[Any]:
    for _ in range(count):
        argv = ["search", "-m", str(model), "--gpus", "2", "--top", "1", "--json"]
        if rng.random() < 0.2:  # the same strings on split pools
            argv = ["plan", "-m", str(model), "--gpus", "2", "-s", "prefill:tp=1;decode:tp=1;disagg", "--json"]
        for flag in rng.sample(["--isl-dist", "--osl-dist", "--arrival", "--spec", "--prefix-hit"],
                               rng.randint(1, 3)):
            near = rng.random() < 0.4  # a well-formed value, so the run reaches the search behind the parser
            if flag in ("--isl-dist", "--osl-dist"):
                argv += [flag, rng.choice(_GOOD_DISTS) if near else _spelled(DIST_PARTS, rng, 6)]
            elif flag == "--arrival":
                argv += [flag, rng.choice(_GOOD_ARRIVALS) if near else _spelled(ARRIVAL_PARTS, rng, 4), "--rate",
                         rng.choice(["1", "5"])]
            elif flag == "--spec":
                argv += [flag, rng.choice(SPEC_VALUES), "--spec-accept", rng.choice(_FLOATS)]
            else:
                argv += [flag, rng.choice(_FLOATS)]
        yield case("traffic strings", argv)


_PLAN_EDITS: list[tuple[str, list[Any]]] = [
    ("deployment.pools", [[], None, "x"]),
    ("deployment.pools.0.role", ["decode", "prefill", "x"]),
    ("deployment.pools.0.workers", [0, -1, 10**9]),
    ("deployment.pools.0.layout", ["tp=64", "zz", "", "tp=1"]),
    ("deployment.pools.0.gpus_per_worker", [1, 64]),
    ("deployment.pools.0.concurrency_per_worker", [0, 10**9]),
    ("deployment.concurrency", [0, 10**9, 10**7]),
    ("deployment.replicas", [-1, 0]),
    ("deployment", [None, {}]),
    ("strategy.disaggregated", [True]),
    ("strategy.decode.tp", [64, 0]),
    ("request.gpus", [1, 0, 10**6]),
    ("request.model", ["llama-3.1-405b", "/nonexistent", ""]),
    ("request.workload.traffic", [{"arrival": {"kind": "gamma", "cv": 1e-300}},
                                  {"isl": {"kind": "lognormal", "mean": 100, "cv": 1, "low": 500, "high": 10}},
                                  {"osl": {"kind": "fixed", "tokens": 10**12}}, {"trace": "/dev/zero"},
                                  {"arrival": {"kind": "trace"}}]),
    ("request.workload.speculation", [{"method": "mtp", "draft_tokens": 3, "accepted": 9}, {"method": "x"}]),
    ("request.workload.prefix_hit", [1.0, -1, "nan"]),
    ("status", ["infeasible", "x"]),
]
_SIMULATE_FLAGS = [["--rate", "0"], ["--rate", "inf"], ["--rate", "1e-300"], ["--rate", "1e300"], ["--rate", "nan"],
                   ["--requests", "0"], ["--requests", "99999999999999999999"], ["--max-num-seqs", "0"],
                   ["--arrival", "closed:0"], ["--arrival", "gamma:cv=1e-300", "--rate", "2"], ["--router", "x"],
                   ["--isl-dist", "fixed:16777216"], ["--workload", "/dev/zero"], ["--rate", "3"],
                   ["--arrival", "gamma:cv=2", "--rate", "5"], ["--osl-dist", "uniform:1,64"], [], [], []]


def _edit(doc: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        if isinstance(node, list):
            node = node[int(key)] if node else {}
        elif isinstance(node, dict):
            node = node.setdefault(key, {}) if node.get(key) is not None else {}
        else:
            return
    if isinstance(node, list) and node:
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value


def simulate_plan_cases(case: CaseMaker, plan: dict[str, Any], mutate: Mutate, folder: Path, rng: random.Random,
                        count: int) -> Iterator[Any]:
    folder.mkdir(exist_ok=True)
    for i in range(count):
        doc = json.loads(json.dumps(plan))
        choice = rng.random()
        if choice < 0.1:
            text = json.dumps(doc)  # as written: only the flags are hostile
        elif choice < 0.6:
            for path, values in rng.sample(_PLAN_EDITS, rng.randint(1, 2)):
                _edit(doc, path, rng.choice(values))
            text = json.dumps(doc)
        elif choice < 0.85:
            for part in ("deployment", "strategy", "request"):
                if rng.random() < 0.5 and isinstance(doc.get(part), dict):
                    doc[part] = mutate(doc[part], rng, rng.randint(1, 2))
            text = json.dumps(doc)
        else:
            text = json.dumps(doc)
            text = text[: rng.randrange(len(text))]
        path = folder / f"plan{i}.json"
        path.write_text(text)
        output = folder / f"summary{i}.json"
        argv = ["simulate", str(path), "--requests", rng.choice(["20", "50"]), "--json", "-o", str(output)]
        argv += rng.choice(_SIMULATE_FLAGS)
        if rng.random() < 0.2:
            argv += ["--trace", rng.choice([str(folder / "missing" / "t.json"), str(folder)])]
        yield case("simulate plans", argv, output)
