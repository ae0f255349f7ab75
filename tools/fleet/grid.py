"""A sweep's grid: models x GPU types x engines x traffic (lengths or workloads, rates, targets), one plan a cell.

The grid is a YAML file (``shardplan sweep GRID.yaml``); each cell is the request ``shardplan plan`` would get
for one combination, planned by the deterministic builtin planner. A grid is checked whole before any cell
runs: an unknown model or GPU, or a malformed list, ends the sweep at once with the field named.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from shardplan.contracts.common import Contract, Objective, ServingEngine
from shardplan.contracts.economics import GpuPrice
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.workload import default_objective
from shardplan.errors import InputError
from shardplan.limits import MAX_RATE, MIN_RATE, RATE_RANGE
from shardplan.reading import parse_yaml_text, read_text
from shardplan.text import counted, one_line
from shardplan.tools.api.request_args import RequestArgs
from shardplan.tools.catalogs.gpus import get_gpu
from shardplan.tools.planning.engine_choice import parse_engines

__all__ = ["Lengths", "TargetSet", "SweepGrid", "Cell", "load_grid", "parse_grid", "grid_cells", "bundled_grid",
           "MAX_CELLS"]

MAX_CELLS = 10_000
"""Cells one grid may hold: a typo in a list (rates: [1..1000]) should not queue days of planning."""


class Lengths(Contract):
    """Prompt and output lengths of a cell's requests."""

    isl: int = Field(ge=1, description="Input (prompt) tokens.")
    osl: int = Field(ge=1, description="Output tokens.")


class TargetSet(Contract):
    """The latency targets of a cell; none given: no target."""

    ttft_ms: float | None = Field(default=None, gt=0, description="Target time to first token, ms.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Target time per output token, ms.")


def _as_lengths(item: Any) -> Any:
    """``{isl, osl}`` from a pair ``[isl, osl]`` or a string ``"isl/osl"``; anything else as it is, for the contract's
    own error.

    >>> _as_lengths([1024, 256]), _as_lengths("2048/128"), _as_lengths({"isl": 1})
    ({'isl': 1024, 'osl': 256}, {'isl': '2048', 'osl': '128'}, {'isl': 1})
    """
    if isinstance(item, list | tuple) and len(item) == 2:
        return {"isl": item[0], "osl": item[1]}
    if isinstance(item, str) and item.count("/") == 1:
        isl, osl = (part.strip() for part in item.split("/"))
        return {"isl": isl, "osl": osl}
    return item


class SweepGrid(Contract):
    """The axes of a sweep; every combination is a cell."""

    name: str = Field(default="sweep", min_length=1, max_length=100, description="A label for the outputs.")
    models: list[str] = Field(min_length=1, description="Bundled model names or config.json paths.")
    gpus: list[str] = Field(min_length=1, description="GPU catalog names, one GPU type a cell.")
    gpu_count: int = Field(default=8, ge=1, description="GPUs each cell may use (the plan's --gpus).")
    engines: list[ServingEngine] = Field(default_factory=lambda: ["vllm"], min_length=1,  # type: ignore[arg-type]
                                         description="Serving engines priced, one a cell: a list, or 'auto' (every "
                                         "engine) or a comma list, as shardplan plan --engine takes them.")
    lengths: list[Lengths] = Field(default_factory=lambda: [Lengths(isl=2048, osl=256)],
                                   description="Prompt and output lengths ({isl: 2048, osl: 256}, [2048, 256] or "
                                   "'2048/256'); replaced by workloads when given.")
    workloads: list[str] = Field(default_factory=list, description="Bundled traces (azure-code, azure-conv) or "
                                 "trace files whose lengths the cells take instead of lengths.")
    rates: list[float] = Field(default_factory=list, description="Requests per second; empty: no rate (the "
                               "planner's objective alone).")
    targets: list[TargetSet] = Field(default_factory=lambda: [TargetSet()], min_length=1,
                                     description="Latency targets, one set a cell.")
    objective: Objective | None = Field(default=None, description="None: throughput with a rate or targets, "
                                        "latency otherwise (as shardplan plan).")
    prices: dict[str, float] = Field(default_factory=dict, description="Dollars per GPU-hour overriding the "
                                     "bundled list prices, by GPU name.")

    @field_validator("lengths", mode="before")
    @classmethod
    def _length_pairs(cls, value: Any) -> Any:
        # As people write lengths: [1024, 256] or "1024/256" beside {isl: 1024, osl: 256}.
        if not isinstance(value, list):
            return value
        return [_as_lengths(item) for item in value]

    @field_validator("engines", mode="before")
    @classmethod
    def _engine_text(cls, value: Any) -> Any:
        # The words of plan --engine: 'auto' is every engine, 'vllm,sglang' a list; the best per question is then
        # the engine choice of plan (the same order, cost_rank).
        return parse_engines(value, field="engines") if isinstance(value, str) else value

    @model_validator(mode="after")
    def _positive_rates(self) -> SweepGrid:
        bad = [r for r in self.rates if not MIN_RATE <= r <= MAX_RATE]  # NaN fails too (limits.check_rate's range)
        if bad:
            raise ValueError(f"rates must lie {RATE_RANGE}, got {bad}")
        return self

    @property
    def cell_count(self) -> int:
        traffic = len(self.workloads) or len(self.lengths)
        return (len(self.models) * len(self.gpus) * len(self.engines) * traffic * max(len(self.rates), 1)
                * len(self.targets))


