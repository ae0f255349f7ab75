"""The requests on which shardplan and AIConfigurator price speculative decoding and prefix caching.

Each request fixes everything but the feature: the model, the GPUs, one worker's parallel layout, the
sequences in the batch, the prompt and output lengths, the batching and the engine. Both tools price it
twice, without the feature and with it, so that a disagreement splits into the part both tools already
had (the baseline) and the part the feature adds. The option lists here are pure (request in, command-line
options out); :mod:`compare_speculation_prefix` runs them.

Speculation is asked only of models that ship multi-token-prediction layers (``num_nextn_predict_layers``
in their config): DeepSeek-V3 (MoE) and MiMo-7B (dense). AIConfigurator takes ``--nextn`` for any model,
but it prices ``nextn`` extra layers shaped like the target's own decoder layers (its
``mtp_scale_factor``), which is DeepSeek-style MTP; an EAGLE head or a separate draft model has no
counterpart there, so shardplan's ``eagle:K`` and ``draft:MODEL:K`` are not compared.

The acceptance each speculative request gives both tools is a request input, not a claim about the model:
the values are the acceptance lengths TensorRT-LLM measured for DeepSeek-R1 with 1, 2 and 3 MTP layers
(``ACCEPTANCE_SOURCE``; acceptance length minus the bonus token), reused for MiMo-7B.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from aiconfigurator_cli import Deployment, Worker
from shardplan_pick import shardplan_spec

__all__ = [
    "ACCEPTANCE_SOURCE", "FeatureRequest", "FEATURE_REQUESTS", "aic_feature_options", "aic_kv_dtype",
    "prefix_tokens", "shardplan_feature_options", "shardplan_options",
]

HERE = Path(__file__).resolve().parent

ACCEPTANCE_SOURCE = (
    "github.com/NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/"
    "blog1_Pushing_Latency_Boundaries_Optimizing_DeepSeek-R1_Performance_on_NVIDIA_B200_GPUs.md, "
    "table 'Autoregressive MTP Layers': acceptance 1.92 (MTP 1), 2.58 (MTP 2), 2.82 (MTP 3)"
)
# Mean accepted draft tokens per step by draft length: the source's acceptance length less the bonus token.
ACCEPTED = {1: 0.92, 2: 1.58, 3: 1.82}

MIMO_CONFIG = HERE / "data" / "XiaomiMiMo__MiMo-7B-Base.json"
"""MiMo-7B-Base's config.json (huggingface.co/XiaomiMiMo/MiMo-7B-Base), as aiconfigurator-core 0.12.0 bundles
it (model_configs/XiaomiMiMo--MiMo-7B-Base_config.json); shardplan reads it as a config path."""

Feature = Literal["spec", "prefix"]


@dataclass(frozen=True)
class FeatureRequest:
    """One fixed deployment, priced without and with one feature."""

    label: str
    model: str  # shardplan's bundled name, or a config.json path
    aic_model: str  # the same checkpoint in AIConfigurator's model database
    moe: bool
    gpu: str
    worker: Worker
    batch: int  # sequences in the batch (static) or in flight (continuous)
    isl: int
    osl: int
    feature: Feature
    draft_tokens: int = 0  # spec: MTP draft tokens per step (K)
    prefix_hit: float = 0.0  # prefix: share of each prompt found in the prefix cache
    batching: Literal["static", "continuous"] = "static"
    engine: str = "vllm"

    @property
    def accepted(self) -> float:
        """Mean accepted draft tokens per step given to both tools (spec requests)."""
        return ACCEPTED[self.draft_tokens]

    @property
    def deployment(self) -> Deployment:
        """The request as one aggregated worker holding the whole batch."""
        return Deployment("agg", self.batch, agg=self.worker, replicas=1)

    @property
    def feature_text(self) -> str:
        """``mtp:K A=...`` or ``prefix 75% (3072 tokens)``."""
        if self.feature == "spec":
            return f"mtp:{self.draft_tokens} A={self.accepted:g}"
        return f"prefix {self.prefix_hit:.1%} ({prefix_tokens(self)} tokens)"


def prefix_tokens(request: FeatureRequest) -> int:
    """AIConfigurator's ``--prefix``: cached tokens per prompt (shardplan takes the share ``prefix_hit``).

    The requests choose shares that give whole tokens, so both tools see the same cache."""
    tokens = request.prefix_hit * request.isl
    if abs(tokens - round(tokens)) > 1e-9:
        raise ValueError(f"{request.label}: prefix hit {request.prefix_hit} of {request.isl} tokens is not whole")
    return round(tokens)


def aic_feature_options(request: FeatureRequest) -> list[str]:
    """AIConfigurator ``cli estimate`` options that switch the request's feature on."""
    if request.feature == "spec":
        return ["--nextn", str(request.draft_tokens), "--nextn-accepted", f"{request.accepted:g}"]
    return ["--prefix", str(prefix_tokens(request))]


def aic_kv_dtype(request: FeatureRequest) -> str | None:
    """The KV-cache format AIConfigurator gives the request's checkpoint when none is named: FP8 for an FP8 (or
    block-FP8, NVFP4) checkpoint whose config names no KV format (aiconfigurator-core 0.12.0,
    ``sdk/models/helpers.py`` ``_infer_quant_modes_from_raw_config``: "if kv_cache_algo is None ... kvcache_quant_mode
    = fp8"), where vLLM's own default (``kv_cache_dtype=auto``) keeps the model's bf16. The comparison asks shardplan
    for the same cache, so that both tools price one request; None where AIConfigurator keeps bf16."""
    from shardplan.tools.catalogs.models import load_model

    return "fp8" if load_model(request.model).weight_dtype in ("fp8", "fp4") else None


