"""Names people give models: release and format variants of a bundled model, architecture-identical
models (DeepSeek-R1 is DeepSeek-V3's architecture), and the closest bundled model for one that is not bundled.
"""

from __future__ import annotations

import re
from pathlib import Path

from shardplan.contracts.common import DType
from shardplan.contracts.model import WeightComponent
from shardplan.tools.catalogs.bundled import bundled_models

__all__ = ["resolve_alias", "alias_note", "not_bundled_fix", "checkpoint_parts"]


# Published models whose architecture equals a bundled one: same shapes, so the same plan. Keys are
# squashed short names (lowercase, no separators) after the org, a "Meta-" prefix and release suffixes
# (-Instruct, -Chat, -hf, -FP8 ...) are stripped.
_SAME_ARCHITECTURE = {
    "deepseekr1": "deepseek-ai/DeepSeek-V3",
    "deepseekr10528": "deepseek-ai/DeepSeek-V3",
    "deepseekv30324": "deepseek-ai/DeepSeek-V3",
    "deepseekv31": "deepseek-ai/DeepSeek-V3",
    "deepseekv3base": "deepseek-ai/DeepSeek-V3",
    "llama3370b": "meta-llama/Llama-3.1-70B",
    "llama370b": "meta-llama/Llama-3.1-70B",
    "llama38b": "meta-llama/Llama-3.1-8B",
    "qwen3235ba22b2507": "Qwen/Qwen3-235B-A22B",
    "qwen330ba3b2507": "Qwen/Qwen3-30B-A3B",
}
# Release suffixes that do not change the architecture; a format suffix sets the weight format.
_SUFFIXES: tuple[tuple[str, DType | None], ...] = (
    ("instruct", None), ("chat", None), ("hf", None), ("it", None), ("base", None), ("thinking", None),
    ("dynamic", None), ("fp8", "fp8"), ("nvfp4", "fp4"), ("fp4", "fp4"), ("mxfp4", "fp4"), ("w8a8", "int8"),
    ("int8", "int8"), ("bf16", "bf16"),
)
# Published checkpoints that store some parts apart from the format their name says, by lowercase repository id:
# the parts and their formats, each from the source named. nvidia/DeepSeek-R1-FP4: TensorRT-LLM's DeepSeek-R1 B200
# blog ("Pushing Latency Boundaries", section "Precision Strategy": attention modules bf16, dense and MoE FFN layers
# nvfp4, MTP layers bf16, RouterGEMM bf16 weights); its model card quantizes the linear operators within transformer
# blocks only, so the LM head stays bf16 (quoted in NVIDIA/Model-Optimizer issue #150, which finds the attention
# projections stored in bf16), and its v2 "additionally quantizes the wo module in attention layers".
_CHECKPOINT_PARTS: dict[str, dict[WeightComponent, DType]] = {
    "nvidia/deepseek-r1-fp4": {"attention": "bf16", "router": "bf16", "lm_head": "bf16", "mtp": "bf16"},
}
# Unbundled families and the bundled model closest in architecture, for the "not bundled" answer.
_CLOSEST = {
    "kimi": ("deepseek-ai/DeepSeek-V3", "Kimi-K2 uses DeepSeek-V3's MLA and MoE design with 384 experts"),
    "llama4": ("meta-llama/Llama-3.1-70B", "Llama-4 adds MoE layers; its own config.json models them"),
    "qwen2": ("Qwen/Qwen3-32B", "a dense GQA model of similar shape"),
    "mistral": ("mistralai/Mixtral-8x7B-v0.1", "the bundled Mistral model"),
    "glm": ("Qwen/Qwen3-235B-A22B", "a MoE model of similar size"),
    "gemma": ("Qwen/Qwen3-32B", "a dense GQA model of similar shape"),
}


def _strip_release(name: str) -> tuple[str, DType | None]:
    """The squashed short name without org, Meta- prefix and release suffixes, and the format a suffix set."""
    short = name.strip().lower().rsplit("/", 1)[-1]
    short = re.sub(r"^meta-", "", short)
    parts = [p for p in re.split(r"[\s._-]+", short) if p]
    suffixes = dict(_SUFFIXES)
    formats = [suffixes[p] for p in parts[1:] if suffixes.get(p)]
    parts = parts[:1] + [p for p in parts[1:] if p not in suffixes]
    dtype = formats[0] if formats else None
    return "".join(parts), dtype


def resolve_alias(name: str) -> tuple[str, DType | None] | None:
    """The bundled model whose architecture ``name`` shares, and the weight format its name implies
    (``-FP8`` → fp8); None when ``name`` is no known alias.

    >>> resolve_alias("deepseek-ai/DeepSeek-R1")
    ('deepseek-ai/DeepSeek-V3', None)
    >>> resolve_alias("meta-llama/Meta-Llama-3.1-70B-Instruct-FP8")
    ('meta-llama/Llama-3.1-70B', 'fp8')
    """
    squashed, dtype = _strip_release(name)
    if squashed in _SAME_ARCHITECTURE:
        return _SAME_ARCHITECTURE[squashed], dtype
    for repo in bundled_models():
        if _strip_release(repo)[0] == squashed:
            return repo, dtype
    return None


def checkpoint_parts(name: str) -> dict[WeightComponent, DType]:
    """The parts the published checkpoint ``name`` stores apart from the format its name says ({} for most).

    >>> checkpoint_parts("nvidia/DeepSeek-R1-FP4")["attention"], checkpoint_parts("deepseek-ai/DeepSeek-R1")
    ('bf16', {})
    """
    return dict(_CHECKPOINT_PARTS.get(name.strip().lower(), {}))


def alias_note(name: str) -> str | None:
    """One line saying that ``name`` is planned as another bundled model, or None when it is a bundled name."""
    if name.strip().lower() in {r.lower() for r in bundled_models()} or "/" in name and Path(name).exists():
        return None
    found = resolve_alias(name)
    if found is None:
        return None
    repo, dtype = found
    same = _strip_release(repo)[0] == _strip_release(name)[0]
    if same and dtype is None and "/" not in name and name.strip().lower() == repo.split("/")[1].lower():
        return None
    what = "a release of" if same else "same architecture as"
    fmt = f", weights in {dtype} as its name says" if dtype else ""
    parts = ", ".join(f"{part} {part_dtype}" for part, part_dtype in checkpoint_parts(name).items())
    fmt += f" except {parts}, as the checkpoint stores them" if parts else ""
    return f"model '{name}' planned as {repo} ({what} it{fmt})"


def not_bundled_fix(name: str, suggestions: list[str]) -> str:
    """The fix for an unknown model: the closest bundled one, and how to plan the model itself."""
    squashed = _strip_release(name)[0]
    family = next((f for f in _CLOSEST if squashed.startswith(f)), None)
    if family:
        repo, why = _CLOSEST[family]
        closest = f"the closest bundled model is {repo} ({why})"
    elif suggestions:
        closest = f"closest bundled models: {', '.join(suggestions)}"
    else:
        closest = f"bundled models: {', '.join(bundled_models())}"
    return f"'{name}' is not bundled; {closest}; to plan it exactly, pass the path of its config.json as the model"
