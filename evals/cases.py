"""Golden configurations: the case format and :func:`load_cases`.

A case is one YAML file under ``evals/cases/``: a request (structured, or a plain-language ``prompt``),
what must hold of the plan a policy returns (``expect``, a list of one-key checks, see
:mod:`shardplan.evals.checks`), and where known a reference strategy with its source. Tolerances live
in the checks that need one (``max_cost_gap: 0.15``, ``within_reference: 0.05``).

>>> case = Case.model_validate({"id": "tp-llama", "description": "TP inside a node",
...     "request": {"model": "llama-3.1-70b", "gpu": "H100", "gpus": 8, "isl": 2048, "osl": 256},
...     "reference": "tp=8", "expect": [{"valid": True}, {"reference_valid": True}]})
>>> [e.kind for e in case.expect]
['valid', 'reference_valid']
"""

from __future__ import annotations

import glob as globbing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from shardplan.contracts.common import DType, Objective
from shardplan.contracts.plan import PlanRequest, PlanStatus
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.targets import parse_slo_percentile
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.limits import MAX_YAML_BYTES
from shardplan.reading import parse_yaml_text, read_text
from shardplan.tools.traffic.sizing import parse_traffic, workload_fields

__all__ = ["CASES_DIR", "Case", "CaseRequest", "Expectation", "load_cases", "format_location"]

CASES_DIR = Path(__file__).resolve().parent / "cases"
"""Where the bundled golden configurations live."""

Dimension = Literal["dp", "pp", "adp", "sp", "tp", "ep", "mb", "disagg"]
"""A parallel dimension a plan can use (``disagg``: prefill and decode on separate pools)."""
Degree = Literal["dp", "pp", "adp", "sp", "tp", "ep", "mb", "etp"]
"""A degree of one phase (``etp``: expert tensor parallelism, derived)."""
PhaseName = Literal["prefill", "decode"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class CaseRequest(_Strict):
    """What the case asks: the fields of ``shardplan plan``, or a plain-language ``prompt``."""

    model: str | None = Field(default=None, description="Bundled model name or config.json path.")
    gpu: str | None = Field(default=None, description="GPU catalog name.")
    gpus: int | None = Field(default=None, ge=1, description="GPUs available.")
    gpus_per_node: int | None = Field(default=None, ge=1, description="GPUs per node; the GPU's default if omitted.")
    isl: int | None = Field(default=None, ge=1, description="Prompt tokens.")
    osl: int | None = Field(default=None, ge=1, description="Output tokens.")
    batch: int | None = Field(default=None, ge=1, description="Concurrent sequences; omitted: 1, or the search's "
                              "choice when a rate or an arrival process is given.")
    isl_dist: str | None = Field(default=None, min_length=1, description="Prompt lengths: "
                                 "'lognormal:mean=2048,cv=0.8', 'uniform:256,4096'; isl may then be left out "
                                 "(the mean).")
    osl_dist: str | None = Field(default=None, min_length=1, description="Output lengths, as isl_dist.")
    workload: str | None = Field(default=None, min_length=1, description="A request trace: a bundled one's name "
                                 "(azure-conv, azure-code) or a file; isl and osl may then be left out (its means).")
    arrival: str | None = Field(default=None, min_length=1, description="poisson, gamma:cv=3, closed:N or trace.")
    rate: float | None = Field(default=None, gt=0, description="Requests/s to serve.")
    ttft_ms: float | None = Field(default=None, gt=0, description="TTFT target, ms.")
    tpot_ms: float | None = Field(default=None, gt=0, description="TPOT target, ms.")
    slo_percentile: str | None = Field(default=None, min_length=1, description="What the targets bound: mean "
                                       "(default), 50, 90, 95 or 99 (judged on a simulation of the traffic).")
    objective: Objective = Field(default="latency", description="latency, throughput or goodput.")
    weight_dtype: DType | None = Field(default=None, description="Override of the weight format.")
    kv_dtype: DType | None = Field(default=None, description="Override of the KV-cache format.")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1,
                                          description="Share of each GPU's memory the engine may use.")
    prompt: str | None = Field(default=None, min_length=1,
                               description="A plain-language request; when given, the runner plans what it says.")

    @model_validator(mode="after")
    def _structured_fields_present(self) -> CaseRequest:
        if self.prompt is None:
            lengths_given = self.workload is not None
            missing = [name for name in ("model", "gpu", "gpus", "isl", "osl") if getattr(self, name) is None
                       and not (lengths_given or getattr(self, f"{name}_dist", None) is not None)]
            if missing:
                raise ValueError(f"a request without a prompt needs {', '.join(missing)}")
            # Read the traffic now, so a malformed distribution, arrival, trace or percentile fails the case file.
            parse_traffic(self.isl_dist, self.osl_dist, self.workload, self.arrival)
            if self.slo_percentile is not None:
                parse_slo_percentile(self.slo_percentile)
        return self

    @property
    def has_targets(self) -> bool:
        """Whether the structured request sets a TTFT or TPOT target."""
        return self.ttft_ms is not None or self.tpot_ms is not None

    def to_plan_request(self, policy: str = "builtin") -> PlanRequest:
        """The PlanRequest of the structured fields.

        Raises:
            InputError: the case is a plain-language one (read it with the parser instead).
        """
        if self.model is None or self.gpu is None or self.gpus is None or self.prompt is not None:
            raise InputError("this case is a plain-language request", field="request.prompt",
                             fix="read it with shardplan.agent.parse.request.parse_request")
        open_traffic = self.rate is not None or self.arrival is not None
        traffic = workload_fields(parse_traffic(self.isl_dist, self.osl_dist, self.workload, self.arrival),
                                  isl=self.isl, osl=self.osl, rate=self.rate,
                                  batch=self.batch if self.batch is not None or open_traffic else 1)
        workload = Workload(**traffic, ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms, objective=self.objective,
                            slo_percentile=parse_slo_percentile(self.slo_percentile) if self.slo_percentile else "mean",
                            gpu_memory_utilization=self.gpu_memory_utilization)
        return PlanRequest(model=self.model, gpu=self.gpu, gpus=self.gpus, gpus_per_node=self.gpus_per_node,
                           workload=workload, weight_dtype=self.weight_dtype, kv_dtype=self.kv_dtype, policy=policy)


