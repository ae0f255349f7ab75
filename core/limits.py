"""Every size and time bound of shardplan, in one place, and the checks that apply them before work starts.

A hostile or careless caller (an agent over MCP, a pasted config, a scripted model) can ask for work that
never ends or memory that never comes back: a config with a million layers, a million nodes, a chat reply of
megabytes. Each bound below is far above any real deployment (DeepSeek-V3 has 61 layers, the largest
bundled cluster 64 GPUs) and is checked on the input itself, before a DAG is built or a search starts, so
a refusal is immediate and names the field and the limit.

>>> check_count("gpus", 16, MAX_GPUS)
16
>>> check_count("gpus", 10**12, MAX_GPUS)
Traceback (most recent call last):
...
shardplan.errors.InputError: gpus=1000000000000 exceeds the limit of 4,096; plan for at most 4,096 gpus
"""

from __future__ import annotations

import os

from shardplan.errors import InputError
from shardplan.text import one_line

__all__ = [
    "MAX_LAYERS",
    "MAX_GPUS",
    "MAX_NODES",
    "MAX_GPUS_PER_NODE",
    "MAX_CONFIG_INT",
    "MAX_CONFIG_BYTES",
    "MAX_PROMPT_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_DB_BYTES",
    "MAX_DAG_CHARS",
    "MAX_DAG_NODES",
    "MAX_DAG_EDGES",
    "MAX_YAML_BYTES",
    "MAX_YAML_VALUES",
    "WORKER_MEMORY_BYTES",
    "MAX_INT_DIGITS",
    "MAX_TRACE_BYTES",
    "MAX_TRACE_ROWS",
    "MAX_TRACE_TOKENS",
    "TOOL_CALL_SECONDS",
    "MAX_STORED_RESULTS",
    "MAX_STORED_RESULT_CHARS",
    "MAX_TOOL_SWEEP_CELLS",
    "MIN_RATE",
    "MAX_RATE",
    "RATE_RANGE",
    "check_rate",
    "check_count",
    "tool_call_seconds",
    "dag_node_limit",
    "dag_edge_limit",
    "worker_memory_bytes",
    "check_dag_size",
]

