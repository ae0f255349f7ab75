"""How well plain-language requests are read: the request set scored field by field.

Run ``.venv/bin/python benchmarks/score_requests.py [FILE ...]`` (default ``tests/data/requests.yaml``); it prints
the figures of each set, one row each, and every case not read fully correctly.
"""

from __future__ import annotations

import sys
from pathlib import Path

from shardplan.evals.readings import load_cases, score_cases


def main() -> None:
    paths = [Path(arg) for arg in sys.argv[1:]] or [Path(__file__).parents[1] / "tests" / "data" / "requests.yaml"]
    print("| set | requests | fully correct | fields right | wrong readings not stated |")
    print("|---|---|---|---|---|")
    failures = []
    for path in paths:
        cases = load_cases(path)
        score = score_cases(cases)
        follow_ups = sum(1 for c in cases if c.previous)
        print(f"| {path.name} | {score.cases} ({follow_ups} follow-ups) | {score.fully_correct} "
              f"({score.fully_correct_share:.1%}) | {score.fields_right} of {score.fields} | {score.wrong_unstated} |")
        failures += [(path.name, failure) for failure in score.failures]
    for name, failure in failures:
        print(f"- {name}: {failure.text}: {failure.wrong}" + (" (silent)" if failure.unstated else ""))


if __name__ == "__main__":
    main()
