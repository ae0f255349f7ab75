"""Plan: the one JSON document a planning run produces; everything else is derived from it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from shardplan.contracts.choice import Choice
from shardplan.contracts.common import AttentionDType, Contract, DType
from shardplan.contracts.constraints import Constraints
from shardplan.contracts.dag import DAG
from shardplan.contracts.economics import Economics, GpuPrice
from shardplan.contracts.figures import Figures
from shardplan.contracts.model import WeightComponent
from shardplan.contracts.old_plans import read_old_plan
from shardplan.contracts.reports import CostReport, ValidationReport
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.strategy import Strategy
from shardplan.contracts.targets import Miss, Targets, misses
from shardplan.contracts.workload import Batching, Workload
from shardplan.text import counted

__all__ = [
    "dag_part",
    "PlanRequest",
    "PricedDeployment",
    "Alternative",
    "Plan",
    "PlanStatus",
    "Deployment",
    "WorkerPool",
    "FrontierPoint",
    "FitChange",
    "FitHint",
    "NearTie",
]

PlanStatus = Literal["ok", "targets_missed", "infeasible"]


def dag_part(document: Any) -> Any:
    """The DAG of a JSON document that is either a plan (its ``dag``, None when the plan has none) or a bare DAG
    (the document itself); anything else is returned as it is, for the schema check to name.

    >>> dag_part({"dag": {"nodes": []}}), dag_part({"nodes": []}), dag_part({"status": "infeasible", "dag": None})
    ({'nodes': []}, {'nodes': []}, None)
    """
    if isinstance(document, dict) and "dag" in document and "nodes" not in document:
        return document["dag"]
    return document


class PlanRequest(Contract):
    """What was asked: model, hardware and workload."""

    model: str = Field(description="Bundled model name or path to a config.json.")
    gpu: str = Field(description="GPU catalog name.")
    gpus: int = Field(ge=1, description="GPUs available.")
    gpus_per_node: int | None = Field(default=None, ge=1, description="GPUs per node; the GPU's default when None.")
    cluster: str | None = Field(default=None, description="Path of a cluster YAML, when one was given.")
    decode_gpu: str | None = Field(
        default=None,
        description="GPU catalog name of the decode pool when it differs from gpu (--decode-gpu, or a cluster "
        "file's decode_pool): only split deployments then run, prefill workers on gpu, decode workers on this; "
        "None: one GPU type.",
    )
    decode_gpus: int | None = Field(
        default=None,
        ge=1,
        description="Most GPUs of the gpus the decode pool may use (--decode-gpus); None: any share.",
    )
    workload: Workload = Field(description="Lengths, batch, targets and objective.")
    weight_dtype: DType | None = Field(default=None, description="Override of the model's weight format.")
    kv_dtype: DType | None = Field(default=None, description="Override of the KV-cache format.")
    attention_dtype: AttentionDType | None = Field(
        default=None,
        description="Format attention multiplies in (--attention-dtype): fp8 where the engine runs FP8 attention "
        "kernels over an FP8 KV cache (FlashMLA's FP8 decode kernel, TensorRT-LLM's FP8 context FMHA); None: bf16.",
    )
    weight_formats: dict[WeightComponent, DType] | None = Field(
        default=None,
        description="Formats of the parts whose weights the checkpoint stores apart from weight_dtype "
        "(--weight-dtype-for attention=bf16,mtp=bf16: NVIDIA's FP4 DeepSeek-R1; experts=fp4: routed experts "
        "only); None: every part in weight_dtype (or the model's own formats).",
    )
    policy: str = Field(default="builtin", description="Planner policy: builtin or openai:MODEL.")
    constraints: Constraints | None = Field(
        default=None, description="What the deployment must respect (degree bounds, placement, serving); None: nothing."
    )
    assumptions: list[str] = Field(
        default_factory=list,
        description="Values the request did not give and that were defaulted or guessed, one line each.",
    )
    price: GpuPrice | None = Field(
        default=None,
        description="The price of one GPU-hour the request gives (--gpu-price, a prices file); None: the bundled, "
        "dated list price of the GPU where there is one.",
    )
    decode_price: GpuPrice | None = Field(
        default=None,
        description="The price of one GPU-hour of decode_gpu the request gives; None: its bundled list price.",
    )

    @property
    def gpu_words(self) -> str:
        """The GPUs asked for, in words.

        >>> PlanRequest(model="m", gpu="H200", gpus=16, decode_gpu="H100", workload=Workload(isl=8, osl=8)).gpu_words
        '16 GPUs (prefill H200, decode H100)'
        """
        if self.decode_gpu is None:
            return f"{self.gpus} x {self.gpu}"
        share = f", up to {self.decode_gpus} for decode" if self.decode_gpus else ""
        return f"{counted(self.gpus, 'GPU')} (prefill {self.gpu}, decode {self.decode_gpu}{share})"


class PricedDeployment(Contract):
    """One way to serve the workload and what it delivers: replicas of a layout, or prefill and decode pools
    (``dp`` counts them), with the sequences in flight, its figures and the targets it misses."""

    strategy: Strategy = Field(description="Degrees per phase; dp counts replicas (or the workers of each pool).")
    concurrency: int = Field(ge=1, description="Sequences in flight across the deployment.")
    worker_concurrency: int = Field(
        ge=1, description="Sequences in flight on one replica (aggregated) or one decode worker (disaggregated)."
    )
    prefill_prompts: int = Field(default=0, ge=0, description="Prompts a prefill worker's step takes (split only).")
    kv_transfer_ms: float = Field(default=0.0, ge=0, description="KV-cache transfer per request between pools.")
    running_cap: int | None = Field(
        default=None,
        ge=1,
        description="Set when more sequences are in flight per worker than its KV cache (or step budget) holds: "
        "the engine runs this many and queues the rest, whose wait is in TTFT.",
    )
    figures: Figures = Field(
        description="What it delivers: the serving model's steady state (source steady_state), or a simulated run "
        "of the engine (source simulation, with percentiles) where the planner simulated it."
    )
    misses: list[Miss] = Field(default_factory=list, description="The targets it misses, with the gaps.")
    meets_targets: bool = Field(default=True, description="No target missed (derived from misses).")
    simulation: SimulationSummary | None = Field(
        default=None,
        description="The simulated run its figures come from (goodput, queueing, preemptions, the steady state it "
        "was compared with in analytic); None where the figures are the steady state's.",
    )

    @model_validator(mode="after")
    def _derive_meets(self) -> PricedDeployment:
        self.meets_targets = not self.misses
        return self

    @property
    def spec(self) -> str:
        """The strategy as SPEC text."""
        return self.strategy.to_spec()

    @property
    def steady_state(self) -> Figures:
        """The serving model's figures of the deployment: its own, or those its simulated run replaced."""
        return self.simulation.analytic if self.simulation and self.simulation.analytic else self.figures

    def judged(self, targets: Targets) -> PricedDeployment:
        """This deployment judged against ``targets`` (its figures unchanged)."""
        found = misses(self.figures, targets)
        return self.model_copy(update={"misses": found, "meets_targets": not found})

    @property
    def replicas(self) -> int:
        """Independent copies serving the traffic (for disaggregated deployments: decode workers)."""
        return self.strategy.decode.dp