class Cell(Contract):
    """One combination of the grid: its coordinates and the request that plans it."""

    model: str
    gpu: str
    engine: ServingEngine
    isl: int
    osl: int
    workload: str | None
    rate: float | None
    ttft_target_ms: float | None
    tpot_target_ms: float | None
    request: PlanRequest


def _arguments(grid: SweepGrid, model: str, gpu: str, engine: str, traffic: Lengths | str, rate: float | None,
               targets: TargetSet) -> RequestArgs:
    values: dict[str, Any] = {"model": model, "gpu": gpu, "gpus": grid.gpu_count, "engine": engine, "rate": rate,
                              "ttft_ms": targets.ttft_ms, "tpot_ms": targets.tpot_ms}
    if isinstance(traffic, str):
        values["workload"] = traffic
    else:
        values.update(isl=traffic.isl, osl=traffic.osl)
    values["objective"] = grid.objective or default_objective(targets.ttft_ms, targets.tpot_ms, rate)
    return RequestArgs(**{k: v for k, v in values.items() if v is not None})


def grid_cells(grid: SweepGrid) -> list[Cell]:
    """Every cell of ``grid`` in a fixed order (models, then GPUs, engines, traffic, rates, targets).

    Raises:
        InputError: more than MAX_CELLS cells, an unknown model, GPU or trace, a price for an unknown GPU.
    """
    if grid.cell_count > MAX_CELLS:
        raise InputError(f"the grid has {counted(grid.cell_count, 'cell', spec=',')}, more than {MAX_CELLS:,}",
                         field="grid", fix="split it into smaller grids")
    for name in grid.gpus:  # every GPU named, before any cell: a request alone resolves its GPU only when planned
        get_gpu(name)
    prices = {get_gpu(name).name: GpuPrice(gpu=get_gpu(name).name, usd_per_gpu_hour=dollars,
                                           source="the grid's prices")
              for name, dollars in grid.prices.items()}
    traffic: list[Lengths | str] = list(grid.workloads) or list(grid.lengths)
    cells = []
    rates: list[float | None] = list(grid.rates) or [None]
    for model, gpu, engine, load, rate, targets in itertools.product(
            grid.models, grid.gpus, grid.engines, traffic, rates, grid.targets):
        try:
            request = _arguments(grid, model, gpu, engine, load, rate, targets).to_request()
        except ValidationError as exc:
            raise InputError(f"cell {model} on {gpu}: {exc.errors()[0]['msg']}", field="grid",
                             fix="correct the grid's values") from None
        price = prices.get(request.gpu)
        if price is not None:
            request = request.model_copy(update={"price": price})
        w = request.workload
        cells.append(Cell(model=model, gpu=request.gpu, engine=engine, isl=w.isl, osl=w.osl,
                          workload=load if isinstance(load, str) else None, rate=rate,
                          ttft_target_ms=targets.ttft_ms, tpot_target_ms=targets.tpot_ms, request=request))
    return cells


def load_grid(path: str | Path) -> SweepGrid:
    """The grid in a YAML file.

    Raises:
        InputError: an unreadable file or a wrong field (named in the message).
    """
    file = Path(path)
    what = f"grid file {one_line(str(path), 200)}"
    fix = "give a YAML file with models, gpus and (optionally) engines, lengths, workloads, rates, targets"
    raw = parse_yaml_text(read_text(file, what=what, field="grid", fix=fix), what=what, field="grid", fix=fix)
    return parse_grid(raw, what, fix)


def parse_grid(raw: Any, what: str, fix: str) -> SweepGrid:
    """The grid a mapping describes (a YAML file's, or a tool's inline argument), called ``what`` in errors.

    Raises:
        InputError: not a mapping, or a wrong field: one line naming ``what`` and the field, with ``fix``.
    """
    if not isinstance(raw, dict):
        raise InputError(f"{what} is not a mapping", field="grid", fix=fix)
    try:
        return SweepGrid.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "grid"
        message = one_line(str(first["msg"]).removeprefix("Value error, "), 300)
        raise InputError(f"{what}: {where}: {message}", field=f"grid.{where}", fix=fix) from None


@lru_cache(maxsize=1)
def bundled_grid() -> Path:
    """The path of the bundled example grid (3 models x 3 GPU types x 3 rates)."""
    return Path(str(resources.files("shardplan.tools") / "data" / "grids" / "fleet-example.yaml"))
