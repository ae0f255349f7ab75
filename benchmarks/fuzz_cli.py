"""Malformed input against the command line, in-process: thousands of broken config.json files, cluster YAML
files, strategy specs, DAG/plan JSON files and workload flags, legal layouts given to ``plan -s`` at batches that
may not fill them (text, JSON and report; per-kind / 10 layouts), the bounds kinds of ``fuzz_bounds.py``
(YAML alias bombs and deep nesting, huge numbers, wrong types, huge DAGs), and the traffic kinds of
``fuzz_traffic.py`` (hostile trace files, distribution, arrival and speculation strings, plan files edited by hand
for ``simulate``), each run through the real
``shardplan`` entry point. Prints, per kind and in total: runs, tracebacks, runs over 30 s, half-written output
files, and how many errors were not one line naming the field and the fix.

Run: .venv/bin/python benchmarks/fuzz_cli.py [--per-kind 1000] [--seed 15] [--kinds traces,strings,simulate]
(huge DAGs: per-kind / 25 runs)

Each input is written to a scratch folder and the command runs as ``shardplan.cli.main`` with
``sys.argv`` set, stdout and stderr captured, and a 30 s alarm; a traceback is any exception other than
SystemExit leaving ``main``. An output file (``-o``) must be absent after a failure and complete after a
success, with no temporary file left beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fuzz_bounds import huge_dag_cases, huge_dag_files, huge_number_cases, wrong_type_cases, yaml_bomb_cases
from fuzz_given import given_strategy_cases
from fuzz_table import print_counts
from fuzz_traffic import simulate_plan_cases, trace_file_cases, traffic_string_cases

from shardplan.cli.main import main
from shardplan.tools.catalogs.bundled import _bundled_dir, bundled_models

SLOW_S = 30
HUGE = "__HUGE_INT__"
DEEP = "__DEEP_NESTING__"
POISON: list[Any] = [None, "abc", "", -1, 0, 1.5, -3.25, float("inf"), float("nan"), HUGE, DEEP, [], {}, True,
                     False, 10**18, 10**30, "1e999", "\u202e\n", ["x"], {"a": 1}, "fp8", 2**63]


def to_json(value: Any) -> str:
    """JSON text with the poison markers expanded: a 5,000-digit integer and 50,000 levels of nesting."""
    text = json.dumps(value)
    return (text.replace(f'"{HUGE}"', "1" + "0" * 5000)
            .replace(f'"{DEEP}"', "[" * 50_000 + "]" * 50_000))


def mutate(doc: Any, rng: random.Random, rounds: int = 1) -> Any:
    """``doc`` (a JSON-like tree, copied) with ``rounds`` random changes: a key dropped, a value of the wrong
    type, a list emptied or duplicated."""
    doc = json.loads(json.dumps(doc))
    for _ in range(rounds):
        parent, key = _random_slot(doc, rng)
        if parent is None:
            return rng.choice(POISON)
        action = rng.random()
        if action < 0.15 and isinstance(parent, dict):
            parent.pop(key, None)
        elif action < 0.2 and isinstance(parent[key], list) and parent[key]:
            parent[key] = parent[key] * rng.choice([0, 2])
        else:
            parent[key] = rng.choice(POISON)
    return doc


def _random_slot(doc: Any, rng: random.Random) -> tuple[Any, Any]:
    node, slot = doc, None
    for _ in range(rng.randint(1, 4)):
        if isinstance(node, dict) and node:
            key = rng.choice(list(node))
        elif isinstance(node, list) and node:
            key = rng.randrange(len(node))
        else:
            break
        slot = (node, key)
        node = node[key]
        if rng.random() < 0.4:
            break
    return slot if slot is not None else (None, None)


def broken_text(text: str, rng: random.Random) -> str:
    """``text`` cut short, with a byte flipped, or replaced by something that is not the format at all."""
    choice = rng.random()
    if choice < 0.3:
        return text[: rng.randrange(len(text))]
    if choice < 0.6:
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(["{", "]", ":", "\x00", "\n  - ", "'", '"', "\u202e", "\t"]) + text[i + 1:]
    return rng.choice(["", "null", "[]", "42", "- a\n- b", "\xff\xfe", "a: [1,\n", "{{{{", "!!python/object:os.system"])


# ------------------------------------------------------------------------------------------------ kinds


class Case:
    """One malformed input: the argv to run, the output file it may write, and what it is."""

    def __init__(self, kind: str, argv: list[str], output: Path | None = None) -> None:
        self.kind, self.argv, self.output = kind, argv, output


def config_cases(base: dict[str, Any], folder: Path, rng: random.Random, count: int) -> Iterator[Case]:
    for i in range(count):
        path = folder / f"config{i}" / "config.json"
        path.parent.mkdir()
        if rng.random() < 0.1:
            path.write_text(broken_text(json.dumps(base), rng))
        else:
            path.write_text(to_json(mutate(base, rng, rng.randint(1, 3))))
        command = ["show-model", str(path)] if i % 5 else ["build", "-m", str(path), "--gpus", "1", "-s", "tp=1",
                                                             "--isl", "64", "--osl", "8", "--json"]
        yield Case("config.json", command)


def cluster_cases(base: dict[str, Any], folder: Path, rng: random.Random, count: int) -> Iterator[Case]:
    import yaml

    for i in range(count):
        path = folder / f"cluster{i}.yaml"
        if rng.random() < 0.25:
            path.write_text(broken_text(yaml.safe_dump(base), rng))
        elif rng.random() < 0.1:
            path.write_text("a: " + "[" * 20_000 + "]" * 20_000 + "\n")
        else:
            mutated = mutate(base, rng, rng.randint(1, 2))
            text = yaml.safe_dump(mutated) if not isinstance(mutated, str) or mutated not in (HUGE, DEEP) else "x"
            path.write_text(text.replace(HUGE, "1" + "0" * 5000).replace(DEEP, "[" * 5000 + "]" * 5000))
        yield Case("cluster YAML", ["build", "-m", "llama-3.1-8b", "--cluster", str(path), "--gpus", "1", "-s", "tp=1",
                                    "--isl", "64", "--osl", "8", "--json"])


SPEC_PARTS = ["tp", "pp", "dp", "adp", "sp", "ep", "etp", "mb", "split", "prefill:", "decode:", ";disagg", "=",
              ",", ";", "0", "1", "2", "-4", "3.5", "999999999999", "1e9", "x", " ", "\u202e", "\n", "tp=2",
              "pp=0", "split=40/40", "split=1/2/3", "sp=8", "ep=1000000", "==", "tp=tp"]


def spec_cases(folder: Path, rng: random.Random, count: int) -> Iterator[Case]:
    for i in range(count):
        spec = "".join(rng.choice(SPEC_PARTS) for _ in range(rng.randint(0, 8)))
        output = folder / f"spec{i}.json"
        yield Case("strategy spec", ["build", "-m", "llama-3.1-8b", "--gpus", "8", "-s", spec, "--isl", "64",
                                     "--osl", "8", "-o", str(output)], output)


def dag_cases(dag: dict[str, Any], plan: dict[str, Any], folder: Path, rng: random.Random,
              count: int) -> Iterator[Case]:
    ids = [n["id"] for n in dag["nodes"]]
    for i in range(count):
        is_plan = i % 2 == 0
        doc = json.loads(json.dumps(plan if is_plan else dag))
        target = doc["dag"] if is_plan else doc
        choice = rng.random()
        if choice < 0.25:  # structural damage: a cycle, an edge to nowhere, a node lost or doubled
            edit = rng.randrange(4)
            if edit == 0:
                target["edges"].append({"src": rng.choice(ids), "dst": rng.choice(ids), "kind": "data"})
            elif edit == 1:
                target["edges"].append({"src": rng.choice(ids), "dst": "missing", "kind": "data"})
            elif edit == 2:
                target["nodes"].pop(rng.randrange(len(target["nodes"])))
            else:
                target["nodes"].append(rng.choice(target["nodes"]))
            text = json.dumps(doc)
        elif choice < 0.35:
            text = broken_text(json.dumps(doc), rng)
        else:
            text = to_json(mutate(doc, rng, rng.randint(1, 3)))
        path = folder / f"{'plan' if is_plan else 'dag'}{i}.json"
        path.write_text(text)
        if is_plan:
            if i % 6 == 0:
                output = folder / f"report{i}.html"
                yield Case("DAG/plan JSON", ["report", str(path), "-o", str(output)], output)
            else:
                yield Case("DAG/plan JSON", ["export", str(path), "--engine", rng.choice(["vllm", "sglang", "trtllm"])])
        else:
            yield Case("DAG/plan JSON", [rng.choice(["validate", "cost"]), str(path)])


FLAG_VALUES = {
    "--isl": ["0", "-1", "abc", "", "1e3", "99999999999999999999", "2.5", "nan"],
    "--osl": ["0", "-5", "x", "18446744073709551616"],
    "--batch": ["0", "-1", "many", "10000000000"],
    "--ttft-ms": ["0", "-1", "nan", "inf", "-inf", "abc", "1e400"],
    "--tpot-ms": ["0", "nan", "inf", "x"],
    "--objective": ["", "fast", "LATENCY", "\u202e", "latency\n"],
    "--gpus": ["0", "-8", "1000000000000", "x", ""],
    "--gpus-per-node": ["0", "-1", "100000", "z"],
    "--gpu": ["", " ", "H1000", "h100\n", "\x1b[31m"],
    "--prefill-batch": ["0", "-2", "x"],
    "--weight-dtype": ["", "fp3", "int4"],
    "--kv-dtype": ["", "bf17"],
}


def flag_cases(rng: random.Random, count: int) -> Iterator[Case]:
    flags = list(FLAG_VALUES)
    for _ in range(count):
        argv = ["build", "-m", "llama-3.1-8b", "-s", "tp=1", "--json"]
        chosen = {"--gpus": "1", "--isl": "64", "--osl": "8"}
        for flag in rng.sample(flags, rng.randint(1, 3)):
            chosen[flag] = rng.choice(FLAG_VALUES[flag])
        for flag, value in chosen.items():
            argv += [flag, value]
        yield Case("workload flags", argv)


# -------------------------------------------------------------------------------------------------- run


class _Slow(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Slow


def run_case(case: Case) -> dict[str, Any]:
    """Run one case through the CLI entry point; what happened."""
    if case.output is not None and case.output.exists():
        case.output.unlink()
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    crash = ""
    began = time.perf_counter()
    signal.alarm(SLOW_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            sys.argv = ["shardplan", *case.argv]
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _Slow:
        crash = "slow"
    except BaseException as exc:  # noqa: BLE001  (any escape is a traceback the user would see)
        crash = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    finally:
        signal.alarm(0)
    return {"code": code, "stderr": err.getvalue(), "crash": crash, "seconds": time.perf_counter() - began}


def half_written(case: Case, code: int | None) -> bool:
    """Whether ``case`` left a partial output: a file after a failure, a truncated one after a success, or a
    temporary file beside it."""
    if case.output is None:
        return False
    leftovers = list(case.output.parent.glob(f".{case.output.name}.*"))
    if leftovers:
        return True
    if code != 0:
        return case.output.exists()
    if not case.output.exists():
        return True
    text = case.output.read_text()
    if case.output.suffix == ".json":
        try:
            json.loads(text)
        except ValueError:
            return True
        return False
    return not text.rstrip().endswith("</html>")


def one_line_with_fix(stderr: str) -> bool:
    """An error message as promised: exactly one line, ``error: ...; fix`` (or click's pointer to --help)."""
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    return len(errors) == 1 and lines[-1] == errors[0] and ("; " in errors[0])


def main_fuzz() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=1000, help="inputs per kind (thirteen kinds)")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"a comma list of {', '.join(KINDS)}")
    args = parser.parse_args()
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    if not set(kinds) <= set(KINDS):
        parser.error(f"--kinds: choose among {', '.join(KINDS)}")
    rng = random.Random(args.seed)
    signal.signal(signal.SIGALRM, _alarm)
    scratch = Path(tempfile.mkdtemp(prefix="shardplan-fuzz-"))
    try:
        cases = list(_cases(scratch, rng, args.per_kind, kinds))
        print(f"{len(cases):,} malformed inputs, {args.per_kind:,} per kind, seed {args.seed}")
        _report(cases)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