class Alternative(Contract):
    """A deployment that was considered and not chosen."""

    strategy: str = Field(description="SPEC text (dp counts replicas or pool workers).")
    concurrency: int | None = Field(default=None, ge=1, description="Sequences in flight at its best concurrency.")
    figures: Figures = Field(description="What it delivers.")
    why_not: str = Field(
        description="Why it lost to the chosen one; in a review, what the reviewed strategy has against it."
    )


class NearTie(Contract):
    """The top of a ranking that the cost model cannot tell apart: the leading deployments whose ranked figure
    lies within the model's stated error of the best one's."""

    top: int = Field(ge=2, description="How many leading deployments lie within the model's error of the best.")
    figure: Literal["tokens/s", "request latency"] = Field(
        description="What the ranking compares: output tokens/s of the deployment (throughput, goodput), or "
        "TTFT + (osl - 1) x TPOT (latency, and a rate among deployments of the same GPU count)."
    )
    spread_pct: float = Field(ge=0, description="Largest gap among them to the best, in percent of the best.")
    model_error_pct: float = Field(
        gt=0,
        description="The model's stated median |error| on that figure for the backend that priced them "
        "(against public measurements held out from the fit, as every cost report states).",
    )
    backend: Literal["measured", "roofline"] = Field(description="The pricing backend whose error applies.")
    note: str = Field(description="The sentence shown under the ranking.")


