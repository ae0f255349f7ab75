"""Type and range checks of a Hugging Face ``config.json`` before it is mapped to a ModelSpec.

A config is untrusted input: ``"num_key_value_heads": "abc"``, ``"quantization_config": "fp8"`` or a
million layers must come back as one line naming the key, not as a TypeError deep in the mapping or a
DAG build that never ends. :func:`check_config_types` looks at every key the mapping reads.

>>> check_config_types({"num_hidden_layers": 2, "quantization_config": {"quant_method": "fp8"}})
>>> check_config_types({"num_key_value_heads": "abc"})
Traceback (most recent call last):
...
shardplan.errors.InputError: config.json key 'num_key_value_heads' is 'abc', not a whole number; ...
"""

from __future__ import annotations

from typing import Any

from shardplan.errors import InputError
from shardplan.limits import MAX_CONFIG_INT, MAX_LAYERS
from shardplan.text import one_line

__all__ = ["check_config_types", "INT_KEYS", "LAYER_KEYS"]

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
"""Keys that give the layer count, bounded by :data:`~shardplan.limits.MAX_LAYERS`."""
INT_KEYS = (
    "hidden_size", "n_embd", "d_model", *LAYER_KEYS, "num_attention_heads", "n_head", "num_key_value_heads",
    "vocab_size", "intermediate_size", "ffn_dim", "head_dim", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "num_local_experts", "num_experts",
    "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace",
    "num_experts_per_tok", "experts_per_token", "top_k", "sliding_window", "max_position_embeddings",
    "num_nextn_predict_layers",
)
"""Keys read as whole numbers."""
_MAPPING_KEYS = ("quantization_config", "text_config", "rope_scaling")
_TEXT_KEYS = ("model_type", "torch_dtype")
_FLAG_KEYS = ("tie_word_embeddings", "attention_bias", "use_sliding_window")
_LIST_KEYS = ("layer_types", "mlp_only_layers")


def _refuse(key: str, value: Any, wanted: str, fix: str) -> InputError:
    shown = one_line(repr(value), 60)
    return InputError(f"config.json key '{key}' is {shown}, not {wanted}", field=key, fix=fix)


def check_config_types(config: dict[str, Any]) -> None:
    """Refuse a config whose keys have the wrong type or an impossible size.

    Raises:
        InputError: the first key of the wrong type (a string for a count, a string for a mapping, ...),
            an integer outside 0..:data:`~shardplan.limits.MAX_CONFIG_INT`, or more layers than
            :data:`~shardplan.limits.MAX_LAYERS`.
    """
    for key in INT_KEYS:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CONFIG_INT:
            raise _refuse(key, value, "a whole number",
                          f"set '{key}' to a whole number from 0 to {MAX_CONFIG_INT:,}")
        if key in LAYER_KEYS and value > MAX_LAYERS:
            raise InputError(f"config.json key '{key}' is {value:,}, over the limit of {MAX_LAYERS:,} layers",
                             field=key, fix=f"give a model of at most {MAX_LAYERS:,} layers")
    for key in _MAPPING_KEYS:
        if config.get(key) is not None and not isinstance(config[key], dict):
            example = ', e.g. {"quant_method": "fp8"}' if key == "quantization_config" else " or remove it"
            raise _refuse(key, config[key], "a mapping", f"make '{key}' a JSON object{example}")
    quant = config.get("quantization_config") or {}
    for key in ("quant_method", "fmt"):
        if quant.get(key) is not None and not isinstance(quant[key], str):
            raise _refuse(f"quantization_config.{key}", quant[key], "a string",
                          f"make quantization_config.{key} a string such as \"fp8\"")
    for key in _TEXT_KEYS:
        if config.get(key) is not None and not isinstance(config[key], str):
            raise _refuse(key, config[key], "a string", f"make '{key}' a string")
    for key in _FLAG_KEYS:
        if config.get(key) is not None and not isinstance(config[key], bool):
            raise _refuse(key, config[key], "true or false", f"set '{key}' to true or false")
    for key in _LIST_KEYS:
        if config.get(key) is not None and not isinstance(config[key], list):
            raise _refuse(key, config[key], "a list", f"make '{key}' a JSON list or remove it")
    if len(config.get("layer_types") or []) > MAX_LAYERS:
        raise InputError(f"config.json layer_types has more than {MAX_LAYERS:,} entries", field="layer_types",
                         fix=f"give a model of at most {MAX_LAYERS:,} layers")
