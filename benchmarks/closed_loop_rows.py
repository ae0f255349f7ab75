"""The measured closed-loop rows the engine simulator is compared with (``bench_closed_loop.py``): the sweeps of
``calibration/closed_loop.yaml`` and the closed-loop rows of ``calibration/end_to_end.yaml``, each a deployment at
one concurrency with what was measured there; for sweeps measured by SGLang's ``bench_serving``, the very requests
that client sent (its seeded lengths, checked against the token totals it printed).
"""

from __future__ import annotations

import re
import sys
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "calibration"))

import error_table as table  # noqa: E402
from closed_loop_figures import PERCENTILES  # noqa: E402

__all__ = ["CLOSED_LOOP", "Deployment", "Point", "bench_serving_lengths", "closed_loop_row", "table_points",
           "yaml_points"]

CLOSED_LOOP = HERE / "calibration" / "closed_loop.yaml"


@dataclass(frozen=True)
class Deployment:
    """What one measured sweep ran: the model, the GPUs, the layout and the engine, at one pair of lengths."""

    model: str
    weight_dtype: str | None
    kv_dtype: str | None
    gpu: str
    gpus: int
    strategy: str
    engine: str
    isl: int
    osl: int
    scheduler: str | None = None
    """How that engine release scheduled, where it differs from today's: ``vllm-v0-unchunked`` (vLLM's V0 engine with
    chunked prefill off, :attr:`~shardplan.tools.simulation.run.SimulationOptions.vllm_v0_unchunked`); None: the
    engine's own as the simulator runs it."""
    max_batched_tokens: int | None = None
    """The engine's step budget where the run's command or release sets it; None: the simulator's default."""


@dataclass
class Point:
    """One measured concurrency of a deployment: its mean (or median) TTFT, TPOT and output tokens/s."""

    id: str
    deployment: Deployment
    clients: int
    measured: dict[str, float]
    statistic: str = "mean"
    source: str = ""
    requests: tuple[np.ndarray, np.ndarray] | None = None
    """The client's own requests (prompt and output lengths, in the order it sent them): the whole run is replayed
    and every request counted; None: ``max(10 N, 400)`` requests of the deployment's lengths, the steady state."""
    warm_prefixes: tuple[tuple[int, int], ...] = ()
    """What the server's prefix cache holds when the run starts, (request index, prompt tokens), least recently used
    first (:attr:`~shardplan.tools.simulation.run.SimulationOptions.warm_prefixes`); empty: no cache kept. Where
    set, request i's prompt is the same text in every run of its server (the i-th conversation of
    ``bench_serving``'s seeded shuffle, cut to the length drawn for it): each request is its own prefix group, its
    whole prompt the prefix."""


def yaml_points() -> list[Point]:
    """Every concurrency of every sweep in closed_loop.yaml."""
    points = []
    for entry in yaml.safe_load(CLOSED_LOOP.read_text()):
        if entry.get("prefix_cache_kept"):
            points += served_in_order(entry, _entry_points(entry))
            continue
        points += _entry_points(entry)
    return points


def _entry_points(entry: dict[str, Any]) -> list[Point]:
    """Every concurrency of one entry's sweeps, in the order listed."""
    points = []
    source = table.short_source(entry["source"].split(";")[0])
    for sweep in entry["sweeps"]:
        deployment = Deployment(entry["model"], table.checkpoint_dtype(entry["model"], entry["weight_dtype"]),
                                entry.get("kv_dtype"), entry["gpu"], int(entry["gpus"]), entry["strategy"],
                                entry["engine"], int(sweep["isl"]), int(sweep["osl"]), entry.get("scheduler"),
                                entry.get("max_batched_tokens"))
        name = f"{entry['id']}-{sweep['isl']}-{sweep['osl']}"
        if entry.get("client") == "bench_serving":
            points += [_bench_serving_point(entry, deployment, name, row, source) for row in sweep["rows"]]
            continue
        for clients, ttft, itl, tokens in sweep["rows"]:
            points.append(Point(f"{name}-conc{clients}", deployment, int(clients),
                                {"ttft_ms": ttft, "tpot_ms": itl, "tokens_per_s": tokens}, source=source))
    return points


def served_in_order(entry: dict[str, Any], points: list[Point]) -> list[Point]:
    """The ``bench_serving`` runs of ``entry``, run one after another on servers that keep their prefix cache
    (``prefix_cache_kept``): a sweep marked ``server_launched`` starts a new server, the others run on the one
    before. Before each run the client's warm-up request sends the first prompt; request i's prompt is the same
    conversation in every run (``Point.warm_prefixes``), so each run starts with the prompts of the runs before
    it cached, the most recent last, each as long as the longest run of it (runs of another input length share
    the shorter prompt's tokens). Capacity is left to the simulated KV cache, which keeps the most recent.

    >>> lengths = (np.array([5, 6, 7]), np.ones(3, dtype=np.int64))
    >>> d = Deployment("m", None, None, "H100", 1, "tp=1", "sglang", 6, 1)
    >>> runs = [Point(f"s-conc{n}", d, n, {}, requests=lengths) for n in (1, 2)]
    >>> [p.warm_prefixes for p in served_in_order({"sweeps": [{"server_launched": True, "rows": [0, 0]}]}, runs)]
    [((0, 5),), ((1, 6), (2, 7), (0, 5))]
    """
    cached: OrderedDict[int, int] = OrderedDict()
    sizes = [len(sweep["rows"]) for sweep in entry["sweeps"]]
    launched = [bool(sweep.get("server_launched")) for sweep in entry["sweeps"]]
    starts = {sum(sizes[:k]) for k, new in enumerate(launched) if new}
    served = []
    for k, point in enumerate(points):
        if k in starts:
            cached.clear()
        assert point.requests is not None, "a bench_serving run replays the client's requests"
        prompts = point.requests[0]
        _touch(cached, 0, int(prompts[0]))  # the warm-up request
        served.append(replace(point, warm_prefixes=tuple(cached.items())))
        for index, tokens in enumerate(prompts.tolist()):
            _touch(cached, index, tokens)
    return served


