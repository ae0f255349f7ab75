"""What a model's own checkpoint offers speculative decoding: its multi-token-prediction (MTP) layers.

DeepSeek-V3 ships ``num_nextn_predict_layers`` MTP modules beside its main layers (its ``config.json``); the engines
draft with them (vLLM's ``"method": "mtp"``, SGLang's ``NEXTN``, TensorRT-LLM's ``decoding_type: MTP``). A
:class:`ModelSpec` does not carry the count, so it is read from the same config the spec came from.
"""

from __future__ import annotations

import json
from pathlib import Path

from shardplan.contracts.model import ModelSpec
from shardplan.contracts.speculation import Speculation, speculation_text
from shardplan.errors import InputError
from shardplan.tools.catalogs.bundled import bundled_config, bundled_models

__all__ = ["mtp_layers", "check_drafter"]


def mtp_layers(model: ModelSpec) -> int:
    """MTP modules in ``model``'s checkpoint (``num_nextn_predict_layers``; 0 when the config has none, or when the
    config the spec was read from can no longer be read).

    >>> from shardplan.tools.catalogs.models import load_model
    >>> mtp_layers(load_model("deepseek-v3")), mtp_layers(load_model("llama-3.1-8b"))
    (1, 0)
    """
    if model.name in bundled_models():
        config = bundled_config(model.name)
    else:
        try:
            config = json.loads(Path(model.name).read_text())
        except (OSError, ValueError):
            return 0
    value = config.get("num_nextn_predict_layers") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def check_drafter(model: ModelSpec, speculation: Speculation | None) -> None:
    """Refuse MTP on a model whose checkpoint has no MTP layers to draft with.

    Raises:
        InputError: field ``spec``, naming the model and the other drafters.
    """
    if speculation is not None and speculation.method == "mtp" and mtp_layers(model) == 0:
        raise InputError(f"--spec {speculation_text(speculation)}: {model.name} has no MTP layers "
                         "(num_nextn_predict_layers in its config) to draft with", field="spec",
                         fix="use --spec eagle:K (an EAGLE head) or draft:MODEL:K (a smaller model) instead")