def shardplan_options(request: FeatureRequest) -> list[str]:
    """``shardplan plan`` options that price the request's fixed deployment without the feature."""
    kv = aic_kv_dtype(request)
    return [
        *("-m", request.model, "--gpu", request.gpu, "--gpus", str(request.worker.gpus)),
        *("-s", shardplan_spec(request.deployment), "--batch", str(request.batch)),
        *("--batching", request.batching, "--engine", request.engine),
        *("--isl", str(request.isl), "--osl", str(request.osl)),
        *(("--kv-dtype", kv) if kv else ()),
    ]


def shardplan_feature_options(request: FeatureRequest) -> list[str]:
    """``shardplan plan`` options that switch the request's feature on."""
    if request.feature == "spec":
        return ["--spec", f"mtp:{request.draft_tokens}", "--spec-accept", f"{request.accepted:g}"]
    return ["--prefix-hit", f"{request.prefix_hit:g}"]


LLAMA_8B, LLAMA_70B = "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B"
AIC_LLAMA_8B, AIC_LLAMA_70B = "meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B"
DSV3, QWEN_30B, QWEN_235B = "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B"
MIMO = str(MIMO_CONFIG)
AIC_MIMO = "XiaomiMiMo/MiMo-7B-Base"
TP1, TP2, TP4, TP8 = Worker(tp=1), Worker(tp=2, moe_tp=2), Worker(tp=4, moe_tp=4), Worker(tp=8, moe_tp=8)
TP8_EP8 = Worker(tp=8, moe_tp=1, moe_ep=8)  # DeepSeek-V3's experts spread over the 8 GPUs

# Dense and MoE; speculation at batches where it pays (1 to 32) and beyond; prefix shares of 1/2 to 7/8 on
# prompts of 2k to 8k; static batches (one prefill, then the decode steps: the feature's own pricing) and
# continuous batching (the steady state both tools derive from the steps).
FEATURE_REQUESTS: tuple[FeatureRequest, ...] = (
    FeatureRequest("mimo7b-1xH100-b8-mtp1", MIMO, AIC_MIMO, False, "H100", TP1, 8, 2048, 512, "spec", 1),
    FeatureRequest("mimo7b-1xH100-b32-mtp2", MIMO, AIC_MIMO, False, "H100", TP1, 32, 2048, 512, "spec", 2),
    FeatureRequest("dsv3-8xH200-b1-mtp3", DSV3, DSV3, True, "H200", TP8_EP8, 1, 1024, 2048, "spec", 3),
    FeatureRequest("dsv3-8xH200-b16-mtp1", DSV3, DSV3, True, "H200", TP8_EP8, 16, 1024, 1024, "spec", 1),
    FeatureRequest("dsv3-8xH200-b64-mtp2", DSV3, DSV3, True, "H200", TP8_EP8, 64, 1024, 1024, "spec", 2),
    FeatureRequest("mimo7b-1xH100-c32-mtp1", MIMO, AIC_MIMO, False, "H100", TP1, 32, 2048, 512, "spec", 1,
                   batching="continuous"),
    FeatureRequest("dsv3-8xH200-c32-mtp1", DSV3, DSV3, True, "H200", TP8_EP8, 32, 1024, 1024, "spec", 1,
                   batching="continuous"),
    FeatureRequest("llama8b-1xH100-b16-prefix", LLAMA_8B, AIC_LLAMA_8B, False, "H100", TP1, 16, 2048, 256,
                   "prefix", prefix_hit=0.5),
    FeatureRequest("qwen3-32b-4xH100-b16-prefix", "Qwen/Qwen3-32B", "Qwen/Qwen3-32B", False, "H100", TP4, 16,
                   4096, 512, "prefix", prefix_hit=0.75),
    FeatureRequest("llama70b-8xH200-b8-prefix", LLAMA_70B, AIC_LLAMA_70B, False, "H200", TP8, 8, 8192, 256,
                   "prefix", prefix_hit=0.875),
    FeatureRequest("qwen3-30b-a3b-2xH100-b32-prefix", QWEN_30B, QWEN_30B, True, "H100", TP2, 32, 2048, 512,
                   "prefix", prefix_hit=0.5),
    FeatureRequest("qwen3-235b-8xH200-b16-prefix", QWEN_235B, QWEN_235B, True, "H200", TP8, 16, 4096, 512,
                   "prefix", prefix_hit=0.75),
    FeatureRequest("dsv3-8xH200-b8-prefix", DSV3, DSV3, True, "H200", TP8_EP8, 8, 4096, 512, "prefix",
                   prefix_hit=0.75),
    FeatureRequest("llama8b-1xH100-c32-prefix", LLAMA_8B, AIC_LLAMA_8B, False, "H100", TP1, 32, 2048, 256,
                   "prefix", prefix_hit=0.5, batching="continuous"),
    FeatureRequest("qwen3-30b-a3b-2xH100-c32-prefix", QWEN_30B, QWEN_30B, True, "H100", TP2, 32, 2048, 512,
                   "prefix", prefix_hit=0.5, batching="continuous"),
)
# The speculation requests again on TensorRT-LLM, MTP's home engine (DeepSeek's MTP work there is NVIDIA's own) and
# the one backend where AIConfigurator's DeepSeek model prices the two all-reduces a layer the engines run, no more
# (its vLLM path counts them twice: :mod:`aic_double_count`).
FEATURE_REQUESTS += tuple(replace(request, label=f"{request.label}-trtllm", engine="trtllm")
                          for request in FEATURE_REQUESTS if request.feature == "spec")
