"""Settings written as settings: ``key=value`` pairs, JSON or YAML fields an agent sends, and the flags of a pasted
launch or benchmark command (``--tensor-parallel-size 4``, ``--random-input-len 2048``, ``--max-concurrency 64``).

Each known key sets its field and is taken out of the text, so the sentence readers after it never pair a figure
with the next key's name ("gpus=8 isl=8k" is 8 GPUs and 8k-token prompts, not an 8-token prompt). An engine's own
limits (``--max-num-seqs``, ``--max-model-len``, ``--num-prompts`` ...) are no workload figure: they are taken out with
a note, never read as a batch or a length. Unknown keys are left to the other readers, and their values read again
(a quoted JSON value, ``--data "prompt_tokens=512,output_tokens=128"``, holds settings of its own).

Keys read together: a benchmark's ``--max-concurrency`` is a closed loop of that many clients unless a request rate
is given (then it only caps them: Poisson arrivals at the rate); guidellm's ``--rate`` counts clients under
``--rate-type concurrent``; vLLM's ``--random-prefix-len`` is part of each prompt; genai-perf's token means with a
spread are length distributions.

>>> from shardplan.agent.parse.text import Findings, Scan
>>> found = Findings()
>>> read_settings(Scan("model=llama-3.1-8b gpus=2 isl=8k osl=1k p99_ttft=1s"), found)
>>> found.values
{'ttft_ms': [1000.0], 'slo_percentile': ['p99'], 'isl': [8192], 'osl': [1024], 'gpus': [2]}
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from shardplan.agent.parse.text import Findings, Scan, _tokens
from shardplan.errors import InputError
from shardplan.tools.catalogs.models import resolve_model_name

__all__ = ["read_settings"]

_PAIR = re.compile(
    r"(?<![\w#:-])(?:--?(?P<flag>[a-z][\w-]*)(?:\s*=\s*|\s+)|[\"']?(?P<key>[a-z_][\w-]*)[\"']?\s*[=:]\s*)"
    r"(?P<value>\"[^\"]*\"|'[^']*'|(?!-)[^\s,;{}\[\]\"'?!()]+)"
)
"""``--flag value``, ``--flag=value``, ``key=value``, ``"key": value`` and ``key: value``."""
_LENGTH = re.compile(r"^\d+(?:\.\d+)?[km]?$")
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")
_TARGET = re.compile(
    r"^(?:p(?P<p>50|90|95|99)_)?(?P<metric>ttft|tpot|itl)(?:_p(?P<p2>50|90|95|99))?(?:_(?P<unit>ms|s))?$"
)
_DURATION = re.compile(r"^(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>ms|s)?$")

_NAMES: dict[str, set[str]] = {
    "isl": {"isl", "input_len", "input_length", "input_tokens", "prompt_tokens", "prompt_len", "prompt_length", "in",
            "random_input_len", "random_input", "synthetic_input_tokens_mean"},
    "osl": {"osl", "output_len", "output_length", "output_tokens", "out", "random_output_len", "random_output",
            "output_tokens_mean", "max_output_tokens"},
    "isl_sd": {"synthetic_input_tokens_stddev"},
    "osl_sd": {"output_tokens_stddev"},
    "gpus": {"gpus", "n_gpu", "n_gpus", "num_gpus", "gpu_count", "ngpus"},
    "count": {"count"},
    "nodes": {"nodes", "num_nodes"},
    "gpus_per_node": {"gpus_per_node"},
    "rate": {"rate", "qps", "rps", "rate_rps", "request_rate", "requests_per_second"},
    "rate_type": {"rate_type"},
    "concurrency": {"max_concurrency", "concurrency"},
    "burstiness": {"burstiness"},
    "gpu_price": {"price_per_gpu_hr", "price_per_gpu_hour", "gpu_price", "usd_per_gpu_hour", "gpu_hourly_price"},
    "kv_dtype": {"kv_cache_dtype", "kv_dtype"},
    "weight_dtype": {"weights", "weight_dtype", "weights_dtype"},
    "disaggregated": {"disaggregated", "disagg"},
    "objective": {"objective"},
    "slo_percentile": {"slo_percentile", "percentile"},
    "spec_method": {"method", "speculative_algorithm", "spec_method"},
    "spec_tokens": {"num_speculative_tokens", "speculative_num_steps", "num_nextn_predict_layers", "spec_tokens"},
    "k": {"k"},
    "acceptance_length": {"acceptance_length", "accept_length"},
    "arrival": {"arrival", "arrival_type", "type"},
    "cv": {"cv"},
    "prefix_hit": {"prefix_cache_hit", "prefix_hit", "prefix_cache_hit_rate"},
    "prefix_tokens": {"shared_prefix", "random_prefix_len", "prefix_tokens", "prefix_len"},
    "range_ratio": {"random_range_ratio"},
}
"""Each setting and the keys that name it (dashes read as underscores)."""
_SETTING = {name: setting for setting, names in _NAMES.items() for name in names}
_PARALLEL = {"tp": "tp", "tensor_parallel_size": "tp", "tp_size": "tp", "pp": "pp", "pipeline_parallel_size": "pp",
             "pp_size": "pp", "ep": "ep", "ep_size": "ep", "expert_parallel_size": "ep", "dp": "dp", "dp_size": "dp",
             "data_parallel_size": "dp"}
_ENGINE_LIMITS = {"speculative_draft_model_path", "max_num_seqs", "max_model_len", "max_batch_size", "context_length",
                  "num_prompts",
                  "max_num_batched_tokens", "max_num_tokens", "chunked_prefill_size", "mem_fraction_static",
                  "gpu_memory_utilization", "max_requests", "max_seq_len", "speculative_num_draft_tokens",
                  "speculative_eagle_topk", "nnodes", "node_rank", "dist_init_addr", "disaggregation_ib_device"}
"""An engine's or a benchmark client's own limits, sampling knobs and paths (an EAGLE head's weights): no figure of
the workload."""
_SPEC_CONFIG_BEFORE = re.compile(r"--speculative[-_]config\s*=?\s*'?\s*$")
"""A JSON object that is vLLM's speculative config: read with its flag (its model is the draft model)."""
_EXPERT_PARALLEL = re.compile(r"(?<![\w#-])--enable[-_]expert[-_]parallel(?![\w-])")
"""vLLM's flag for experts spread over the tensor-parallel GPUs: EP as wide as TP."""
_SPEC_METHODS = {"eagle": "eagle", "eagle3": "eagle", "eagle-3": "eagle", "mtp": "mtp", "deepseek_mtp": "mtp",
                 "nextn": "mtp"}
_DTYPES = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16",
           "float16": "fp16", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4"}


@dataclass(frozen=True)
class _Said:
    """One known setting as written: its value and its words."""

    value: str
    words: str


def _number(value: str) -> float | None:
    return float(value) if _NUMBER.match(value) else None


def read_settings(scan: Scan, found: Findings, structured: bool = False) -> None:
    """Every known key with a value it can read, taken out of the text (see the module's docstring). A degree written
    ``tp=8`` in a sentence is the constraint reader's, which also reads where it sits ("tp=8 inside the node"); as a
    flag (``--tp 8``) or a JSON field (``structured``) it is read here."""
    said: dict[str, _Said] = {}
    _read_json(scan, found, said)
    position = 0
    while match := _PAIR.search(scan.text, position):
        key = (match.group("flag") or match.group("key")).replace("-", "_")
        value = match.group("value").strip("\"'").strip()
        words = match.group().strip()
        setting = _SETTING.get(key)
        target = _TARGET.match(key)
        if key in _ENGINE_LIMITS:
            found.notes.append(f"Read '{words}' as the engine's own setting, not a figure of the workload.")
        elif key in _PARALLEL and (match.group("flag") or structured) and value.isdigit() and int(value) >= 1:
            found.add("constraints", f"{_PARALLEL[key]}={int(value)}", words)
        elif target and _target(found, target, value, words):
            pass
        elif setting is not None and setting not in said and _readable(setting, value, match, scan.text, said):
            said[setting] = _Said(value, words)
        elif value.startswith("{") and _speculative_config(found, key, value, words):
            pass
        else:  # not a setting shardplan reads: its value may hold settings of its own
            position = match.start("value")
            continue
        scan.blank(match.start(), match.end())
        position = match.end()
    for match in scan.take(_EXPERT_PARALLEL):
        tp = next((c for c in found.values.get("constraints", []) if c.startswith("tp=")), None)
        if tp is not None:
            found.add("constraints", f"ep={tp[3:]}", match.group())
    _apply(said, found, scan.text)


def _readable(setting: str, value: str, match: re.Match[str], text: str, said: dict[str, _Said]) -> bool:
    """Whether ``value`` is one ``setting`` takes; ``count`` only right after a GPU, ``k`` only after a drafter, ``cv``
    only after a gamma process, ``type`` only as an arrival process."""
    if setting in ("isl", "osl", "prefix_tokens", "isl_sd", "osl_sd"):
        return bool(_LENGTH.match(value))
    if setting in ("gpus", "nodes", "gpus_per_node", "spec_tokens", "concurrency", "k", "count"):
        if setting == "count" and not re.search(r"gpu\w*[\"']?\s*[=:]\s*\S+\s*,?\s*$", text[: match.start()][-60:]):
            return False
        if setting == "k" and "spec_method" not in said:
            return False
        return value.isdigit() and int(value) >= 1
    if setting == "arrival":
        return value in ("poisson", "gamma", "bursty")
    if setting == "cv":
        return said.get("arrival", _Said("", "")).value in ("gamma", "bursty") and _number(value) is not None
    if setting == "kv_dtype":
        return value == "auto" or value in _DTYPES
    if setting == "weight_dtype":
        return value in _DTYPES
    if setting == "spec_method":
        return value in _SPEC_METHODS
    if setting == "disaggregated":
        return value in ("true", "false", "yes", "no")
    if setting == "objective":
        return value in ("latency", "throughput", "goodput")
    if setting == "slo_percentile":
        return value in ("p50", "p90", "p95", "p99", "mean")
    if setting == "rate_type":
        return True
    if setting == "gpu_price":
        return _number(value.lstrip("$")) is not None
    return value in ("inf", "infinity") if setting == "rate" and _number(value) is None else _number(value) is not None


def _target(found: Findings, name: re.Match[str], value: str, words: str) -> bool:
    duration = _DURATION.match(value)
    if duration is None:
        return False
    unit = duration.group("unit") or name.group("unit") or "ms"
    found.add("ttft_ms" if name.group("metric") == "ttft" else "tpot_ms",
              float(duration.group("n")) * (1000.0 if unit == "s" else 1.0), words)
    percentile = name.group("p") or name.group("p2")
    if percentile:
        found.add("slo_percentile", f"p{percentile}", words)
    return True


def _read_json(scan: Scan, found: Findings, said: dict[str, _Said]) -> None:
    """JSON objects in the text, decoded whole (``json``): nested settings are read where they sit, a length given
    as ``{"dist": "lognormal", "mean": M, "cv": C}`` or ``{"dist": "uniform", "min": A, "max": B}`` is a length
    distribution, and every other key is read as ``key=value`` would be."""
    decoder = json.JSONDecoder()
    position = scan.text.find("{")
    while position >= 0:
        try:
            document, end = decoder.raw_decode(scan.text, position)
        except (ValueError, RecursionError):  # not JSON here, or nested past what the decoder follows
            position = scan.text.find("{", position + 1)
            continue
        if isinstance(document, dict) and not _SPEC_CONFIG_BEFORE.search(scan.text[:position]):
            pairs, names = _pairs(document, found)
            # the names the object holds (a model, a GPU) stay for the readers of names, in the object's place
            scan.text = scan.text[:position] + " ".join(names)[: end - position].ljust(end - position) + scan.text[end:]
            read_settings(Scan(" ".join(pairs)), found, structured=True)
        position = scan.text.find("{", end)


def _pairs(document: dict[str, Any], found: Findings) -> tuple[list[str], list[str]]:
    """``key=value`` texts of a decoded JSON object's settings, nested objects flattened (a length distribution read
    into its field at once), and the text values of the other keys (names: a model, a GPU)."""
    pairs: list[str] = []
    names: list[str] = []
    for key, value in document.items():
        name = str(key).lower().replace("-", "_")
        if isinstance(value, dict):
            dist = _distribution(value)
            if dist is not None and _SETTING.get(name) in ("isl", "osl"):
                found.add(f"{_SETTING[name]}_dist", dist, f"{key}: {json.dumps(value)}")
                if "mean" in value:
                    found.add(_SETTING[name], round(float(value["mean"])), f"{key}: {json.dumps(value)}")
                continue
            inner_pairs, inner_names = _pairs(value, found)
            pairs, names = pairs + inner_pairs, names + inner_names
        elif isinstance(value, bool):
            pairs.append(f"{name}={str(value).lower()}")
        elif isinstance(value, int | float) or name in _SETTING or name in _PARALLEL or _TARGET.match(name):
            pairs.append(f"{name}={str(value).lower().replace(' ', '_')}")
        elif isinstance(value, str):
            names.append(value.lower())
    return pairs, names


def _distribution(value: dict[str, Any]) -> str | None:
    """A length distribution said as a JSON object, in ``--isl-dist`` form; None for anything else."""
    kind = str(value.get("dist") or value.get("type") or value.get("distribution") or "").lower()
    try:
        if kind == "lognormal":
            return f"lognormal:mean={round(float(value['mean']))},cv={float(value['cv']):g}"
        if kind == "uniform":
            low = value.get("min", value.get("low"))
            high = value.get("max", value.get("high"))
            if low is None or high is None:
                return None
            return f"uniform:{round(float(low))},{round(float(high))}"
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _speculative_config(found: Findings, key: str, value: str, words: str) -> bool:
    """vLLM's ``--speculative-config '{...}'``: its method, its draft model and its draft tokens."""
    if key != "speculative_config":
        return False
    try:
        config = json.loads(value)
    except ValueError:
        return False
    if not isinstance(config, dict):
        return False
    method = str(config.get("method", "")).lower()
    if method in _SPEC_METHODS:
        found.add("spec_method", _SPEC_METHODS[method], words)
    elif config.get("model"):
        try:
            found.add("spec_method", f"draft:{resolve_model_name(str(config['model']))}", words)
        except InputError:
            found.add("spec_method", f"draft:{config['model']}", words)
    tokens = config.get("num_speculative_tokens")
    if isinstance(tokens, int) and tokens >= 1:
        found.add("spec_tokens", tokens, words)
    return "spec_method" in found.values or "spec_tokens" in found.values


def _apply(said: dict[str, _Said], found: Findings, text: str) -> None:
    """The settings read, laid into their fields, with the rules that join several keys."""
    _lengths(said, found, text)
    _traffic(said, found)
    for setting in ("gpus", "nodes", "gpus_per_node", "spec_tokens"):
        if setting in said:
            found.add(setting, int(said[setting].value), said[setting].words)
    if "count" in said and "gpus" not in said:
        found.add("gpus", int(said["count"].value), said["count"].words)
    if "k" in said and "spec_tokens" not in said:
        found.add("spec_tokens", int(said["k"].value), said["k"].words)
    if "gpu_price" in said:
        found.add("gpu_price", float(said["gpu_price"].value.lstrip("$")), said["gpu_price"].words)
    if "kv_dtype" in said:
        kv = said["kv_dtype"]
        found.add("kv_dtype", "bf16" if kv.value == "auto" else _DTYPES[kv.value], kv.words)
        if kv.value == "auto":
            found.notes.append(f"Read '{kv.words}' as the model's own KV format, bf16.")
    if "weight_dtype" in said:
        found.add("weight_dtype", _DTYPES[said["weight_dtype"].value], said["weight_dtype"].words)
    if "disaggregated" in said:
        found.add("disaggregated", said["disaggregated"].value in ("true", "yes"), said["disaggregated"].words)
    for setting in ("objective", "slo_percentile"):
        if setting in said and said[setting].value != "mean":
            found.add(setting, said[setting].value, said[setting].words)
    if "spec_method" in said:
        found.add("spec_method", _SPEC_METHODS[said["spec_method"].value], said["spec_method"].words)
    if "acceptance_length" in said and float(said["acceptance_length"].value) >= 1:
        accepted = round(float(said["acceptance_length"].value) - 1, 6)
        found.add("spec_accept", accepted, said["acceptance_length"].words)
        found.notes.append(f"Read '{said['acceptance_length'].words}' as {accepted:g} accepted draft tokens per step: "
                           "an acceptance length counts the token the verify step adds itself.")
    if "prefix_hit" in said:
        share = float(said["prefix_hit"].value)
        share = round(share / 100, 6) if share > 1 else share
        if 0 <= share < 1:
            found.add("prefix_hit", share, said["prefix_hit"].words)


def _lengths(said: dict[str, _Said], found: Findings, text: str) -> None:
    """Prompt and output lengths: a spread given beside a mean draws lengths (the lognormal of that mean and cv, as
    genai-perf's normal spread is drawn here), a benchmark's random range ratio draws them uniformly (vLLM's around the
    length, SGLang's up to it), and vLLM's random prefix is part of each prompt."""
    ratio = _number(said["range_ratio"].value) if "range_ratio" in said else None
    for length, spread in (("isl", "isl_sd"), ("osl", "osl_sd")):
        if length not in said:
            continue
        tokens, words = _tokens(said[length].value), said[length].words
        sd = _tokens(said[spread].value) if spread in said else 0
        if length == "isl" and "prefix_tokens" in said and "random" in words:
            tokens += _tokens(said["prefix_tokens"].value)
        if tokens < 1:
            continue
        found.add(length, tokens, words)
        if sd > 0:
            cv = round(sd / tokens, 3)
            found.add(f"{length}_dist", f"lognormal:mean={tokens},cv={cv:g}", words)
            found.notes.append(f"Read '{words}' with '{said[spread].words}' as lengths of mean {tokens} and cv {cv:g}, "
                               "drawn as a lognormal (the client draws a normal).")
        elif ratio is not None and 0 < ratio < 1 and "random" in words:
            sglang = "sglang" in text
            low, high = (round(tokens * ratio), tokens) if sglang else (round(tokens * (1 - ratio)),
                                                                        round(tokens * (1 + ratio)))
            if sglang:  # the flag's length is the range's top (SGLang), not its mean; vLLM's is its middle
                found.values[length].pop()
            found.add(f"{length}_dist", f"uniform:{low},{high}", words)
            found.notes.append(f"Read '{words}' at '{said['range_ratio'].words}' as lengths drawn uniformly from "
                               f"{low} to {high} ({'SGLang' if sglang else 'vLLM'}'s rule).")
    if "prefix_tokens" in said and _tokens(said["prefix_tokens"].value) >= 1:
        found.add("prefix_tokens", _tokens(said["prefix_tokens"].value), said["prefix_tokens"].words)


def _traffic(said: dict[str, _Said], found: Findings) -> None:
    """Rate, clients and arrival process: a concurrency with a finite rate only caps the clients (Poisson arrivals at
    the rate, or the gamma gaps vLLM's burstiness gives); without one it is a closed loop of that many clients."""
    rate = said.get("rate")
    clients_by_rate = rate is not None and said.get("rate_type", _Said("", "")).value == "concurrent"
    if clients_by_rate and rate is not None and rate.value.isdigit():
        _clients(found, int(rate.value), rate.words)
        return
    finite = rate is not None and _number(rate.value) is not None and float(rate.value) > 0
    if finite and rate is not None:
        found.add("rate", float(rate.value), rate.words)
    elif rate is not None:
        found.notes.append(f"Read '{rate.words}' as no arrival rate: each request is sent as soon as a client is "
                           "free.")
    if "concurrency" in said:
        concurrency = said["concurrency"]
        if finite:
            found.notes.append(f"Read '{concurrency.words}' as a cap on the clients; requests arrive at the rate.")
        else:
            _clients(found, int(concurrency.value), concurrency.words)
    if finite and "burstiness" in said and (burst := _number(said["burstiness"].value)):
        cv = round(1 / math.sqrt(burst), 3)  # vLLM's gamma gaps: shape = burstiness, so cv = 1 / sqrt(burstiness)
        found.add("arrival", "poisson" if math.isclose(cv, 1.0) else f"gamma:cv={cv:g}", said["burstiness"].words)
    elif finite and "concurrency" in said:
        found.add("arrival", "poisson", rate.words if rate else "")
    arrival = said.get("arrival")
    if arrival is not None:
        spread = said.get("cv")
        shape = ("poisson" if arrival.value == "poisson"
                 else f"gamma:cv={float(spread.value):g}" if spread else "gamma:cv=3")
        found.add("arrival", shape, arrival.words)


def _clients(found: Findings, clients: int, words: str) -> None:
    """A closed loop of ``clients``, each with one request in flight: as many sequences as clients."""
    found.add("clients", clients, words)
    found.add("batch", clients, words)
