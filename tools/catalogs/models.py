"""Reading ModelSpecs from Hugging Face ``config.json`` files, bundled or the user's own."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from shardplan.contracts.common import DTYPE_BYTES, DType
from shardplan.contracts.model import AttentionKind, MLASpec, ModelSpec, MoESpec
from shardplan.errors import InputError
from shardplan.reading import parse_json_text, read_text
from shardplan.text import counted, one_line
from shardplan.tools.catalogs.bundled import bundled_config, bundled_models
from shardplan.tools.catalogs.config_check import check_config_types
from shardplan.tools.catalogs.model_names import checkpoint_parts, not_bundled_fix, resolve_alias

if TYPE_CHECKING:
    import numpy as np

    from shardplan.contracts.workload import Workload

__all__ = [
    "load_model",
    "model_from_config",
    "resolve_model_name",
    "check_context",
    "check_workload_context",
    "check_drawn_context",
]

_DTYPE_ALIASES: dict[str, DType] = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "fp32": "fp32",
    "fp8": "fp8",
    "float8": "fp8",
    "e4m3": "fp8",
    "int8": "int8",
    "fp4": "fp4",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
}


def check_context(model: ModelSpec, isl: int, osl: int) -> None:
    """Refuse a prompt plus output longer than the model's context.

    Raises:
        InputError: ``isl + osl`` exceeds ``max_position_embeddings``; the message names both numbers.
    """
    if isl + osl > model.max_position_embeddings:
        raise InputError(
            f"prompt {isl} + output {osl} = {counted(isl + osl, 'token')} exceeds {model.name}'s context of "
            f"{counted(model.max_position_embeddings, 'token')}",
            field="isl",
            fix=f"keep --isl plus --osl within {model.max_position_embeddings}",
        )


def check_workload_context(model: ModelSpec, workload: Workload) -> None:
    """Refuse a workload whose mean request, or longest request where its length distributions bound it, is longer
    than the model's context: every engine refuses a request whose prompt plus asked output exceeds its
    ``max_model_len`` (the context by default). Traces and uncapped distributions are checked on the requests drawn
    (:func:`check_drawn_context`).

    Raises:
        InputError: the mean or the longest request exceeds ``max_position_embeddings``.
    """
    check_context(model, workload.isl, workload.osl)
    prompt, output = workload.longest_prompt, workload.longest_output
    if prompt is None or output is None or prompt + output <= model.max_position_embeddings:
        return
    traffic = workload.traffic
    field = "isl" if traffic is None else "isl_dist" if traffic.isl is not None else "osl_dist"
    raise InputError(
        f"the longest request the lengths allow, prompt {prompt} + output {output} = "
        f"{counted(prompt + output, 'token')}, exceeds {model.name}'s context of "
        f"{counted(model.max_position_embeddings, 'token')}, and the engine would refuse it",
        field=field,
        fix=f"cap the lengths (fixed:N, uniform:LOW,HIGH, lognormal:...,high=N) so the longest prompt plus the longest "
        f"output stays within {model.max_position_embeddings}",
    )


def check_drawn_context(model: ModelSpec, prompts: np.ndarray, outputs: np.ndarray) -> None:
    """Refuse drawn requests (a trace's rows, an uncapped distribution's draws) longer than the model's context.

    Raises:
        InputError: some request's prompt plus output exceeds ``max_position_embeddings``.
    """
    total = prompts + outputs
    if total.size == 0 or int(total.max()) <= model.max_position_embeddings:
        return
    worst = int(total.argmax())
    over = int((total > model.max_position_embeddings).sum())
    raise InputError(
        f"{counted(over, 'request')} of the traffic, the longest prompt {int(prompts[worst])} + output "
        f"{int(outputs[worst])} tokens, exceed {model.name}'s context of "
        f"{counted(model.max_position_embeddings, 'token')}, and the engine would refuse them",
        field="lengths",
        fix="cap the lengths (lognormal:...,high=N) or drop those rows from the trace",
    )


def resolve_model_name(name: str) -> str:
    """The bundled repository id that ``name`` means: the id itself, any case, or an unambiguous short name.

    Raises:
        InputError: no bundled model matches; the message lists the closest names.

    >>> resolve_model_name("llama-3.1-70b")
    'meta-llama/Llama-3.1-70B'
    """
    ids = list(bundled_models())
    wanted = name.strip().lower()
    by_full = {repo.lower(): repo for repo in ids}
    by_short = {repo.split("/", 1)[1].lower(): repo for repo in ids}
    if wanted in by_full:
        return by_full[wanted]
    if wanted in by_short:
        return by_short[wanted]
    alias = resolve_alias(name)
    if alias is not None:
        return alias[0]
    prefixed = [repo for short, repo in by_short.items() if short.startswith(wanted)]
    if len(prefixed) == 1:
        return prefixed[0]
    candidates = difflib.get_close_matches(wanted, list(by_short) + list(by_full), n=4, cutoff=0.4)
    suggestions = sorted(prefixed) if len(prefixed) > 1 else sorted({by_short.get(c) or by_full[c] for c in candidates})
    raise InputError(
        f"unknown model '{name}'" + (" (ambiguous)" if len(prefixed) > 1 else ""),
        field="model",
        fix=not_bundled_fix(name, suggestions),
    )


def load_model(name_or_path: str, *, weight_dtype: DType | None = None, kv_dtype: DType | None = None) -> ModelSpec:
    """A ModelSpec from a bundled name or a path to a ``config.json`` (or a folder holding one).

    Raises:
        InputError: unknown name, unreadable file, or a config that lacks or garbles a key.
    """
    if "\x00" in name_or_path:
        raise InputError("the model name holds a NUL byte", field="model",
                         fix="give a bundled model name or a config.json path")
    path = Path(os.path.expanduser(name_or_path))  # unlike Path.expanduser, an unknown ~user stays as written
    looks_like_path = path.suffix == ".json" or "/" in name_or_path and path.exists() or path.is_dir()
    if looks_like_path and name_or_path.strip().lower() not in {r.lower() for r in bundled_models()}:
        if path.is_dir():
            path = path / "config.json"
        # Messages name the path as given: the resolved one may tell a remote caller what exists elsewhere.
        given = f"model path {one_line(name_or_path, 200)}"
        if not path.is_file():
            raise InputError(f"no config file at {one_line(name_or_path, 200)}", field="model",
                             fix="give a path to a Hugging Face config.json")
        text = read_text(path, what=given, field="model", fix="give a Hugging Face config.json")
        config = parse_json_text(text, what=given, field="model")
        label = str(path)
    else:
        repo = resolve_model_name(name_or_path)
        config = bundled_config(repo)
        label = repo
        alias = resolve_alias(name_or_path)
        if weight_dtype is None and alias is not None and alias[0] == repo:
            weight_dtype = alias[1]
            # The parts the named checkpoint stores apart (a format override names another checkpoint: none then).
            parts = checkpoint_parts(name_or_path)
            spec = model_from_config(config, name=label, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
            if not parts:
                return spec
            experts = parts.pop("experts", spec.expert_dtype)
            return spec.model_copy(update={"weight_formats": parts, "expert_dtype": experts})
    return model_from_config(config, name=label, weight_dtype=weight_dtype, kv_dtype=kv_dtype)


def _need(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in config and config[key] is not None:
            return config[key]
    raise InputError(
        f"config.json lacks '{keys[0]}'",
        field=keys[0],
        fix=f"add '{keys[0]}' (a Hugging Face config of a decoder-only model has it)",
    )


def _int(config: dict[str, Any], *keys: str) -> int:
    value = _need(config, *keys)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(
            f"config.json key '{keys[0]}' is {value!r}, not a positive integer",
            field=keys[0],
            fix=f"set '{keys[0]}' to a whole number",
        )
    return value


def _weight_dtype(config: dict[str, Any]) -> tuple[DType, DType | None]:
    quant = config.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower()
    base = _DTYPE_ALIASES.get(str(config.get("torch_dtype", "bfloat16")).lower(), "bf16")
    if method == "mxfp4":
        # gpt-oss: experts in MXFP4, attention, router and embeddings left in bf16.
        return base, "fp4"
    if method in ("fp8", "fbgemm_fp8", "compressed-tensors") or quant.get("fmt") == "e4m3":
        return "fp8", None
    return base, None


def _layer_types(config: dict[str, Any], num_layers: int) -> tuple[list[AttentionKind], int | None]:
    window = config.get("sliding_window")
    raw = config.get("layer_types")
    if isinstance(raw, list) and raw:
        if len(raw) != num_layers:
            raise InputError(
                f"config.json layer_types has {len(raw)} entries, num_hidden_layers is {num_layers}",
                field="layer_types",
                fix="give one attention type per layer",
            )
        kinds: list[AttentionKind] = ["sliding" if "sliding" in str(t) else "full" for t in raw]
        return kinds, window if "sliding" in kinds else None
    uses_window = config.get("use_sliding_window", config.get("model_type") == "mistral")
    if window and uses_window:
        return ["sliding"] * num_layers, int(window)
    return ["full"] * num_layers, None


# Keys that change the architecture in ways the spec does not model, with the value that means "off".
_UNMODELLED: dict[str, tuple[object, ...]] = {
    "interleave_moe_layer_step": (None, 0, 1),
    "decoder_sparse_step": (None, 0, 1),
    "moe_layer_freq": (None, 1),
    "attention_chunk_size": (None, 0),
    "cross_attention_layers": (None, []),
    "full_attention_interval": (None, 0, 1),
    "linear_num_value_heads": (None, 0),
    "ssm_state_size": (None, 0),
    "mamba_d_state": (None, 0),
    "hybrid_override_pattern": (None, ""),
}


def _unmodelled(config: dict[str, Any]) -> list[str]:
    """Warnings naming the architecture-changing keys of ``config`` that the spec does not model."""
    keys = [key for key, off in _UNMODELLED.items() if key in config and config[key] not in off]
    kinds = config.get("layer_types")
    if isinstance(kinds, list):
        odd = sorted({str(k) for k in kinds if "sliding" not in str(k) and "full" not in str(k)})
        keys += [f"layer_types ({', '.join(odd)})"] if odd else []
    if not keys:
        return []
    return [f"config.json keys not modelled, planned as if absent: {', '.join(keys)}; figures may be off"]


def model_from_config(
    config: dict[str, Any], *, name: str = "custom", weight_dtype: DType | None = None, kv_dtype: DType | None = None
) -> ModelSpec:
    """Map a Hugging Face ``config.json`` (already parsed) to a ModelSpec.

    Understands Llama/Qwen3 dense (GQA/MHA), Mixtral and Qwen3-MoE (top-k experts), DeepSeek-V3
    (MLA, shared experts, leading dense layers) and gpt-oss (MXFP4 experts, alternating sliding-window
    attention, attention sinks).

    Raises:
        InputError: a key is missing or has a wrong value; the message names it.
    """
    if not isinstance(config, dict):
        raise InputError("config.json is not a JSON object", field="model", fix="give a Hugging Face config.json")
    if isinstance(config.get("text_config"), dict):
        # Multimodal configs (Llama-4, Qwen-VL) nest the language model's keys; the text model is what is planned.
        config = {**config, **config["text_config"]}
    check_config_types(config)
    model_type = str(config.get("model_type", "generic"))
    warnings = _unmodelled(config)
    hidden = _int(config, "hidden_size", "n_embd", "d_model")
    layers = _int(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(config, "num_attention_heads", "n_head")
    kv_heads = int(config.get("num_key_value_heads") or heads)
    vocab = _int(config, "vocab_size")
    intermediate = _int(config, "intermediate_size", "ffn_dim")
    head_dim = int(config.get("head_dim") or hidden // heads)

    mla = None
    if config.get("kv_lora_rank"):
        mla = MLASpec(
            q_lora_rank=config.get("q_lora_rank"),
            kv_lora_rank=_int(config, "kv_lora_rank"),
            qk_nope_head_dim=_int(config, "qk_nope_head_dim"),
            qk_rope_head_dim=int(_need(config, "qk_rope_head_dim")),
            v_head_dim=_int(config, "v_head_dim"),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        kv_heads = 1

    moe = None
    num_experts = config.get("n_routed_experts") or config.get("num_local_experts") or config.get("num_experts")
    if num_experts:
        expert_width = config.get("moe_intermediate_size") or intermediate
        shared = int(config.get("n_shared_experts") or 0)
        shared_width = expert_width * shared
        if config.get("shared_expert_intermediate_size"):
            shared, shared_width = 1, int(config["shared_expert_intermediate_size"])
        if model_type.startswith("llama4"):
            # Llama-4's MoE layers add one always-on shared expert as wide as a routed one (no config key says so).
            shared, shared_width = 1, int(expert_width)
        first_dense = int(config.get("first_k_dense_replace") or 0)
        if config.get("mlp_only_layers"):
            raise InputError(
                "config.json mlp_only_layers is not supported",
                field="mlp_only_layers",
                fix="remove it or use first_k_dense_replace for leading dense layers",
            )
        moe = MoESpec(
            num_experts=int(num_experts),
            experts_per_token=_int(config, "num_experts_per_tok", "experts_per_token", "top_k"),
            expert_intermediate_size=int(expert_width),
            num_shared_experts=shared,
            shared_expert_intermediate_size=shared_width // max(shared, 1),
            first_dense_layers=first_dense,
            expert_bias=model_type == "gpt_oss",
        )

    kinds, window = _layer_types(config, layers)
    base_dtype, expert_dtype = _weight_dtype(config)
    try:
        return ModelSpec(
            name=name,
            architecture=model_type,
            hidden_size=hidden,
            num_layers=layers,
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=intermediate,
            vocab_size=vocab,
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            gated_mlp=True,
            attention_bias=bool(config.get("attention_bias", False)),
            qk_norm=model_type in ("qwen3", "qwen3_moe"),
            attention_sinks=model_type == "gpt_oss",
            sliding_window=window,
            layer_types=kinds,
            mla=mla,
            moe=moe,
            max_position_embeddings=int(config.get("max_position_embeddings") or 131072),
            mtp_layers=int(config.get("num_nextn_predict_layers") or 0),
            weight_dtype=weight_dtype or base_dtype,
            expert_dtype=None if weight_dtype else expert_dtype,
            kv_dtype=kv_dtype or "bf16",
            warnings=warnings,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        raise InputError(
            f"config.json is inconsistent at {where}: {first['msg']}",
            field=where,
            fix="check the config against the model's published one",
        ) from None


assert set(_DTYPE_ALIASES.values()) <= set(DTYPE_BYTES)