def _touch(cached: OrderedDict[int, int], index: int, tokens: int) -> None:
    """Prompt ``index`` of ``tokens`` tokens served: cached at the longest it has been, the most recently used."""
    cached[index] = max(cached.get(index, 0), tokens)
    cached.move_to_end(index)


def bench_serving_lengths(isl: int, osl: int, prompts: int, range_ratio: float, seed: int,
                          output_floor: int) -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output lengths SGLang's ``bench_serving`` draws for its random dataset, in the order it sends
    them: ``np.random.seed(seed)``, then ``np.random.randint(max(int(isl * ratio), 1), isl + 1, prompts)`` for the
    prompts and the same for the outputs from ``max(int(osl * ratio), output_floor)`` (``sample_random_requests``,
    python/sglang/bench_serving.py; releases before ``compute_random_lens`` let an output length be 0).

    >>> [int(a.sum()) for a in bench_serving_lengths(1000, 1000, 80, 0.0, 1, 0)]
    [39668, 40725]
    """
    state = np.random.RandomState(seed)  # the legacy generator np.random.seed seeds
    prompt = state.randint(max(int(isl * range_ratio), 1), isl + 1, size=prompts)
    output = state.randint(max(int(osl * range_ratio), output_floor), osl + 1, size=prompts)
    return prompt.astype(np.int64), output.astype(np.int64)


def _bench_serving_point(entry: dict[str, Any], deployment: Deployment, name: str, row: list[float],
                         source: str) -> Point:
    """One concurrency of a ``bench_serving`` sweep: ``[clients, prompts, input tokens, output tokens, mean TTFT,
    mean TPOT, output tokens/s]`` as the client printed them, then its median and P99 TTFT and TPOT where the source
    gives them, with the requests it sent.

    Raises:
        ValueError: the lengths drawn do not add up to the token totals the client printed.
    """
    clients, prompts, total_in, total_out, ttft, tpot, tokens = row[:7]
    spread = dict(zip(PERCENTILES, map(float, row[7:]), strict=True)) if len(row) > 7 else {}
    isl, osl = bench_serving_lengths(deployment.isl, deployment.osl, int(prompts), float(entry["range_ratio"]),
                                     int(entry["seed"]), int(entry["output_floor"]))
    if (int(isl.sum()), int(osl.sum())) != (int(total_in), int(total_out)):
        raise ValueError(f"{name}-conc{clients}: the lengths drawn add up to {isl.sum()} and {osl.sum()} tokens, "
                         f"the client printed {total_in} and {total_out}")
    # An output of 0 tokens (max_tokens 0) still prefills; the simulator runs every request to one token at least.
    return Point(f"{name}-conc{clients}", deployment, int(clients),
                 {"ttft_ms": ttft, "tpot_ms": tpot, "tokens_per_s": tokens, **spread}, source=source,
                 requests=(isl, np.maximum(osl, 1)))


def closed_loop_row(row: dict[str, Any]) -> bool:
    """Whether a row of end_to_end.yaml was measured by a serving benchmark at a stated client concurrency (a
    continuous-batching row with a batch, or a reference run at concurrency 1), not by a fixed-batch one."""
    if not row.get("batch") or table.fixed_batch(row):
        return False
    return "conc" in row["id"] or table.batching(row) == "continuous"


def _unsimulated(row: dict[str, Any]) -> str | None:
    """Why a closed-loop row cannot be simulated here, else None."""
    reason = table.skip_reason(row)
    if reason:
        return reason
    if not row.get("osl"):
        return "no output length"
    return None


def table_points(covered: set[tuple[str, str, int, str, int, int, int]]) -> tuple[list[Point], list[tuple[str, str]]]:
    """The closed-loop rows of end_to_end.yaml, one point per deployment and concurrency (its metrics together),
    leaving out those ``covered`` (model, GPU, GPUs, strategy, isl, osl, concurrency) already holds."""
    points: dict[tuple[Any, ...], Point] = {}
    skipped: list[tuple[str, str]] = []
    for row in yaml.safe_load(table.END_TO_END.read_text()):
        if not closed_loop_row(row):
            continue
        reason = _unsimulated(row)
        if reason:
            skipped.append((row["id"], reason))
            continue
        gpus, clients = int(row["gpus"]), int(row["batch"])
        if (row["model"], row["gpu"], gpus, row["strategy"], int(row["isl"]), int(row["osl"]), clients) in covered:
            continue
        deployment = Deployment(row["model"], table.checkpoint_dtype(row["model"], row["weight_dtype"]),
                                table.kv_dtype(row), row["gpu"], gpus, row["strategy"], table.serving_engine(row),
                                int(row["isl"]), int(row["osl"]))
        point = points.setdefault((deployment, clients), Point(
            re.sub(r"-(tpot|ttft|tput)$", "", row["id"]), deployment, clients, {},
            source=table.short_source(str(row["source"]))))
        value = float(row["value"])
        metric = {"output_tokens_per_s_per_gpu": "tokens_per_s", "output_tokens_per_s": "tokens_per_s"}.get(
            row["metric"], row["metric"])
        if row["metric"] == "output_tokens_per_s_per_gpu":
            value *= gpus
        point.measured[metric] = value
        if re.search(r"\bmedian\b", str(row.get("note", "")), re.I):
            point.statistic = "median"
    return list(points.values()), skipped