class Expectation(_Strict):
    """One check, written as a one-key mapping (``- valid: true``); exactly one field is set."""

    valid: bool | None = Field(default=None)
    """The plan's DAG passes every mandatory rule."""
    fits: bool | None = Field(default=None)
    """The plan fits in GPU memory."""
    meets_targets: bool | None = Field(default=None)
    """The plan meets the TTFT/TPOT targets."""
    status: PlanStatus | None = Field(default=None)
    """The plan's status."""
    simulated: bool | None = Field(default=None)
    """The plan's figures come from simulating its deployment under the request's traffic."""
    min_goodput: float | None = Field(default=None, ge=0, le=1)
    """At least this share of the simulated requests meets both targets."""
    min_gpus_at_least: int | None = Field(default=None, ge=1)
    """An infeasible plan says at least this many GPUs are needed."""
    decode_sp: int | None = Field(default=None, ge=1)
    """The decode phase's sp degree."""
    no_sp_in_decode: bool | None = Field(default=None)
    """Decode never shards the sequence (sp == 1)."""
    tp_within_node: bool | None = Field(default=None)
    """Every phase's TP group fits inside one node."""
    pp_over_tp: bool | None = Field(default=None)
    """Decode pipelines (pp > 1) instead of tensor-splitting (tp == 1)."""
    strategy_uses: list[Dimension] | None = Field(default=None, min_length=1)
    """Dimensions the plan uses in some phase."""
    degrees: dict[PhaseName, dict[Degree, int]] | None = Field(default=None)
    """Exact degrees per phase."""
    disaggregated: bool | None = Field(default=None)
    """Prefill and decode on separate GPU pools."""
    max_cost_gap: float | None = Field(default=None, ge=0)
    """Relative gap to the exhaustive search's best, at most."""
    reference_valid: bool | None = Field(default=None)
    """The reference strategy builds, validates and fits."""
    within_reference: float | None = Field(default=None, ge=0)
    """The plan is no worse than the reference by more than this fraction."""
    contradiction_detected: bool | None = Field(default=None)
    """The prompt contradicts itself and the runner noticed."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Expectation:
        given = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("each expect item is one check, e.g. '- valid: true'; "
                             + (f"this one sets {', '.join(given)}" if given else "this one sets none"))
        return self

    @property
    def kind(self) -> str:
        """The check's name."""
        return next(name for name in type(self).model_fields if getattr(self, name) is not None)

    @property
    def value(self) -> Any:
        """What the check expects."""
        return getattr(self, self.kind)


_NEEDS_REFERENCE = {"reference_valid", "within_reference"}
_NEEDS_PROMPT = {"contradiction_detected"}