FitChange = Literal["weight_dtype", "kv_dtype", "gpus", "context", "batch"]
"""What a fit hint changes: the weight or KV-cache format, the GPU count, the context (prompt plus output
tokens, at one sequence in flight), or the sequences in flight."""


class FitHint(Contract):
    """One change to an infeasible request that makes it fit in memory, checked with the search's memory test."""

    change: FitChange = Field(description="Which part of the request to change.")
    value: str | int = Field(
        description="The new setting: a dtype (fp8), a GPU count, the longest context in tokens (prompt plus "
        "output, one sequence in flight), or the most sequences in flight."
    )
    text: str = Field(description="The change with its figures, e.g. weights per GPU and sequences that fit.")


class WorkerPool(Contract):
    """One kind of worker of a deployment: its layout, how many, how loaded, and its memory per GPU."""

    role: Literal["replica", "prefill", "decode"] = Field(
        description="replica: prefill and decode share its GPUs; prefill or decode: one pool of a split deployment."
    )
    workers: int = Field(ge=1, description="Workers of this layout.")
    layout: str = Field(description="SPEC text of one worker.")
    gpus_per_worker: int = Field(ge=1, description="GPUs of one worker.")
    concurrency_per_worker: int = Field(
        ge=1, description="Sequences one worker holds (decode and replicas) or prompts one prefill step takes."
    )
    max_concurrency_per_worker: int = Field(
        ge=0, description="Most sequences one worker holds in memory at the request's lengths and headroom."
    )
    memory_per_gpu_gb: float = Field(ge=0, description="Worst GPU of a worker, at its concurrency.")
    weights_gb: float = Field(ge=0, description="Weight shard on that GPU.")
    kv_cache_gb: float = Field(ge=0, description="KV cache on that GPU at its concurrency.")
    capacity_gb: float = Field(gt=0, description="The GPU's memory.")
    gpu: str | None = Field(
        default=None,
        description="GPU catalog name of this pool's GPUs when the deployment's pools are two GPU types; None: the "
        "request's gpu.",
    )


class FrontierPoint(Contract):
    """A deployment on the Pareto frontier of tokens/s per GPU of the budget against tokens/s/user."""

    strategy: str = Field(description="SPEC text (dp counts replicas or pool workers).")
    concurrency: int = Field(ge=1, description="Sequences in flight across the deployment.")
    figures: Figures = Field(description="What it delivers.")
    meets_targets: bool = Field(description="TTFT, TPOT (and rate) targets met.")
    chosen: bool = Field(default=False, description="True for the plan's own deployment.")


class Deployment(Contract):
    """How the plan serves the traffic: replicas or pools, sequences in flight, GPUs used of the budget."""

    concurrency: int = Field(ge=1, description="Sequences in flight across the whole deployment.")
    replicas: int = Field(ge=1, description="Independent copies (aggregated) or decode workers (disaggregated).")
    gpus_used: int = Field(ge=1, description="GPUs the deployment uses.")
    idle_gpus: int = Field(ge=0, description="GPUs of the budget left unused.")
    batching: Batching = Field(description="continuous or static batching.")
    prefill_workers: int | None = Field(default=None, ge=1, description="Prefill workers (disaggregated only).")
    decode_workers: int | None = Field(default=None, ge=1, description="Decode workers (disaggregated only).")
    gpu_budget: int = Field(ge=1, description="GPUs the request made available.")
    idle_reason: str = Field(default="", description="Why GPUs stay idle, when some do.")
    kv_transfer_ms: float = Field(default=0.0, ge=0, description="KV-cache transfer per request between pools.")
    pools: list[WorkerPool] = Field(description="Each kind of worker with its layout and memory.")
    frontier: list[FrontierPoint] = Field(
        default_factory=list,
        description="Pareto frontier (tokens/s per GPU of the budget against tokens/s/user) of the searched "
        "deployments meeting the targets (all when none does), by tokens/s/user, the chosen one always included.",
    )


