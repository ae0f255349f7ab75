"""Weight formats per part of a model: a checkpoint that quantizes some parts and leaves others alone.

NVIDIA's FP4 DeepSeek-R1 stores the FFNs (dense layers, shared and routed experts) in NVFP4 and keeps the
attention projections, the router and the MTP layers in bf16 (TensorRT-LLM's DeepSeek-R1 B200 blog, "Precision
Strategy"); gpt-oss stores only its routed experts in MXFP4. The request names such parts with
``--weight-dtype-for PART=FORMAT`` (``weight_formats``): ``--weight-dtype`` stays the format of every part not
named, so a request that names none is priced as before. AIConfigurator keeps the same split: routed experts
under ``moe_quant_mode``, the other GEMMs under ``gemm_quant_mode``, and the attention projections a checkpoint
excludes from quantization in bf16 (its ``attention_projection_exclusions``).
"""

from __future__ import annotations

from typing import cast, get_args

from shardplan.contracts.common import AttentionDType, DType
from shardplan.contracts.model import WEIGHT_COMPONENTS, ModelSpec, WeightComponent
from shardplan.contracts.plan import PlanRequest
from shardplan.errors import InputError
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.catalogs.models import load_model

__all__ = [
    "parse_weight_formats", "with_weight_formats", "with_attention_dtype", "request_model", "weight_formats_text",
]

_FIELD = "weight_dtype_for"
_FIX = f"write PART=FORMAT pairs, e.g. attention=bf16,mtp=bf16 (parts: {', '.join(WEIGHT_COMPONENTS)}; formats: " \
       f"{', '.join(get_args(DType))})"


def parse_weight_formats(items: str | list[str] | None) -> dict[WeightComponent, DType] | None:
    """``PART=FORMAT`` pairs, comma-separated or one per item, as a dict; None for none.

    Raises:
        InputError: a pair without ``=``, an unknown part or format, or a part named twice.

    >>> parse_weight_formats("attention=bf16, mtp=bf16")
    {'attention': 'bf16', 'mtp': 'bf16'}
    """
    if items is None:
        return None
    pairs = [pair.strip() for item in ([items] if isinstance(items, str) else items) for pair in item.split(",")]
    formats: dict[WeightComponent, DType] = {}
    for pair in (p for p in pairs if p):
        part, sep, dtype = (text.strip().lower() for text in pair.partition("="))
        if not sep or part not in WEIGHT_COMPONENTS or dtype not in get_args(DType):
            what = "no '='" if not sep else (f"unknown part '{part}'" if part not in WEIGHT_COMPONENTS
                                              else f"unknown format '{dtype}'")
            raise InputError(f"--weight-dtype-for {pair[:60]!r}: {what}", field=_FIELD, fix=_FIX)
        if part in formats:
            raise InputError(f"--weight-dtype-for names {part} twice", field=_FIELD, fix="name each part once")
        formats[cast(WeightComponent, part)] = cast(DType, dtype)  # checked against the vocabularies above
    return formats or None


def _missing_part(spec: ModelSpec, part: WeightComponent) -> str | None:
    """Why ``spec`` has no ``part`` to store in a format of its own; None when it has one."""
    moe = spec.moe
    if part in ("experts", "router") and moe is None:
        return "it is a dense model (no experts, no router)"
    if part == "shared_experts" and (moe is None or not moe.num_shared_experts):
        return "it has no shared experts"
    if part == "dense_ffn" and moe is not None and not moe.first_dense_layers:
        return "every layer is a mixture of experts (no dense FFN layers)"
    if part == "mtp" and spec.mtp_layers < 1:
        return "its checkpoint ships no MTP layers"
    if part == "lm_head" and spec.tie_word_embeddings:
        return "its LM head is the embedding table (tied), stored in --weight-dtype"
    return None


def with_weight_formats(spec: ModelSpec, formats: dict[WeightComponent, DType] | None) -> ModelSpec:
    """``spec`` with the parts ``formats`` names stored in their formats (routed experts in ``expert_dtype``, the
    others in ``weight_formats``); ``spec`` itself for none.

    Raises:
        InputError: a part ``spec`` does not have (experts on a dense model, MTP on a model without MTP layers).
    """
    if not formats:
        return spec
    for part in formats:
        why = _missing_part(spec, part)
        if why is not None:
            raise InputError(f"--weight-dtype-for {part}={formats[part]}: {spec.name} has no {part}: {why}",
                             field=_FIELD, fix=f"drop {part}= (parts of this model: "
                             f"{', '.join(p for p in WEIGHT_COMPONENTS if _missing_part(spec, p) is None)})")
    others = {part: dtype for part, dtype in formats.items() if part != "experts"}
    return spec.model_copy(update={
        "expert_dtype": formats.get("experts", spec.expert_dtype),
        "weight_formats": {**spec.weight_formats, **others},
    })


def request_model(request: PlanRequest) -> ModelSpec:
    """The model a request names, in the weight, part and KV formats it asks for.

    Raises:
        InputError: unknown model, or a part format the model has no part for.
    """
    spec = with_weight_formats(load_model(request.model, weight_dtype=request.weight_dtype, kv_dtype=request.kv_dtype),
                               request.weight_formats)
    return with_attention_dtype(spec, request.attention_dtype or "bf16", request.gpu)


def with_attention_dtype(spec: ModelSpec, dtype: AttentionDType, gpu: str | None = None) -> ModelSpec:
    """``spec`` with attention multiplying in ``dtype``.

    Raises:
        InputError: fp8 attention over a KV cache not in fp8, or on a GPU without FP8 tensor cores.
    """
    if dtype == spec.attention_dtype:
        return spec
    if dtype == "fp8" and spec.kv_dtype != "fp8":
        raise InputError(f"FP8 attention multiplies an FP8 KV cache, and this one is {spec.kv_dtype}",
                         field="attention_dtype", fix="add --kv-dtype fp8, or leave --attention-dtype bf16")
    catalog = gpu_catalog()
    if dtype == "fp8" and gpu in catalog and "fp8" not in catalog[gpu].dense_tflops:
        raise InputError(f"{gpu} has no FP8 tensor cores, so attention cannot multiply in fp8 there",
                         field="attention_dtype", fix="leave --attention-dtype bf16, or choose a GPU with FP8")
    return spec.model_copy(update={"attention_dtype": dtype})


def weight_formats_text(spec: ModelSpec) -> str:
    """The parts stored apart from ``spec.weight_dtype``, in words ('' when none).

    >>> from shardplan.tools.catalogs.models import load_model
    >>> weight_formats_text(with_weight_formats(load_model("deepseek-v3"), {"attention": "bf16", "experts": "fp4"}))
    'experts fp4, attention bf16'
    """
    parts = [(part, spec.weight_format(part)) for part in WEIGHT_COMPONENTS]
    named = [f"{part} {dtype}" for part, dtype in parts if part == "experts" and spec.expert_dtype]
    named += [f"{part} {dtype}" for part, dtype in parts if part in spec.weight_formats]
    return ", ".join(named)
