"""How well plain-language requests are read: the request set scored field by field.

Run ``.venv/bin/python benchmarks/score_requests.py [FILE]`` (default ``tests/data/requests.yaml``); it prints
the figures and every case not read fully correctly.
"""

from __future__ import annotations

import sys
from pathlib import Path

from shardplan.evals.readings import load_cases, score_cases


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "tests" / "data" / "requests.yaml"
    cases = load_cases(path)
    score = score_cases(cases)
    print("| requests | fully correct | fields right | wrong readings not stated |")
    print("|---|---|---|---|")
    print(f"| {score.cases} ({sum(1 for c in cases if c.previous)} follow-ups) | {score.fully_correct} "
          f"({score.fully_correct_share:.1%}) | {score.fields_right} of {score.fields} | {score.wrong_unstated} |")
    for failure in score.failures:
        print(f"- {failure.text}: {failure.wrong}" + (" (silent)" if failure.unstated else ""))


if __name__ == "__main__":
    main()
