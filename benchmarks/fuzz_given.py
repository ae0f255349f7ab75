"""The CLI fuzzer's given-strategy kind: layouts a user might give to ``plan -s``, at batches that may not fill them.

Each layout parses (random degrees; attention DP and experts on the MoE model; sometimes split pools), so what is
tried is the planner and its printers, not the strategy reader: the plan is priced or infeasible with its reason,
in text, in JSON, and through ``report``, and none may crash. ``case`` builds the fuzzer's ``Case`` (kind, argv,
output file), as ``fuzz_bounds`` takes it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["given_strategy_cases"]


def _given_layout(rng: random.Random, moe: bool) -> str:
    """A layout that parses: random degrees, attention DP and experts on the MoE model, sometimes split pools."""

    def phase() -> str:
        degrees = {"tp": rng.choice([1, 2, 4, 8]), "pp": rng.choice([1, 1, 2, 4]), "mb": rng.choice([1, 1, 2, 4]),
                   "dp": rng.choice([1, 1, 2])}
        if moe and rng.random() < 0.5:
            degrees |= {"adp": rng.choice([2, 4, 8]), "ep": rng.choice([2, 4, 8])}
        if rng.random() < 0.15:
            degrees["sp"] = 2
        return ",".join(f"{key}={value}" for key, value in degrees.items() if value > 1) or "tp=1"

    if rng.random() < 0.2:
        return f"prefill:{phase()};decode:{phase()};disagg"
    return phase()


def given_strategy_cases(case: Callable[..., Any], tiny: Path, tiny_moe: Path, folder: Path, rng: random.Random,
                         count: int) -> Iterator[Any]:
    """Layouts a user might give (``plan -s``) at batches that may not fill them, in text, JSON and a report:
    none may crash, whether the plan is priced or infeasible with its reason."""
    for i in range(count):
        moe = rng.random() < 0.5
        argv = ["plan", "-m", str(tiny_moe if moe else tiny), "--gpus", str(rng.choice([1, 2, 4, 8, 16])),
                "-s", _given_layout(rng, moe), "--batch", str(rng.choice([1, 2, 3, 4, 8, 16])),
                "--isl", str(rng.choice([64, 512])), "--osl", "8"]
        if rng.random() < 0.3:
            argv += ["--batching", "static"]
        pick = rng.random()
        if pick < 0.4:
            yield case("given strategy", argv)
        elif pick < 0.7:
            yield case("given strategy", [*argv, "--json"])
        else:
            plan_file = folder / f"given{i}.json"
            yield case("given strategy", [*argv, "-o", str(plan_file)], plan_file)
            yield case("given strategy", ["report", str(plan_file), "-o", str(folder / f"given{i}.html")])
