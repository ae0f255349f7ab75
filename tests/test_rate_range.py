"""A request rate lies between MIN_RATE and MAX_RATE wherever it enters (the command line, the API and MCP
arguments, a sweep grid, simulate's --rate); outside it, one InputError naming the field and the range. Inside,
at both ends, every figure is finite."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from cli_helpers import run_here
from mcp import Client
from pydantic import ValidationError
from test_mcp import SMALL, error, talk

from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.limits import MAX_RATE, MIN_RATE, check_rate
from shardplan.tools.api.arguments import PlanArgs
from shardplan.tools.fleet.grid import SweepGrid
from shardplan.tools.surfaces.mcp_server import build_server

EXTREME = ["1e-300", "5e-324", "1e300", "1e-7", "2e8"]
"""Far past each end, a subnormal float, and just past each end."""


def _numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


@pytest.mark.parametrize("rate", EXTREME)
def test_check_rate_refuses_outside_the_range_and_names_it(rate: str) -> None:
    with pytest.raises(InputError, match="outside the range") as caught:
        check_rate("rate", float(rate))
    assert caught.value.field == "rate" and f"{MIN_RATE:g}" in caught.value.fix and f"{MAX_RATE:g}" in caught.value.fix
    assert check_rate("rate", MIN_RATE) == MIN_RATE and check_rate("rate", MAX_RATE) == MAX_RATE


@pytest.mark.parametrize("command", ["search", "plan"])
@pytest.mark.parametrize("rate", ["1e-300", "5e-324", "1e300"])
def test_commands_refuse_an_extreme_rate_in_one_line(command: str, rate: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = run_here(capsys, command, "-m", "llama-3.1-8b", "-n", "2", "--rate", rate, "--json")
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --rate="), run.stderr
    assert f"{MIN_RATE:g}" in lines[0] and f"{MAX_RATE:g}" in lines[0] and not run.stdout


@pytest.mark.parametrize("rate", [MIN_RATE, MAX_RATE])
def test_the_ends_of_the_range_give_finite_figures(rate: float, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_here(capsys, "search", "-m", "llama-3.1-8b", "-n", "2", "--isl", "512", "--osl", "64", "--rate",
                   repr(rate), "--top", "2", "--json")
    assert run.returncode == 0, run.stderr
    numbers = _numbers(json.loads(run.stdout))  # json.loads reads Infinity and NaN as floats
    assert numbers and all(math.isfinite(n) for n in numbers)


@pytest.mark.parametrize("rate", [1e-300, 5e-324, 1e300, math.inf, math.nan])
def test_contracts_and_tool_arguments_refuse_an_extreme_rate(rate: float) -> None:
    for build in (lambda: Workload(rate=rate), lambda: PlanArgs(**SMALL, rate=rate),
                  lambda: SweepGrid(models=["llama-3.1-8b"], gpus=["H100"], rates=[rate])):
        with pytest.raises(ValidationError, match="rate"):
            build()


def test_mcp_tools_answer_an_extreme_rate_with_an_error_naming_it() -> None:
    calls = [("plan", {**SMALL, "rate": 1e-300}), ("search_strategies", {**SMALL, "rate": 5e-324}),
             ("plan", {**SMALL, "rate": 1e300})]

    async def scenario(c: Client) -> list[dict[str, Any]]:
        return [error(await c.call_tool(name, args)) for name, args in calls]

    for err in talk(build_server(), scenario):
        assert err["error"] == "InputError" and err["field"] == "rate", err
