"""Sentences of the chat readers' own words, in any order and with any numbers, through the request reader: a
word-level fuzz (the character-level one is a hypothesis test in ``tests/test_parse.py``). Every sentence is read
as a first message and as a follow-up to a full request; where it reads as a complete request it is also turned
into the plan request, which may refuse it with an ``InputError`` (a clean error) but nothing else.

Prints, per kind: runs, readings turned into a plan request, clean refusals, exceptions (anything but
``InputError``; the reader itself must never raise), runs over 2 s, and the slowest run in ms.

Run: .venv/bin/python benchmarks/fuzz_chat.py [--sentences 50000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from collections import Counter

from fuzz_table import print_counts

from shardplan.agent.parse.plan_request import missing_fields, to_plan_request
from shardplan.agent.parse.request import ParsedRequest, parse_request
from shardplan.errors import InputError

_GRAMMAR_TEXT = (
    "llama 3.1 8b 70b deepseek-v3 qwen3-32b mixtral gpt-oss-120b on 1 2 8 16 h100 h200 b200 a100 mi300x x nodes of "
    "gpus , and with bursty bursts (cv 4) cv=0 cv 80 coefficient of variation gamma arrivals poisson closed loop "
    "users clients concurrent each sends a new request when the last one finishes 128 64 0 -3 0.0001 99999999999 "
    "1e9 lognormal mean are around 3k 1k 8k 200 tokens prompts outputs between to - % 30% 100% 150% prompt hit the "
    "prefix cache shared system half mtp eagle draft model acceptance rate length accepted 0.85 2.6 were instead "
    "p99 p90 median ttft tpot under over below ms s second 95% requests qps rps req/s per minute $3/h azure code "
    "conversation trace now try same what if tp=8 pp=2 ep=8 adp=8 batch fp8 fp4 kv disaggregated prefill decode "
    "actually sorry i meant oops make that lama promts ouput isl=3000 osl=300 qps=25 every 100 1k (~150) replay "
    "./t.jsonl any gpu is fine latency matters most no not + dp attention the other spec ~70% which firing previous "
    "reply"
)
GRAMMAR_WORDS = _GRAMMAR_TEXT.split(" ")
"""The readers' words: models, counts, hardware, traffic, targets, percentiles, features, follow-up and edit words."""

HEADLINE = "Llama 3.1 70B on 8 H100, 4k prompts, 512 outputs, TTFT under 1 s"
COLUMNS = ["runs", "planned", "refused", "exceptions", "over 2 s", "max ms"]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(GRAMMAR_WORDS) for _ in range(rng.randint(2, 25)))


def _run(text: str, previous: ParsedRequest | None, counts: Counter[str]) -> None:
    start = time.perf_counter()
    try:
        parsed = parse_request(text, previous)
        if parsed.model and parsed.gpus and not missing_fields(parsed) and not parsed.contradictions:
            try:
                to_plan_request(parsed)
                counts["planned"] += 1
            except InputError:
                counts["refused"] += 1
    except Exception:  # noqa: BLE001 - any exception here is what the fuzz counts
        counts["exceptions"] += 1
        print(f"exception on {text!r} (follow-up: {previous is not None}):", file=sys.stderr)
        traceback.print_exc(limit=4)
    elapsed_ms = (time.perf_counter() - start) * 1000
    counts["runs"] += 1
    counts["over 2 s"] += elapsed_ms > 2000
    counts["max ms"] = max(counts["max ms"], round(elapsed_ms))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=50_000, help="sentences per kind")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    headline = parse_request(HEADLINE)
    totals: dict[str, Counter[str]] = {"first message": Counter(), "follow-up": Counter()}
    for _ in range(args.sentences):
        text = _sentence(rng)
        _run(text, None, totals["first message"])
        _run(text, headline, totals["follow-up"])
    print_counts(totals, COLUMNS)
    return 1 if any(counts["exceptions"] for counts in totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