class Case(_Strict):
    """One golden configuration."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", description="Unique id (lowercase, digits, . _ -).")
    description: str = Field(min_length=1, description="What the case is about and why its expectations hold.")
    source: str | None = Field(default=None, description="URL or paper of a published deployment or of the rule.")
    tags: list[str] = Field(default_factory=list, description="Free labels: seed-combination, published, negative, ...")
    request: CaseRequest = Field(description="The request.")
    reference: str | None = Field(default=None, description="Reference strategy SPEC, where one is known.")
    expect: list[Expectation] = Field(min_length=1, description="Checks that must hold.")
    _path: Path | None = PrivateAttr(default=None)

    @field_validator("reference")
    @classmethod
    def _reference_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_strategy(value)  # raises InputError (a ValueError) naming the bad part
        return value

    @model_validator(mode="after")
    def _checks_have_what_they_need(self) -> Case:
        kinds = [e.kind for e in self.expect]
        if self.reference is None and _NEEDS_REFERENCE & set(kinds):
            raise ValueError(f"{', '.join(sorted(_NEEDS_REFERENCE & set(kinds)))} need a 'reference' strategy")
        if self.request.prompt is None and _NEEDS_PROMPT & set(kinds):
            raise ValueError("contradiction_detected needs a request.prompt")
        return self

    @property
    def path(self) -> Path | None:
        """The file the case was read from, when it was read from one."""
        return self._path

    @property
    def expects_plan(self) -> bool:
        """Whether a good policy returns a strategy for this case (not infeasible, not a contradiction)."""
        for e in self.expect:
            if (e.kind == "status" and e.value == "infeasible") or (e.kind == "contradiction_detected" and e.value):
                return False
        return True


def format_location(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a path: ``('expect', 2, 'degrees')`` -> ``expect[2].degrees``.

    >>> format_location(("expect", 2, "degrees", "decode"))
    'expect[2].degrees.decode'
    """
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(case)"


def _case_error(path: Path, exc: ValidationError) -> InputError:
    problems = []
    for error in exc.errors()[:4]:
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{format_location(tuple(error['loc']))}: {message}")
    more = f" (and {exc.error_count() - 4} more)" if exc.error_count() > 4 else ""
    first = format_location(tuple(exc.errors()[0]["loc"]))
    return InputError(f"{path}: " + "; ".join(problems) + more, field=first,
                      fix="see evals/cases.py for the case format")


def _paths(pattern: str | Path | None) -> list[Path]:
    if pattern is None:
        return sorted(CASES_DIR.glob("*.yaml"))
    text = str(pattern)
    if Path(text).is_dir():
        return sorted(Path(text).glob("*.yaml"))
    return sorted(Path(p) for p in globbing.glob(text, recursive=True) if Path(p).is_file())


def load_case(path: str | Path) -> Case:
    """Read one case file.

    Raises:
        InputError: unreadable file, not YAML, not a mapping, or a field that breaks the case format; the
            message names the file and the field (``expect[2].degrees.decode.tq: ...``).
    """
    path = Path(path)
    fix = "fix the YAML syntax"
    text = read_text(path, what=f"{path}", field="cases", fix="check the path", limit=MAX_YAML_BYTES)
    data = parse_yaml_text(text, what=str(path), field="cases", fix=fix)
    if not isinstance(data, dict):
        raise InputError(f"{path}: a case file holds one mapping (id, description, request, expect, ...)",
                         field="cases", fix="write the case as key: value pairs")
    try:
        case = Case.model_validate(data)
    except ValidationError as exc:
        raise _case_error(path, exc) from None
    case._path = path
    return case


def load_cases(pattern: str | Path | None = None) -> list[Case]:
    """Every case matching ``pattern`` (a glob, a folder, or one file), sorted by file name; the bundled
    golden configurations when ``pattern`` is None.

    Raises:
        InputError: no file matches, a file breaks the case format (named with its field), or two cases
            share an id.
    """
    paths = _paths(pattern)
    if not paths:
        raise InputError(f"no case files match {pattern}", field="cases",
                         fix="give a glob such as 'evals/cases/*.yaml' or a folder of case YAML files")
    cases = [load_case(path) for path in paths]
    seen: dict[str, Path | None] = {}
    for case in cases:
        if case.id in seen:
            raise InputError(f"{case.path}: id '{case.id}' is also the id of {seen[case.id]}", field="id",
                             fix="give every case its own id")
        seen[case.id] = case.path
    return cases