class Plan(Contract):
    """The answer: the deployment and its figures, the strategy per phase, its DAG with the validators' verdict
    and the cost model's report of one batch of it."""

    shardplan_version: str = Field(description="Version that wrote the plan.")
    request: PlanRequest = Field(description="The request.")
    status: PlanStatus = Field(description="ok; targets_missed (best effort shown); infeasible (nothing fits).")
    feasible: bool = Field(
        default=False,
        description="True only when status is ok: the plan fits and meets its targets (derived from status).",
    )
    deployment: Deployment | None = Field(
        default=None, description="Replicas or pools, concurrency and GPUs used; None when infeasible."
    )
    strategy: Strategy | None = Field(
        description="Chosen strategy (dp counts replicas, or each pool's workers); None when infeasible."
    )
    figures: Figures | None = Field(
        default=None,
        description="What the deployment delivers: its steady state (source steady_state, the serving model), or "
        "a simulated run of the engine (source simulation, with P50/P90/P95/P99) where the request has a "
        "percentile target or describes its traffic; None when infeasible.",
    )
    misses: list[Miss] = Field(default_factory=list, description="The targets the figures miss, with the gaps.")
    simulation: SimulationSummary | None = Field(
        default=None,
        description="The simulated run the figures come from: goodput, queueing, preemptions, KV-cache use, and "
        "the steady state beside it (analytic); None where the figures are the steady state's.",
    )
    dag: DAG | None = Field(default=None, description="The DAG of one replica (or one prefill and one decode worker).")
    validation: ValidationReport | None = Field(default=None, description="Validators' verdict on the DAG.")
    dag_cost: CostReport | None = Field(
        default=None,
        description="The cost model's report of one batch of the DAG (figures from source static_batch), with the "
        "per-phase schedule, memory per pool and how it was priced.",
    )
    alternatives: list[Alternative] = Field(
        default_factory=list,
        description="Runners-up, best first; in a review, the searched strategies that beat the reviewed one.",
    )
    near_tie: NearTie | None = Field(
        default=None,
        description="Set when the chosen deployment and its first alternatives are within the model's stated "
        "error of each other (the ranking among them is not meaningful); None otherwise.",
    )
    explanation: str = Field(default="", description="Why this strategy, in a few sentences, citing rule IDs.")
    economics: Economics | None = Field(
        default=None,
        description="Dollars per hour and per million tokens, power and joules per token of the deployment; None "
        "when infeasible.",
    )
    gpu_choice: Choice | None = Field(
        default=None,
        description="When several GPU types were asked for: each type's deployment and price, and why it lost; "
        "None for one type.",
    )
    engine_choice: Choice | None = Field(
        default=None,
        description="When several serving engines were asked for (auto or a list): each engine's deployment and "
        "price on this GPU type, whether measured tables or the roofline priced it, and why it lost; None for one.",
    )
    min_gpus: int | None = Field(
        default=None, description="When infeasible for memory: the fewest GPUs that would fit."
    )
    hints: list[FitHint] = Field(
        default_factory=list,
        description="When infeasible for memory: each single change that would make it fit, with its figures.",
    )
    messages: list[str] = Field(default_factory=list, description="What the planner noticed along the way.")
    assumptions: list[str] = Field(
        default_factory=list,
        description="Every value that was defaulted or guessed rather than given, one line each (the request's "
        "assumptions first).",
    )

    @model_validator(mode="before")
    @classmethod
    def _read_old_keys(cls, data: Any) -> Any:
        return read_old_plan(data)

    def priced(self) -> PricedDeployment | None:
        """The plan's own deployment as a priced deployment (None when infeasible), to set beside the searched ones."""
        if self.strategy is None or self.figures is None or self.deployment is None:
            return None
        d = self.deployment
        per_worker = next((p.concurrency_per_worker for p in d.pools if p.role != "prefill"), d.concurrency)
        prompts = next((p.concurrency_per_worker for p in d.pools if p.role == "prefill"), 0)
        return PricedDeployment(strategy=self.strategy, concurrency=d.concurrency, worker_concurrency=per_worker,
                                prefill_prompts=prompts, kv_transfer_ms=d.kv_transfer_ms, figures=self.figures,
                                misses=self.misses, simulation=self.simulation)

    @model_validator(mode="after")
    def _derive_feasible(self) -> Plan:
        # One source of truth: a plan is feasible exactly when its status is ok.
        self.feasible = self.status == "ok"
        # The request's assumptions always reach the answer, whoever built the plan.
        missing = [line for line in self.request.assumptions if line not in self.assumptions]
        self.assumptions = missing + self.assumptions
        return self
