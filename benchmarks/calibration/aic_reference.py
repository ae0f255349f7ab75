"""AIConfigurator's own static estimate of a configuration, in-process, as the reference the grid compares to.

AIConfigurator (``aiconfigurator-core``, Apache-2.0) composes NVIDIA's measured kernel tables into a
per-model estimate: it builds the model's operation list for a parallel layout, prices every
operation from the tables of a GPU, engine and engine version, and sums a static batch's prefill
(TTFT) and its decode steps (TPOT = decode time / (osl - 1)). Only its public engine handle is used.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache

from shardplan.tools.cost.measured.database import system_for_gpu

__all__ = ["Layout", "aic_estimate", "AIC_MODEL_IDS"]

# Our catalog id -> the id AIConfigurator bundles the config under (same architecture and sizes).
AIC_MODEL_IDS = {
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "Qwen/Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "mistralai/Mixtral-8x7B-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "openai/gpt-oss-120b": "openai/gpt-oss-120b",
    "openai/gpt-oss-20b": "openai/gpt-oss-20b",
}


@dataclass(frozen=True)
class Layout:
    """A parallel layout as both tools name it: attention TP and PP, expert TP x EP inside the TP group."""

    tp: int
    pp: int = 1
    ep: int = 1

    @property
    def spec(self) -> str:
        """The shardplan strategy spec."""
        parts = [f"tp={self.tp}"]
        parts += [f"pp={self.pp}"] if self.pp > 1 else []
        parts += [f"ep={self.ep}"] if self.ep > 1 else []
        return ",".join(parts)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@cache
def _handle(model: str, system: str, engine: str, layout: Layout) -> object:
    from aiconfigurator_core.sdk.engine import EngineHandle

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    moe = {"moe_tp_size": layout.tp // layout.ep, "moe_ep_size": layout.ep}
    return EngineHandle.compile(
        AIC_MODEL_IDS[model], system, engine, backend_version="current", tp_size=layout.tp, pp_size=layout.pp, **moe
    )


def aic_estimate(
    model: str, gpu: str, engine: str, layout: Layout, isl: int, osl: int, batch: int
) -> tuple[float, float] | None:
    """(TTFT ms, TPOT ms) of a static batch by AIConfigurator's estimator, or None when it cannot price it."""
    system = system_for_gpu(gpu)
    if system is None or model not in AIC_MODEL_IDS:
        return None
    try:
        handle = _handle(model, system, engine, layout)
        context_ms, generation_ms, _ = handle.run_static(batch_size=batch, isl=isl, osl=osl)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a layout or shape the tables do not cover is reported as missing
        return None
    if context_ms <= 0 or generation_ms <= 0:
        return None
    return float(context_ms), float(generation_ms) / max(osl - 1, 1)