KINDS = ("config", "cluster", "spec", "dag", "flags", "given", "bombs", "numbers", "types", "huge", "traces", "strings",
         "simulate")
"""The kinds of input, in the order they run (``--kinds`` picks some)."""


def _cases(scratch: Path, rng: random.Random, per_kind: int, kinds: list[str]) -> Iterator[Case]:
    import yaml

    base = json.loads((_bundled_dir() / bundled_models()["meta-llama/Llama-3.1-8B"]).read_text())
    tiny = {**base, "num_hidden_layers": 2}
    (scratch / "tiny").mkdir()
    (scratch / "tiny" / "config.json").write_text(json.dumps(tiny))
    moe = json.loads((_bundled_dir() / bundled_models()["Qwen/Qwen3-30B-A3B"]).read_text())
    (scratch / "tiny-moe").mkdir()
    (scratch / "tiny-moe" / "config.json").write_text(json.dumps({**moe, "num_hidden_layers": 2}))
    cluster = yaml.safe_load((Path(__file__).parents[1] / "tools/data/clusters/h100-2x8-ib.yaml").read_text())
    for command in (["build", "-m", str(scratch / "tiny"), "--gpus", "2", "-s", "tp=2", "--isl", "64", "--osl",
                     "8", "-o", str(scratch / "dag.json")],
                    ["plan", "-m", str(scratch / "tiny"), "--gpus", "2", "--isl", "64", "--osl", "8", "-o",
                     str(scratch / "plan.json")]):
        seen = run_case(Case("setup", command))
        if seen["code"] != 0:
            raise SystemExit(f"setup failed: {' '.join(command)}: {seen['stderr'] or seen['crash']}")
    dag = json.loads((scratch / "dag.json").read_text())
    plan = json.loads((scratch / "plan.json").read_text())
    for kind, make in (("config", lambda: config_cases(base, scratch, rng, per_kind)),
                       ("cluster", lambda: cluster_cases(cluster, scratch, rng, per_kind)),
                       ("spec", lambda: spec_cases(scratch, rng, per_kind)),
                       ("dag", lambda: dag_cases(dag, plan, scratch, rng, per_kind)),
                       ("flags", lambda: flag_cases(rng, per_kind)),
                       ("given", lambda: given_strategy_cases(Case, scratch / "tiny", scratch / "tiny-moe",
                                                              scratch / "given", rng, max(5, per_kind // 10))),
                       ("bombs", lambda: yaml_bomb_cases(Case, scratch / "bombs", rng, per_kind)),
                       ("numbers", lambda: huge_number_cases(Case, scratch / "numbers", rng, per_kind)),
                       ("types", lambda: wrong_type_cases(Case, base, cluster, scratch / "types", rng, per_kind)),
                       ("huge", lambda: huge_dag_cases(Case, huge_dag_files(scratch / "huge"), rng,
                                                       max(5, per_kind // 25))),
                       ("traces", lambda: trace_file_cases(Case, scratch / "tiny", scratch / "traces", rng, per_kind)),
                       ("strings", lambda: traffic_string_cases(Case, scratch / "tiny", rng, per_kind)),
                       ("simulate", lambda: simulate_plan_cases(Case, plan, mutate, scratch / "simulate", rng,
                                                                per_kind))):
        if kind in kinds:
            (scratch / kind).mkdir(exist_ok=True)
            yield from make()


def _report(cases: list[Case]) -> None:
    totals: dict[str, Counter[str]] = {}
    examples: dict[str, str] = {}
    began = time.perf_counter()
    for done, case in enumerate(cases):
        if done and done % 500 == 0:  # progress on stderr, so a long run can be followed
            print(f"{done:,} of {len(cases):,} after {time.perf_counter() - began:.0f} s", file=sys.stderr)
        seen = run_case(case)
        counts = totals.setdefault(case.kind, Counter())
        counts["runs"] += 1
        if seen["crash"] == "slow":
            counts["over 30 s"] += 1
            examples.setdefault("over 30 s", " ".join(case.argv)[:200])
        elif seen["crash"]:
            counts["tracebacks"] += 1
            examples.setdefault(f"traceback ({case.kind})", f"{' '.join(case.argv)[:160]}: {seen['crash'][:300]}")
        elif seen["code"] == 0:
            counts["accepted"] += 1
        elif seen["code"] == 1 and case.argv[0] == "validate":
            counts["refused"] += 1  # a validation report with violations: a result on stdout, not an error
        else:
            counts["refused"] += 1
            if not one_line_with_fix(seen["stderr"]):
                counts["errors not one line with a fix"] += 1
                examples.setdefault(f"error shape ({case.kind})", seen["stderr"][:300])
        if half_written(case, seen["code"]):
            counts["half-written files"] += 1
        counts["max ms"] = max(counts["max ms"], int(seen["seconds"] * 1000))
    columns = ["runs", "refused", "accepted", "tracebacks", "over 30 s", "half-written files",
               "errors not one line with a fix", "max ms"]
    print_counts(totals, columns)
    print(f"{time.perf_counter() - began:.0f} s in all")
    for what, example in examples.items():
        print(f"example {what}: {example!r}")


if __name__ == "__main__":
    main_fuzz()
