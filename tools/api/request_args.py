"""The arguments every request-taking capability shares, on a strict base, and their translation to a PlanRequest.

``RequestArgs.to_request`` turns a tool call into the planner's ``PlanRequest`` (checking paths against the
allowed roots) and ``RequestArgs.from_request`` writes a request back as the keyword arguments of a call.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from shardplan.contracts.common import AttentionDType, DType, Objective, ServingEngine
from shardplan.contracts.constraints import parse_constraints
from shardplan.contracts.economics import GpuPrice
from shardplan.contracts.model import WeightComponent
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.speculation import speculation_option, speculation_text
from shardplan.contracts.targets import parse_slo_percentile
from shardplan.contracts.traffic import arrival_text, length_text
from shardplan.contracts.workload import Batching, Workload, default_objective
from shardplan.errors import InputError
from shardplan.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_RATE, MIN_RATE, RATE_RANGE
from shardplan.tools.api.guards import check_path
from shardplan.tools.catalogs.gpus import load_cluster
from shardplan.tools.catalogs.trace_files import bundled_trace_name, bundled_traces
from shardplan.tools.planning.assumptions import request_assumptions
from shardplan.tools.traffic.sizing import parse_traffic, workload_fields

__all__ = ["ENGINE_PATTERN", "Args", "RequestArgs"]

ENGINE_PATTERN = r"^(vllm|sglang|trtllm|auto)(,(vllm|sglang|trtllm))*$"
"""An engine, 'auto', or a comma list of engines (lower case, no spaces), as the ``engine`` argument takes them."""


class Args(BaseModel):
    """Base of every argument model: unknown keys are an error, and values are taken as JSON gives them.

    Strict: a boolean is not an integer (``gpus: true`` is not 1 GPU), a string is not a number
    (``ttft_ms: "Infinity"``), and numbers must be finite, so that an agent's slip is named rather than
    guessed at; the error is the CLI's one line naming the field.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class RequestArgs(Args):
    """A planning request: model, hardware and workload."""

    model: str = Field(
        min_length=1, max_length=300, description="Bundled model name (llama-3.1-70b, deepseek-v3) or config.json path."
    )
    gpu: str = Field(
        default="H100",
        min_length=1,
        max_length=40,
        description="GPU catalog name: H100, H200, B200, A100, L40S, MI300X, A100-40GB, H100-PCIe, H20, GB200; "
        "with a cluster file, its GPU unless given. plan only: a comma list (H100,H200,B200) or 'any' (every priced "
        "GPU) plans each type and answers with the cheapest per 1M output tokens that meets the targets.",
    )
    gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs available.")
    gpus_per_node: int | None = Field(
        default=None, ge=1, le=MAX_GPUS_PER_NODE, description="GPUs per node; the GPU's usual 8 when omitted."
    )
    decode_gpu: str | None = Field(
        default=None, min_length=1, max_length=40,
        description="Decode workers on this GPU type, prefill workers on gpu: split pools only, the KV cache priced "
        "over the network between them (gpus counts both pools).",
    )
    decode_gpus: int | None = Field(
        default=None, ge=1, le=MAX_GPUS, description="With decode_gpu: the most of gpus the decode pool may use."
    )
    decode_gpu_price: float | None = Field(
        default=None, gt=0, le=1e4, allow_inf_nan=False,
        description="US dollars per GPU-hour of decode_gpu; omitted: its bundled, dated list price.",
    )
    cluster: str | None = Field(
        default=None, max_length=500, description="Path of a cluster YAML, when the request came with one."
    )
    # None, not the default length: a caller that fills in every default (LangChain does) must not seem to give
    # a length that contradicts the mean of its isl_dist or trace.
    isl: int | None = Field(default=None, ge=1, le=2_097_152, description="Input (prompt) tokens; omitted: 2048, or "
                            "the mean of isl_dist or of the workload trace.")
    osl: int | None = Field(default=None, ge=1, le=2_097_152, description="Output tokens; omitted: 256, or the mean "
                            "of osl_dist or of the workload trace.")
    isl_dist: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="Prompt lengths drawn from a distribution: 'lognormal:mean=2048,cv=0.8' (optionally low=, "
        "high=), 'uniform:256,4096' or 'fixed:2048'.",
    )
    osl_dist: str | None = Field(
        default=None, min_length=1, max_length=200, description="Output lengths drawn from a distribution, as "
        "isl_dist."
    )
    workload: str | None = Field(
        default=None, min_length=1, max_length=500,
        description="A request trace giving the lengths (and arrival times): a bundled trace (azure-code, "
        "azure-conv) or a CSV / JSON Lines file under the allowed folders, one request a row.",
    )
    arrival: str | None = Field(
        default=None, min_length=1, max_length=100,
        description="How requests arrive: 'poisson' (default), 'gamma:cv=3' (bursty), 'closed:32' (32 clients, "
        "each sending its next request when its last completes: 32 sequences in flight unless batch is given), "
        "'trace' (the workload trace's timestamps; its mean rate unless rate is given).",
    )
    batch: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Sequences in flight across the deployment; omitted: the search chooses the concurrency.",
    )
    prefill_batch: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Static batching: prompts prefilled together; None prefills the whole batch at once.",
    )
    batching: Batching = Field(default="continuous", description="continuous or static batching.")
    rate: float | None = Field(
        default=None, ge=MIN_RATE, le=MAX_RATE,
        description=f"Requests/s to serve ({RATE_RANGE}): the fewest GPUs that serve it under the targets."
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="Share of each GPU's memory the engine may use."
    )
    max_batched_tokens: int = Field(
        default=8192, ge=1, le=1_000_000, description="Tokens one continuous-batching step carries at most."
    )
    ttft_ms: float | None = Field(default=None, gt=0, description="Target time to first token, ms.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Target time per output token, ms.")
    slo_percentile: str | None = Field(
        default=None, min_length=1, max_length=10,
        description="What ttft_ms and tpot_ms bound: 'mean' (default) or a percentile over requests, '50', '90', "
        "'95', '99', judged by simulating the best candidates under the workload's traffic.",
    )
    objective: Objective | None = Field(
        default=None, description="latency, throughput or goodput (throughput under targets); omitted: throughput "
        "when a target or a rate is given, else latency.",
    )
    engine: str = Field(
        default="vllm", max_length=40, pattern=ENGINE_PATTERN,
        description="Serving engine priced: vllm, sglang or trtllm (its measured kernels, collectives). plan only: "
        "'auto' (every engine) or a comma list ('vllm,sglang') plans each and answers with the best, per engine "
        "whether measured tables or the roofline priced it.",
    )
    weight_dtype: DType | None = Field(default=None, description="Override of the weight format (bf16, fp8, fp4).")
    kv_dtype: DType | None = Field(default=None, description="Override of the KV-cache format.")
    attention_dtype: AttentionDType | None = Field(
        default=None,
        description="Format attention multiplies in: fp8 where the engine runs FP8 attention kernels over an FP8 KV "
        "cache (FlashMLA's FP8 decode kernel, TensorRT-LLM's FP8 context FMHA); needs kv_dtype fp8. None: bf16.",
    )
    weight_formats: dict[WeightComponent, DType] | None = Field(
        default=None,
        description="Formats of the parts whose weights the checkpoint stores apart from weight_dtype, e.g. "
        "{'attention': 'bf16', 'mtp': 'bf16'} for NVIDIA's FP4 DeepSeek-R1, {'experts': 'fp4'} for FP4 experts "
        "only (parts: attention, dense_ffn, shared_experts, experts, router, lm_head, mtp).",
    )
    spec: str | None = Field(
        default=None, min_length=1, max_length=340,
        description="Speculative decoding: 'mtp:K' (the model's MTP layers), 'eagle:K' (an EAGLE-3 head: the one "
        "bundled for the model, else one with a full-vocabulary LM head), 'eagle:HEAD:K' (the head's config.json or "
        "folder) or 'draft:MODEL:K' (a draft model), K draft tokens per step; needs spec_accept.",
    )
    spec_accept: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="Mean accepted draft tokens per step (0 to K), as the engine measured it (vLLM's and SGLang's "
        "mean acceptance length minus one); required with spec, never assumed.",
    )
    prefix_hit: float | None = Field(
        default=None, ge=0, lt=1, allow_inf_nan=False,
        description="Share of prompt tokens found in the prefix cache (0 to below 1), e.g. 0.7 when a shared "
        "system prompt is 70% of each prompt.",
    )
    gpu_price: float | None = Field(
        default=None, gt=0, le=1e4, allow_inf_nan=False,
        description="US dollars per GPU-hour of the request's GPU, for the plan's cost; omitted: the bundled, dated "
        "list price where there is one.",
    )
    constraints: list[Annotated[str, Field(min_length=1, max_length=60)]] | None = Field(
        default=None,
        max_length=32,
        description="What the deployment must respect, e.g. ['tp<=8', 'pp=1', 'ep>=8', 'sp=off', 'decode:tp=8', "
        "'tp-in-node', 'ep-in-node', 'pp-across-nodes', 'colocated', 'disaggregated', 'gpus-per-replica=8', "
        "'engine=vllm'].",
    )

    def to_request(self) -> PlanRequest:
        """The PlanRequest these arguments describe; model, cluster and workload-trace paths must lie under the
        allowed roots. The arguments left out are listed in the request's ``assumptions``; the traffic arguments
        (``isl_dist``, ``osl_dist``, ``workload``, ``arrival``) set the lengths, sequences in flight and rate left
        out (:func:`~shardplan.tools.traffic.sizing.workload_fields`).

        Raises:
            InputError: a path outside the allowed roots, an unreadable constraint, an unknown model, a malformed
                distribution, arrival process or trace, a length far from its traffic's mean.
        """

        check_path(self.model, "model")
        speculation = speculation_option(self.spec, self.spec_accept)
        if speculation is not None and speculation.draft_model is not None:
            check_path(speculation.draft_model, "spec")  # read like the model: a bundled name or a config path
        if self.cluster:
            check_path(self.cluster, "cluster", always=True, names="gpu and gpus_per_node instead of a cluster file")
        if self.workload and bundled_trace_name(self.workload) is None:
            check_path(self.workload, "workload", always=True,
                       names=f"a bundled trace ({', '.join(bundled_traces())})")
        given = self.model_fields_set - {name for name in ("isl", "osl") if getattr(self, name) is None}
        traffic = workload_fields(parse_traffic(self.isl_dist, self.osl_dist, self.workload, self.arrival),
                                  isl=self.isl, osl=self.osl, batch=self.batch, rate=self.rate)
        workload = Workload(
            **traffic,
            prefill_batch=self.prefill_batch,
            ttft_ms=self.ttft_ms,
            tpot_ms=self.tpot_ms,
            slo_percentile=parse_slo_percentile(self.slo_percentile) if self.slo_percentile else "mean",
            objective=self.objective or default_objective(self.ttft_ms, self.tpot_ms, traffic["rate"]),
            batching=self.batching,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_batched_tokens=self.max_batched_tokens,
            engine=self._one_engine(),
            speculation=speculation,
            prefix_hit=self.prefix_hit or 0.0,
        )
        gpu, decode_gpu = self.gpu, self.decode_gpu
        if self.cluster:
            # The cluster file names its GPU (and its decode pool's): the defaults must not contradict it.
            where = load_cluster(self.cluster)
            gpu = gpu if "gpu" in self.model_fields_set else where.gpu.name
            decode_gpu = decode_gpu or (where.decode_pool.gpu.name if where.decode_pool is not None else None)
        request = PlanRequest(
            model=self.model,
            gpu=gpu,
            gpus=self.gpus,
            gpus_per_node=self.gpus_per_node,
            cluster=self.cluster,
            decode_gpu=decode_gpu,
            decode_gpus=self.decode_gpus,
            decode_price=GpuPrice(gpu=decode_gpu, usd_per_gpu_hour=self.decode_gpu_price,
                                  source="the request's decode_gpu_price")
            if self.decode_gpu_price is not None and decode_gpu else None,
            workload=workload,
            weight_dtype=self.weight_dtype,
            kv_dtype=self.kv_dtype,
            attention_dtype=self.attention_dtype,
            weight_formats=self.weight_formats,
            constraints=parse_constraints(self.constraints) if self.constraints else None,
            price=GpuPrice(gpu=gpu, usd_per_gpu_hour=self.gpu_price, source="the request's gpu_price")
            if self.gpu_price is not None else None,
        )
        given = given | ({"gpu", "gpus_per_node"} if self.cluster else set())
        return request.model_copy(update={"assumptions": request_assumptions(request, given)})

    def _one_engine(self) -> ServingEngine:
        """The one engine the request is priced for; several are for the plan tool alone.

        Raises:
            InputError: 'auto' or a list here.
        """
        if "," in self.engine or self.engine == "auto":
            raise InputError(f"engine {self.engine!r} names several engines", field="engine",
                             fix="name one of vllm, sglang, trtllm (only plan compares several)")
        return self.engine  # type: ignore[return-value]  # the pattern allows nothing else

    @classmethod
    def from_request(cls, request: PlanRequest) -> dict[str, Any]:
        """The keyword arguments that describe ``request`` (omitting defaults), as a tool call carries them."""
        w = request.workload
        values = {
            "model": request.model,
            "gpu": request.gpu,
            "gpus": request.gpus,
            "gpus_per_node": request.gpus_per_node,
            "cluster": request.cluster,
            "isl": w.isl,
            "osl": w.osl,
            "batch": w.batch,
            "prefill_batch": w.prefill_batch,
            "ttft_ms": w.ttft_ms,
            "tpot_ms": w.tpot_ms,
            "slo_percentile": w.slo_percentile if w.slo_percentile != "mean" else None,
            "objective": w.objective,
            "batching": w.batching,
            "rate": w.rate,
            "gpu_memory_utilization": w.gpu_memory_utilization,
            "max_batched_tokens": w.max_batched_tokens,
            "engine": w.engine if w.engine != "vllm" else None,
            "weight_dtype": request.weight_dtype,
            "kv_dtype": request.kv_dtype,
            "attention_dtype": request.attention_dtype,
            "weight_formats": request.weight_formats,
            "constraints": request.constraints.to_texts() if request.constraints else None,
            "spec": speculation_text(w.speculation) if w.speculation else None,
            "spec_accept": w.speculation.accepted if w.speculation else None,
            "prefix_hit": w.prefix_hit or None,
            "gpu_price": request.price.usd_per_gpu_hour if request.price is not None else None,
            "decode_gpu": request.decode_gpu,
            "decode_gpus": request.decode_gpus,
            "decode_gpu_price": request.decode_price.usd_per_gpu_hour if request.decode_price is not None else None,
        }
        traffic = w.traffic
        if traffic is not None:
            values.update(
                isl_dist=length_text(traffic.isl) if traffic.isl is not None else None,
                osl_dist=length_text(traffic.osl) if traffic.osl is not None else None,
                workload=traffic.trace,
                arrival=arrival_text(traffic.arrival) if traffic.arrival.kind != "poisson" else None,
            )
        return {k: v for k, v in values.items() if v is not None}
