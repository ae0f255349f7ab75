"""What a reading says back: every field the message set with the words it came from, what the thread kept, and
what was assumed, so that nothing is read wrong silently.

>>> from shardplan.agent.parse.request import parse_request
>>> lines = reading_lines(parse_request("Llama 70B on 8 H100, prompts are ~16k tokens"))
>>> lines[0]
"Read: model meta-llama/Llama-3.1-70B from 'llama 70b'; GPU H100 from 'h100'; GPUs 8 from '8 h100'; prompt length \
16384 tokens from 'prompts are ~16k tokens'."
>>> lines[-1]
'Assumed: output length 256 tokens (not said); concurrency chosen by the search; objective latency (no targets).'
"""

from __future__ import annotations

from typing import Any

from shardplan.agent.parse.request import DEFAULT_ISL, DEFAULT_OSL, ParsedRequest, default_length_note
from shardplan.text import counted

__all__ = ["reading_lines", "noted_lines"]

_LABELS = {
    "model": ("model", ""), "gpu": ("GPU", ""), "gpus": ("GPUs", ""), "nodes": ("nodes", ""),
    "gpus_per_node": ("GPUs per node", ""), "isl": ("prompt length", " tokens"), "osl": ("output length", " tokens"),
    "isl_dist": ("prompt lengths", ""), "osl_dist": ("output lengths", ""),
    "batch": ("concurrency", ""), "arrival": ("arrivals", ""), "rate": ("rate", " requests/s"),
    "trace": ("trace", ""),
    "ttft_ms": ("TTFT target", " ms"), "tpot_ms": ("TPOT target", " ms"), "slo_percentile": ("targets at", ""),
    "objective": ("objective", ""), "weight_dtype": ("weights", ""), "kv_dtype": ("KV cache", ""),
    "disaggregated": ("disaggregated", ""), "gpu_price": ("price", " $/GPU-hour"),
    "spec_method": ("drafter", ""), "spec_tokens": ("draft tokens", ""), "spec_accept": ("accepted drafts", ""),
    "prefix_hit": ("prefix hit rate", ""), "prefix_tokens": ("shared prefix", " tokens"),
}


def _value(value: Any, unit: str) -> str:
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def reading_lines(parsed: ParsedRequest) -> list[str]:
    """Up to three lines: ``Read:`` each field this message set and its words; ``Kept from the thread:`` the fields
    an earlier message set; ``Assumed:`` the defaults that fill what no message said."""
    read, kept = [], []
    for name, (label, unit) in _LABELS.items():
        value = getattr(parsed, name)
        if value is None:
            continue
        if name in parsed.said:
            read.append(f"{label} {_value(value, unit)} from '{parsed.said[name]}'")
        else:
            kept.append(f"{label} {_value(value, unit)}")
    for text in parsed.constraints:
        words = parsed.said.get(f"constraint {text}")
        (read if words else kept).append(f"constraint {text}" + (f" from '{words}'" if words else ""))
    assumed = []
    if parsed.intent == "plan":
        for name, default in (("isl", DEFAULT_ISL), ("osl", DEFAULT_OSL)):
            if getattr(parsed, name) is None:
                assumed.append(f"{_LABELS[name][0]} {counted(default, 'token')} (not said)")
        if parsed.batch is None:
            assumed.append("concurrency chosen by the search")
        if parsed.objective is None:
            targets = parsed.ttft_ms or parsed.tpot_ms
            assumed.append("objective throughput (under the targets)" if targets else "objective latency (no targets)")
    lines = [f"Read: {'; '.join(read)}." if read else "Read: nothing I could use."]
    lines += [f"Kept from the thread: {'; '.join(kept)}."] if kept else []
    lines += [f"Assumed: {'; '.join(assumed)}."] if assumed else []
    return lines


def noted_lines(parsed: ParsedRequest) -> list[str]:
    """The reader's notes, a ``Noted:`` line each, for an answer that asks back instead of planning (a plan states
    them among its assumptions): why a model or a GPU named was not taken, what was left unread. The default
    lengths are left to the ``Assumed:`` line of :func:`reading_lines`.

    >>> from shardplan.agent.parse.request import parse_request
    >>> noted_lines(parse_request("Llama 70B on 8 V100s"))[0][:61]
    "Noted: '8 v100s': the V100 is not in shardplan's GPU catalog "
    """
    defaults = {default_length_note("prompt"), default_length_note("output")}
    return [f"Noted: {note}" for note in parsed.notes if note not in defaults]