MAX_LAYERS = 1024
"""Transformer layers a model config may declare (the largest real models have about 130)."""
MAX_GPUS = 4096
"""GPUs a request or cluster may hold."""
MAX_NODES = 512
"""Nodes a cluster may hold."""
MAX_GPUS_PER_NODE = 512
"""GPUs one node may hold (rack-scale NVLink domains have 72)."""
MAX_CONFIG_INT = 10**9
"""Largest value of any integer key of a model config (vocabularies and widths are below a million)."""
MAX_CONFIG_BYTES = 4_000_000
"""Largest config.json or cluster YAML file read, in bytes."""
MAX_PROMPT_CHARS = 16_000
"""Longest chat prompt, in characters: a long brief fits (a planning request needs a few hundred), and the
request parser is linear, so reading one at this length takes well under a second."""
MAX_MESSAGE_CHARS = 20_000
"""Longest model reply kept in a conversation, in characters; longer replies are cut before they are stored."""
MAX_DB_BYTES = 64 * 1024 * 1024
"""Largest chat thread database a new turn is started on, in bytes."""
MAX_DAG_CHARS = 32_000_000
"""Largest DAG JSON text accepted by a tool, in characters, checked before parsing."""
MAX_DAG_NODES = 200_000
"""Largest DAG accepted, in nodes ($SHARDPLAN_MAX_DAG_NODES overrides). Real DAGs: DeepSeek-V3 on 64 GPUs
(prefill sp=8,tp=8,ep=64,mb=2) has 31,708 nodes and 53,877 edges; Llama-3.1-405B on 64 GPUs with pp=2, mb=8
about 110,000 nodes (benchmarks/bench_validate.py); Llama-3.1-405B on 128 GPUs with pp=4, mb=16 reaches
221,108 nodes and 299,809 edges, past this default, and its 109 MB of JSON are past MAX_DAG_CHARS too: such a
DAG is refused as a file or argument (building it took 0.9 GB of memory). The limit sits 6x above DeepSeek-V3
on 64 GPUs."""
MAX_DAG_EDGES = 400_000
"""Largest DAG accepted, in edges ($SHARDPLAN_MAX_DAG_EDGES overrides): twice the node limit, as real DAGs
hold 1.4 to 1.7 edges per node (the figures above)."""
MAX_YAML_BYTES = 128_000
"""Largest YAML file read (cluster files, evaluation cases), in bytes: a cluster file is under 1 KB, an evaluation
case file a few KB, the reading cases (tests/data/requests.yaml) 23 KB. YAML of small numbers parses at about
60 KB/s even with libyaml (its resolver is Python), so this much takes about 2 s."""
MAX_YAML_VALUES = 100_000
"""Values (mappings, lists and scalars) a YAML document may expand to, aliases counted at each use: a few
hundred bytes of nested aliases ("billion laughs") expand to 9**9 values, which no check may walk."""
WORKER_MEMORY_BYTES = 4 * 1024**3
"""Address space one MCP worker process may map, in bytes ($SHARDPLAN_WORKER_MEMORY overrides, e.g. 6G).
A worker maps about 170 MB after its imports (numpy and the capability layer, loaded in the forkserver before
the limit), a DeepSeek-V3 plan on 64 GPUs about 210 MB, and building the 221,108-node Llama-3.1-405B DAG above
with the DAG in the answer peaks at 1.66 GB (measured on 2 cores through CapabilityWorkers). Four workers at
this limit stay under 16 GiB, and fewer run at once when the machine has less memory available."""
MAX_INT_DIGITS = 19
"""Digits of the largest integer read from a JSON file (a 64-bit integer has at most 19)."""
MAX_TRACE_BYTES = 64_000_000
"""Largest request trace file read, in bytes (a day of a busy service in CSV is a few tens of MB; the bundled
samples are under 200 KB)."""
MAX_TRACE_ROWS = 1_000_000
"""Requests a trace may hold: a million rows read in a few seconds and hold a few tens of MB."""
MAX_TRACE_TOKENS = 16_777_216
"""Prompt or output tokens of one request in a trace (16 Mi, above every context window)."""
TOOL_CALL_SECONDS = 60.0
"""Seconds one MCP tool call may run before it is stopped ($SHARDPLAN_TOOL_TIMEOUT overrides)."""
MAX_STORED_RESULTS = 32
"""Full tool results the MCP server keeps for reading later (``shardplan://results/{id}``); the oldest go first."""
MAX_STORED_RESULT_CHARS = 64_000_000
"""Characters of JSON those kept results may hold together (a DeepSeek-V3 plan is about 150,000 without its DAG,
a few million with it); a result larger than this is not kept."""

MAX_TOOL_SWEEP_CELLS = 64
"""Cells one ``sweep`` tool call may plan. The call plans them one after another in its worker, under the tool
time limit (:data:`TOOL_CALL_SECONDS`); a cell is one plan, about 0.5 s to 20 s on 2 cores (Llama-3.1-8B on one
GPU without a rate, once the worker's search memo is warm, to Llama-3.1-70B at 20 requests/s on 16 H100s), so
64 of the fastest fill the default limit. Larger grids belong to ``shardplan sweep`` (parallel, resumable, on
Ray)."""

MIN_RATE = 1e-6
"""Fewest requests per second a workload may ask for: one request in 11.6 days, when the deployment idles all but
a vanishing share of the time. The bound keeps the simulator's float64 clock fine enough: the last of the
1,000,000 requests ``shardplan simulate`` may replay arrives near 1e12 s at this rate, where float64 values lie
1.2e-4 s apart, still a small part of a decode step (milliseconds); at 1e-300 every figure per second is
1e-298, and a subnormal rate overflows the arrival times to infinity."""
MAX_RATE = 1e8
"""Most requests per second a workload may ask for: 20 times what :data:`MAX_GPUS` H100s serve of the fastest
traffic there is, one-token prompts and outputs of Llama-3.1-8B (1,229 requests/s on one H100 by the serving
model: ``shardplan search -m meta-llama/Llama-3.1-8B -n 1 --isl 1 --osl 1 --rate 100000``, times 4,096 GPUs is
5.0e6). Above it no deployment the limits allow comes near, and tokens/s (rate x output tokens) stays finite."""
RATE_RANGE = f"from {MIN_RATE:g} (one request in 11.6 days) to {MAX_RATE:g} requests/s"
"""The accepted rates in words, for the messages that refuse one."""


