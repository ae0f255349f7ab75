"""Workload: what the deployment must serve and how well."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from shardplan.contracts.common import Contract, Objective, ServingEngine
from shardplan.contracts.speculation import Speculation
from shardplan.contracts.targets import SloPercentile, Targets
from shardplan.contracts.traffic import Traffic
from shardplan.limits import MAX_RATE, MIN_RATE, RATE_RANGE

__all__ = ["Workload", "Batching", "default_objective"]

Batching = Literal["continuous", "static"]
"""How an engine batches requests: continuous (in-flight, chunked prefill mixed into decode steps) or
static (one batch prefilled together, then decoded together)."""


def default_objective(ttft_ms: float | None, tpot_ms: float | None, rate: float | None) -> Objective:
    """The objective of a request that names none: ``throughput`` when it gives a target or a rate (it asks what
    serves them best), else ``latency``. Every surface (CLI, API and MCP, chat, sweeps) defaults through here, so
    one request written on any of them is planned alike.

    >>> default_objective(None, 30.0, None), default_objective(None, None, 2.0), default_objective(None, None, None)
    ('throughput', 'throughput', 'latency')
    """
    return "throughput" if ttft_ms or tpot_ms or rate else "latency"


class Workload(Contract):
    """Sequence lengths, concurrency, traffic and service-level targets."""

    isl: int = Field(ge=1, description="Input (prompt) length in tokens.")
    osl: int = Field(ge=1, description="Output length in tokens.")
    batch: int | None = Field(
        default=None,
        ge=1,
        description="Sequences in flight across the whole deployment (all replicas together); None lets the "
        "deployment search choose the concurrency.",
    )
    prefill_batch: int | None = Field(
        default=None,
        ge=1,
        description="Static batching only: prompts prefilled together. None: the whole batch at once.",
    )
    ttft_ms: float | None = Field(default=None, gt=0, description="Target time to first token, ms; None for no target.")
    tpot_ms: float | None = Field(
        default=None, gt=0, description="Target time per output token, ms; None for no target."
    )
    slo_percentile: SloPercentile = Field(
        default="mean",
        description="Which statistic of TTFT and TPOT the targets bound: mean (the steady state's figure), or "
        "p50/p90/p95/p99 over requests, which the planner judges by simulating its best candidates.",
    )
    objective: Objective = Field(
        default="latency", description="latency, throughput, or goodput (throughput under the targets)."
    )
    batching: Batching = Field(
        default="continuous",
        description="continuous: steps carry one token per running sequence plus a chunk of new prompts; "
        "static: the whole batch is prefilled, then decoded.",
    )
    rate: float | None = Field(
        default=None,
        ge=MIN_RATE,
        le=MAX_RATE,
        description="Requests per second to serve; the search then looks for the fewest GPUs that serve it "
        f"under the targets ({RATE_RANGE}). None: no traffic figure.",
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Share of each GPU's memory the engine may use (vLLM's gpu_memory_utilization); the rest "
        "is headroom.",
    )
    max_batched_tokens: int = Field(
        default=8192,
        ge=1,
        description="Tokens one continuous-batching step may carry, decode tokens and prefill chunk together "
        "(vLLM's max_num_batched_tokens).",
    )
    traffic: Traffic | None = Field(
        default=None,
        description="How requests are drawn and arrive (length distributions or a trace, the arrival process); "
        "None: every request isl and osl tokens long, Poisson arrivals. isl and osl are the means either way.",
    )
    engine: ServingEngine = Field(
        default="vllm",
        description="Serving engine that runs the deployment: it selects the measured kernel tables and the "
        "collective implementation the cost model prices (vllm, sglang, trtllm).",
    )
    speculation: Speculation | None = Field(
        default=None,
        description="Speculative decoding (MTP layers, an EAGLE-3 head or a draft model, with the draft tokens per "
        "step and the measured mean accepted); None: one token per sequence per decode step.",
    )
    prefix_hit: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Share of each prompt's tokens found in the engine's prefix cache (a shared system prompt or "
        "document): prefill computes only the rest, and the shared blocks are held once per replica. 0: no reuse. "
        "A trace's prefix groups give the simulator its own hits.",
    )

    @field_validator("prefill_batch")
    @classmethod
    def _prefill_within_batch(cls, value: int | None, info: ValidationInfo) -> int | None:
        batch = info.data.get("batch")
        if value is not None and batch is not None and value > batch:
            raise ValueError(f"prefill_batch={value} exceeds batch={batch}")
        return value

    @property
    def targets(self) -> Targets:
        """The bounds the deployment must meet: TTFT and TPOT (at the percentile asked), and the request rate."""
        return Targets(ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms, rate=self.rate, percentile=self.slo_percentile)

    @property
    def open_arrivals(self) -> bool:
        """Whether requests arrive at a rate without waiting for one another (Poisson, bursts, a trace's times),
        not from a closed loop of clients: the number in flight is then a mean the traffic swings around."""
        closed = self.traffic is not None and self.traffic.arrival.kind == "closed"
        return self.rate is not None and not closed

    @property
    def drawn_as_priced(self) -> bool:
        """Whether the traffic draws exactly what the serving model prices: every request of the workload's own
        ``isl`` and ``osl`` (no distribution but a fixed one at those lengths, no trace) arriving as Poisson, or no
        traffic at all. ``fixed:N`` beside ``isl`` N is the same request written two ways.

        >>> from shardplan.contracts.traffic import FixedLength
        >>> Workload(isl=1024, osl=8, traffic=Traffic(isl=FixedLength(kind="fixed", tokens=1024))).drawn_as_priced
        True
        """
        t = self.traffic
        if t is None:
            return True
        lengths = ((t.isl, self.isl), (t.osl, self.osl))
        fixed = all(d is None or (d.kind == "fixed" and d.tokens == n) for d, n in lengths)
        return fixed and t.trace is None and t.arrival.kind == "poisson"

    @property
    def cached_prompt_tokens(self) -> float:
        """Mean prompt tokens per request found in the prefix cache."""
        return self.prefix_hit * self.isl

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens per request that prefill computes: those the prefix cache does not hold, and at least one,
        as an engine recomputes the last prompt token even when the cache holds the whole prompt, to sample the
        first output token from it (vLLM's KV-cache manager caps a hit at the prompt less one token). The cached
        rest is ``isl`` less these."""
        return self.isl - min(round(self.cached_prompt_tokens), self.isl - 1)

    @property
    def longest_prompt(self) -> int | None:
        """The longest prompt the workload can send: ``isl`` for fixed lengths, a distribution's cap; None where
        nothing short of the requests themselves bounds it (a lognormal without ``high``, a trace). An engine that
        takes prompts only whole must hold this many tokens in one step.

        >>> from shardplan.contracts.traffic import LognormalLength, UniformLength
        >>> Workload(isl=1024, osl=8).longest_prompt
        1024
        >>> uniform = Traffic(isl=UniformLength(kind="uniform", low=256, high=4096))
        >>> Workload(isl=2176, osl=8, traffic=uniform).longest_prompt
        4096
        >>> print(Workload(isl=2048, osl=8, traffic=Traffic(isl=LognormalLength(kind="lognormal", mean=2048, cv=1))
        ...       ).longest_prompt)
        None
        """
        return self._longest("isl")

    @property
    def longest_output(self) -> int | None:
        """The longest output the workload can ask for, as :attr:`longest_prompt` bounds the prompts."""
        return self._longest("osl")

    def _longest(self, side: Literal["isl", "osl"]) -> int | None:
        if self.traffic is not None and self.traffic.trace is not None:
            return None  # the trace's rows give the lengths
        lengths = getattr(self.traffic, side) if self.traffic is not None else None
        if lengths is None:
            return int(getattr(self, side))
        return lengths.tokens if lengths.kind == "fixed" else lengths.high

    @property
    def tokens_per_decode_step(self) -> float:
        """Output tokens one decode step emits per sequence, on average: 1, or the accepted drafts plus 1."""
        return self.speculation.tokens_per_step if self.speculation else 1.0

    @property
    def sequences(self) -> int:
        """Sequences in flight: the batch, or 1 when the search has not fixed it."""
        return self.batch or 1

    @property
    def prefill_sequences(self) -> int:
        """Prompts one prefill processes together."""
        return self.prefill_batch or self.sequences

    def phase_batch(self, phase: str) -> int:
        """Sequences one step of ``phase`` serves: the prefill batch in prefill, the whole batch in decode."""
        return self.prefill_sequences if phase == "prefill" else self.sequences

    def with_batch(self) -> Workload:
        """This workload with its batch made explicit (1 when the search was to choose it), for building one DAG."""
        return self if self.batch is not None else self.model_copy(update={"batch": 1})

    def static_prefill(self, batch: int) -> int | None:
        """The prompts a replica of ``batch`` sequences prefills together under this workload: the prefill batch it
        asks for (static batching), never more than the batch; None for the whole batch at once."""
        return min(self.prefill_batch, batch) if self.prefill_batch else None

    def at_concurrency(self, batch: int, prefill_batch: int | None = None) -> Workload:
        """This workload with ``batch`` sequences in flight (and optionally a prefill batch)."""
        return self.model_copy(update={"batch": batch, "prefill_batch": prefill_batch})
