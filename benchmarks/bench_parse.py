"""How the request parser's time grows with the message: seconds per size for ordinary and adversarial text.

Run ``.venv/bin/python benchmarks/bench_parse.py [--repeat 3]``; it prints a markdown table. Linear reading
shows as a growth factor near 4 from 4,000 to 16,000 characters (a quadratic parser shows 16); runs of
digits and dashes once took 17 s at 16,000 characters.
"""

from __future__ import annotations

import argparse
import time

from shardplan.agent.parse.request import parse_request

TEXTS = {
    "a request, repeated": "Llama 3.1 70B on 8 H100s, 4k prompts, TTFT under 500 ms, no PP, TP inside a node. ",
    "digits": "1",
    "dashes": "-",
    "letters, digits, dashes": "a1-",
    "model names": "llama ",
    "durations": "ttft 1 ",
}
SIZES = (1_000, 4_000, 16_000)


def seconds(text: str, repeat: int) -> float:
    """The best wall time of ``repeat`` parses of ``text``."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        parse_request(text)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| text | " + " | ".join(f"{n:,} chars s" for n in SIZES) + " | growth 4k to 16k |")
    print("|---|" + "---|" * (len(SIZES) + 1))
    for name, unit in TEXTS.items():
        times = [seconds((unit * n)[:n], args.repeat) for n in SIZES]
        growth = times[-1] / max(times[-2], 1e-9)
        print(f"| {name} | " + " | ".join(f"{t:.3f}" for t in times) + f" | x{growth:.1f} |")


if __name__ == "__main__":
    main()
