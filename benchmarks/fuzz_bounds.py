"""The bounds kinds of ``fuzz_cli.py``: inputs built to exhaust time or memory rather than to be malformed.

* YAML bombs: nested aliases ("billion laughs") of random width and depth, aliases inside their own anchor,
  deep nesting, long scalars and 5,000-digit integers, as cluster files and evaluation case files.
* huge numbers: integers of 20 to 5,000 digits and ``1e999`` in strategy specs, constraints, speculation,
  length distributions, arrival processes and numeric flags.
* wrong types: a config.json or cluster YAML whose values have the wrong JSON type (``true`` for a count,
  ``"4096"`` for a width, lists and mappings for numbers).
* huge DAGs: DAG files past the node and edge limits, and just under them (199,000 bad nodes, or one bad
  node at the end of 150,000 good ones), validated, priced, exported and drawn.

Each generator yields ``fuzz_cli.Case`` objects; the huge DAG files are written once and shared by their cases.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CaseMaker = Callable[..., Any]

_DIGITS = [20, 25, 100, 1000, 4300, 4301, 5000]


def _huge(rng: random.Random) -> str:
    return rng.choice("123456789") + "9" * (rng.choice(_DIGITS) - 1)


def _bomb(rng: random.Random) -> str:
    """A YAML document of nested aliases: ``width`` uses of the previous anchor at each of ``depth`` levels."""
    width, depth = rng.randint(2, 12), rng.randint(3, 12)
    lines = ["l0: &l0 [" + ",".join(["lol"] * width) + "]"]
    for level in range(1, depth):
        lines.append(f"l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * width) + "]")
    lines.append(rng.choice(["gpu: H100", f"gpu: *l{depth - 1}", f"nodes: *l{depth - 1}"]))
    return "\n".join(lines) + "\n"


def yaml_bomb_text(rng: random.Random) -> str:
    """One hostile YAML document."""
    choice = rng.randrange(7)
    if choice == 0:
        return _bomb(rng)
    if choice == 1:
        return "gpu: &a [H100, *a]\n"
    if choice == 2:
        return "a: &a {b: *a}\ngpu: H100\n"
    if choice == 3:
        depth = rng.choice([100, 1000, 10_000, 50_000])
        opener, closer = rng.choice([("[", "]"), ("{a: ", "}")])
        return "gpu: H100\nx: " + opener * depth + "1" + closer * depth + "\n"
    if choice == 4:
        return f"gpu: H100\nnodes: {_huge(rng)}\ngpus_per_node: 8\n"
    if choice == 5:
        return "gpu: H100\nname: " + "x" * rng.choice([10_000, 400_000, 600_000]) + "\n"
    return "gpu: H100\nnodes: 1\n" + "".join(f"k{i}: [{','.join(['1'] * 50)}]\n" for i in range(rng.randint(10, 3000)))


def yaml_bomb_cases(case: CaseMaker, folder: Path, rng: random.Random, count: int) -> Iterator[Any]:
    for i in range(count):
        path = folder / f"bomb{i}.yaml"
        path.write_text(yaml_bomb_text(rng))
        if i % 4 == 3:
            yield case("YAML bombs", ["eval", "--cases", str(path), "-o", str(folder / f"eval{i}")])
        else:
            command = rng.choice(["build", "cost"])
            yield case("YAML bombs", [command, "-m", "llama-3.1-8b", "--cluster", str(path), "--gpus", "1", "-s",
                                      "tp=1", "--isl", "64", "--osl", "8", "--json"])


def huge_number_cases(case: CaseMaker, folder: Path, rng: random.Random, count: int) -> Iterator[Any]:
    for i in range(count):
        big = _huge(rng)
        argv = ["build", "-m", "llama-3.1-8b", "--gpus", "8", "-s", "tp=1", "--isl", "64", "--osl", "8", "--json"]
        choice = rng.randrange(10)
        if choice == 0:
            argv[6] = rng.choice([f"layers={big}", f"tp={big}", f"split=16/{big}", f"prefill:tp={big};decode:tp=1",
                                  f"pp=2,mb={big}"])
        elif choice == 1:
            argv = ["cost", "-m", "qwen3-30b-a3b", "--gpus", "8", "-s", f"layers={big}", "--isl", "128", "--osl", "16"]
        elif choice == 2:
            argv = ["plan", "-m", "llama-3.1-8b", "--gpus", "8", "--isl", "64", "--osl", "8", "-C",
                    rng.choice([f"tp<={big}", f"gpus-per-replica={big}", f"decode:ep>={big}"])]
        elif choice == 3:
            argv += ["--spec", rng.choice([f"mtp:{big}", f"eagle:{big}", f"draft:llama-3.2-1b:{big}"]),
                     "--spec-accept", rng.choice(["1", big, "1e999", "nan"])]
        elif choice == 4:
            argv += ["--isl-dist", rng.choice([f"lognormal:mean={big},cv=0.8", f"uniform:1,{big}", f"fixed:{big}",
                                               "lognormal:mean=1e999,cv=1", f"lognormal:mean=2048,cv=1,high={big}"])]
        elif choice == 5:
            argv += ["--arrival", rng.choice([f"closed:{big}", f"gamma:cv={big}", "gamma:cv=1e999"]),
                     "--rate", rng.choice(["1", big, "1e999"])]
        elif choice == 6:
            flag = rng.choice(["--isl", "--osl", "--batch", "--gpus", "--gpus-per-node", "--prefill-batch",
                               "--max-batched-tokens"])
            argv += [flag, big]
        elif choice == 7:
            argv += [rng.choice(["--ttft-ms", "--tpot-ms", "--rate", "--prefix-hit", "--gpu-memory-utilization"]),
                     rng.choice([big, "1e999", "-1e999", "1e-999", "0x10"])]
        else:
            path = folder / f"number{i}.json" if choice == 8 else folder / f"number{i}.yaml"
            if choice == 8:
                path.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2})
                                .replace("2}", big + "}"))
                argv[2] = str(path)
            else:
                path.write_text(f"gpu: H100\nnodes: 1\ngpus_per_node: {big}\n")
                argv += ["--cluster", str(path)]
        yield case("huge numbers", argv)


_WRONG: list[Any] = [True, False, "4096", "1e3", [8], {"n": 8}, None, 8.5, -8, "", "true"]


def wrong_type_cases(case: CaseMaker, config: dict[str, Any], cluster: dict[str, Any], folder: Path,
                     rng: random.Random, count: int) -> Iterator[Any]:
    import yaml

    for i in range(count):
        if i % 2:
            doc = dict(config)
            for key in rng.sample(sorted(k for k in doc if not isinstance(doc[k], (dict, list))), rng.randint(1, 3)):
                doc[key] = rng.choice(_WRONG)
            path = folder / f"typed{i}" / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(doc))
            yield case("wrong types", ["build", "-m", str(path.parent), "--gpus", "1", "-s", "tp=1", "--isl", "64",
                                       "--osl", "8", "--json"])
        else:
            doc = dict(cluster)
            for key in rng.sample(sorted(doc), rng.randint(1, 3)):
                doc[key] = rng.choice(_WRONG)
            path = folder / f"typed{i}.yaml"
            path.write_text(yaml.safe_dump(doc))
            yield case("wrong types", ["build", "-m", "llama-3.1-8b", "--cluster", str(path), "--gpus", "1", "-s",
                                       "tp=1", "--isl", "64", "--osl", "8", "--json"])


def _nodes(count: int, kind: str) -> list[dict[str, Any]]:
    return [{"id": f"n{i}", "kind": kind, "op": "linear", "phase": "decode"} for i in range(count)]


def huge_dag_files(folder: Path) -> list[Path]:
    """DAG files at and past the limits, written once: 199,000 nodes of an unknown kind; 150,000 nodes with
    one bad node at the end; 250,000 nodes; 450,000 edges between two nodes; a plan holding 210,000 nodes."""
    folder.mkdir(exist_ok=True)
    docs = {
        "bad-kinds.json": {"schema_version": "1", "nodes": _nodes(199_000, "compute"), "edges": []},
        "one-bad.json": {"schema_version": "1", "nodes": _nodes(150_000, "linear") + _nodes(1, "compute"),
                         "edges": []},
        "over-nodes.json": {"schema_version": "1", "nodes": _nodes(250_000, "linear"), "edges": []},
        "over-edges.json": {"schema_version": "1", "nodes": _nodes(2, "linear"),
                            "edges": [{"src": "n0", "dst": "n1", "kind": "data"}] * 450_000},
        "plan.json": {"request": {}, "status": "ok", "dag": {"schema_version": "1",
                                                             "nodes": _nodes(210_000, "linear"), "edges": []}},
    }
    paths = []
    for name, doc in docs.items():
        path = folder / name
        path.write_text(json.dumps(doc, separators=(",", ":")))
        paths.append(path)
    return paths


def huge_dag_cases(case: CaseMaker, files: list[Path], rng: random.Random, count: int) -> Iterator[Any]:
    for i in range(count):
        path = files[i % len(files)]
        command = rng.choice([["validate", str(path)], ["validate", str(path), "--json"], ["cost", str(path)],
                              ["export", str(path), "--engine", "vllm"],
                              ["report", str(path), "-o", str(path.with_suffix(f".{i}.html"))]])
        output = Path(command[-1]) if command[0] == "report" else None
        yield case("huge DAGs", command, output)