def check_count(field: str, value: int, limit: int) -> int:
    """``value`` when it is at most ``limit``; otherwise an InputError naming ``field`` and the limit."""
    if value > limit:
        raise InputError(f"{field}={value} exceeds the limit of {limit:,}", field=field,
                         fix=f"plan for at most {limit:,} {field}")
    return value


def check_rate(field: str, value: float) -> float:
    """``value`` when it lies within :data:`MIN_RATE` and :data:`MAX_RATE`; otherwise an InputError naming ``field``
    and the range (NaN and infinity fail too).

    >>> check_rate("rate", 2.5)
    2.5
    >>> check_rate("rate", 1e-300)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    shardplan.errors.InputError: rate=1e-300 requests/s lies outside the range shardplan plans for; give a rate ...
    """
    if not MIN_RATE <= value <= MAX_RATE:
        raise InputError(f"{field}={value:g} requests/s lies outside the range shardplan plans for", field=field,
                         fix=f"give a rate {RATE_RANGE}")
    return value


def tool_call_seconds() -> float:
    """The time limit of one MCP tool call: $SHARDPLAN_TOOL_TIMEOUT, else :data:`TOOL_CALL_SECONDS`.

    Raises:
        InputError: the variable is not a positive number.
    """
    raw = os.environ.get("SHARDPLAN_TOOL_TIMEOUT")
    if raw is None:
        return TOOL_CALL_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InputError(f"SHARDPLAN_TOOL_TIMEOUT={raw!r} is not a positive number of seconds",
                         field="SHARDPLAN_TOOL_TIMEOUT", fix="unset it or give seconds, e.g. 60")
    return value


def _env_count(name: str, default: int) -> int:
    """The positive integer in ``$name``, else ``default``.

    Raises:
        InputError: the variable is set but not a positive whole number.
    """
    raw = os.environ.get(name)
    if raw is None:
        return default
    text = raw.strip()
    if not text.isdigit() or len(text) > MAX_INT_DIGITS or int(text) < 1:
        raise InputError(f"{name}={one_line(raw, 40)!r} is not a positive whole number", field=name,
                         fix=f"unset it or give a whole number, e.g. {default}")
    return int(text)


def dag_node_limit() -> int:
    """Nodes a DAG may hold: $SHARDPLAN_MAX_DAG_NODES, else :data:`MAX_DAG_NODES`."""
    return _env_count("SHARDPLAN_MAX_DAG_NODES", MAX_DAG_NODES)


def dag_edge_limit() -> int:
    """Edges a DAG may hold: $SHARDPLAN_MAX_DAG_EDGES, else :data:`MAX_DAG_EDGES`."""
    return _env_count("SHARDPLAN_MAX_DAG_EDGES", MAX_DAG_EDGES)


def check_dag_size(nodes: int, edges: int, *, what: str, field: str) -> None:
    """Refuse a DAG of more than :func:`dag_node_limit` nodes or :func:`dag_edge_limit` edges, before any check
    or schedule walks it; one rule for the command line, the API and the MCP server.

    Raises:
        InputError: naming ``what``, the count, the limit and the variable that raises it.
    """
    for count, limit, part, variable in ((nodes, dag_node_limit(), "nodes", "SHARDPLAN_MAX_DAG_NODES"),
                                         (edges, dag_edge_limit(), "edges", "SHARDPLAN_MAX_DAG_EDGES")):
        if count > limit:
            raise InputError(f"{what}: {count:,} {part} exceed the limit of {limit:,}", field=field,
                             fix=f"give a smaller DAG (fewer GPUs or microbatches), or raise ${variable}")


_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def worker_memory_bytes() -> int:
    """The address-space limit of one MCP worker: $SHARDPLAN_WORKER_MEMORY (bytes, or with K, M or G:
    ``6G``), else :data:`WORKER_MEMORY_BYTES`.

    Raises:
        InputError: the variable is not a positive size.
    """
    raw = os.environ.get("SHARDPLAN_WORKER_MEMORY")
    if raw is None:
        return WORKER_MEMORY_BYTES
    text = raw.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in _UNITS else ""
    digits = text[: len(text) - len(unit)].strip()
    if not digits.isdigit() or len(digits) > MAX_INT_DIGITS or int(digits) < 1:
        raise InputError(f"SHARDPLAN_WORKER_MEMORY={one_line(raw, 40)!r} is not a memory size",
                         field="SHARDPLAN_WORKER_MEMORY", fix="unset it or give a size such as 4G or 6144M")
    return int(digits) * _UNITS[unit]
