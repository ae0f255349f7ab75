"""The drafter of speculative decoding as a network of its own: what one draft pass runs, and what it holds.

A speculative decode step runs the target once over each sequence's last token and its drafts (the verify pass),
samples the accepted ones, and then drafts the next step's tokens with ``draft_tokens`` (K) passes of the drafter,
one after another, each feeding the next (vLLM V1's proposer runs its drafter after the rejection sampler of the
same step; TensorRT-LLM's MTP runs "verification, then a new draft stage" inside one engine forward, its blog on
DeepSeek-R1 MTP). The drafter is:

* ``mtp``: the model's own multi-token-prediction layers (``num_nextn_predict_layers``). Each is a transformer block
  of the model's own kind (DeepSeek-V3: MLA and MoE, like its last layer) after a projection ``eh_proj`` that fuses
  the token's embedding with the target's hidden state (``2 h -> h``); the embedding and the LM head are the
  target's (TensorRT-LLM: "the embedding layer and output head in MTP modules are shared with the main model").
  With more draft tokens than MTP layers the engines reuse the layers in turn: vLLM's DeepSeek MTP picks layer
  ``spec_step_idx % num_mtp_layers``, and TensorRT-LLM's default "MTP Eagle" path calls its one MTP module K times
  with one KV cache. So K passes, over ``min(K, layers)`` distinct layers held in memory with their KV caches.
* ``eagle``: an EAGLE-3 head (:mod:`.eagle_heads`), what the exported commands load: one Llama decoder layer whose
  QKV projection reads the token's embedding beside the hidden state (``2 h`` wide), after an ``fc`` that fuses three
  of the target's hidden states (``3 h -> h``) on the first pass only, with its own LM head over a reduced draft
  vocabulary (the network's ``vocab_size``) and the target's embedding.
* ``draft``: a separate, smaller model with its own embedding, layers and head, run with the target's tensor
  parallelism (vLLM requires the draft's TP to equal the target's) on the GPUs of the target's last stage.

The first pass of a step runs over every token the verify pass scheduled (vLLM V1 drafts from all of them, then
K - 1 passes over one token per sequence), so a prompt chunk in the step also passes through the drafter: that is
the drafter's prefill, which builds its own KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from shardplan.contracts.arithmetic.model_math import params_total
from shardplan.contracts.common import DType
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.speculation import Speculation, speculation_text
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.catalogs.eagle_heads import EagleHead, eagle_head
from shardplan.tools.catalogs.models import load_model

__all__ = ["Drafter", "drafter_for", "drafter_layout", "mtp_layers", "check_drafter", "no_mtp_layers"]


@dataclass(frozen=True)
class Drafter:
    """What one draft pass runs, and what the drafter keeps on a GPU."""

    speculation: Speculation
    network: ModelSpec
    """The network of one pass as a model: one block for MTP (embedding and LM head are the target's) and EAGLE-3
    (the embedding is the target's; ``vocab_size`` is its own LM head's draft vocabulary), the whole draft model
    for ``draft``."""
    fuse_width: int
    """Input width of the projection that fuses hidden states before the block (MTP's ``eh_proj`` over embedding and
    hidden state, ``2 h``; EAGLE-3's ``fc`` over three target hidden states, ``3 h``); 0 for a draft model."""
    held_layers: int
    """Distinct drafter blocks held in memory, each with its own KV cache (MTP: the checkpoint's MTP layers that
    the K passes use; EAGLE: 1; a draft model: all its layers, counted by its own spec)."""
    head: EagleHead | None = None
    """The EAGLE-3 head (``eagle`` only): its shapes and where they came from."""

    @property
    def shares_head(self) -> bool:
        """Whether the drafter reads the target's LM head instead of holding its own (MTP only: an EAGLE-3 head
        holds one over its draft vocabulary, a draft model all its weights)."""
        return self.speculation.method == "mtp"

    @property
    def qkv_input(self) -> int:
        """Input width of the drafter's QKV projections: an EAGLE-3 layer's reads embedding and hidden state side by
        side (``2 h``); the others read the residual stream (``h``)."""
        return self.head.qkv_input if self.head is not None else self.network.hidden_size

    @property
    def fuses_every_pass(self) -> bool:
        """Whether every pass runs the fusing projection: MTP's ``eh_proj`` fuses each pass's embedding and hidden
        state; EAGLE-3's ``fc`` fuses the target's hidden states once, on the first pass."""
        return self.speculation.method == "mtp"

    @property
    def passes(self) -> int:
        """Draft passes per step, one per draft token, one after another."""
        return self.speculation.draft_tokens


def _mtp_block(model: ModelSpec) -> ModelSpec:
    """``model`` cut down to one block of its last layer's kind, as its MTP layers are."""
    moe = None if model.moe is None else model.moe.model_copy(update={"first_dense_layers": 0})
    formats = {part: dtype for part, dtype in model.weight_formats.items() if part != "mtp"}
    # A checkpoint may store its MTP layers apart from the main ones (NVIDIA's FP4 DeepSeek-R1 keeps them in bf16,
    # TensorRT-LLM's DeepSeek-R1 B200 blog): the whole block, experts included, is then in that format; the LM head
    # a pass ends in stays the target's.
    mtp_format = model.weight_formats.get("mtp")
    head = {"lm_head": model.weight_format("lm_head")}
    return model.model_copy(
        update={
            "name": f"{model.name} (MTP layer)",
            "num_layers": 1,
            "layer_types": [model.layer_types[-1]],
            "moe": moe,
            "mtp_layers": 0,
            "warnings": [],
            **({"weight_dtype": mtp_format, "expert_dtype": None, "weight_formats": head} if mtp_format
               else {"weight_formats": formats}),
        }
    )


@lru_cache(maxsize=32)
def _draft_model(name: str, weight_dtype: DType, kv_dtype: DType) -> ModelSpec:
    """The draft model, read once, stored in the target's formats (engines load it so)."""
    return load_model(name, weight_dtype=weight_dtype, kv_dtype=kv_dtype)


def no_mtp_layers(name: str) -> str:
    """Why MTP cannot draft for model ``name``, in words."""
    return f"{name} has no MTP layers (multi-token prediction: its config sets no num_nextn_predict_layers)"


def drafter_for(model: ModelSpec, speculation: Speculation) -> Drafter:
    """The drafter ``speculation`` names for ``model``.

    Raises:
        InputError: ``mtp`` on a model whose config ships no MTP layers (field ``spec``), an EAGLE-3 head that
            cannot be read or was trained for another model (:func:`~.eagle_heads.eagle_head`), or a draft model
            that is not bundled or readable, or whose vocabulary differs from the target's (its drafts could not
            be verified token by token).
    """
    method = speculation.method
    if method == "mtp":
        if model.mtp_layers < 1:
            raise InputError(
                f"--spec {speculation_text(speculation)}: {no_mtp_layers(model.name)}",
                field="spec",
                fix=f"use --spec eagle:{speculation.draft_tokens} (an EAGLE-3 head) or "
                f"--spec draft:MODEL:{speculation.draft_tokens} (a smaller draft model of the same vocabulary)",
            )
        held = min(speculation.draft_tokens, model.mtp_layers)
        return Drafter(speculation, _mtp_block(model), 2 * model.hidden_size, held)
    if method == "eagle":
        head = eagle_head(model, speculation.head)
        return Drafter(speculation, head.network, head.fuse_width, 1, head)
    assert speculation.draft_model is not None
    draft = _draft_model(speculation.draft_model, model.weight_dtype, model.kv_dtype)
    if draft.vocab_size != model.vocab_size:
        raise InputError(
            f"--spec {speculation_text(speculation)}: the draft model's vocabulary "
            f"({counted(draft.vocab_size, 'token', spec=',')}) "
            f"is not the target's ({model.vocab_size:,}), so its drafts cannot be verified token by token",
            field="spec",
            fix="draft with a model of the target's family (e.g. llama-3.1-8b for llama-3.1-70b)",
        )
    return Drafter(speculation, draft, 0, draft.num_layers)


def drafter_layout(layout: PhaseStrategy, drafter: Drafter) -> PhaseStrategy:
    """The layout a draft pass runs on: the target's tensor parallelism and attention groups on the GPUs of its
    last pipeline stage (vLLM places MTP layers with the last stage's; a draft model runs with the target's TP),
    one microbatch, and expert parallelism only where the drafter has experts."""
    return layout.model_copy(
        update={
            "dp": 1,
            "pp": 1,
            "mb": 1,
            "layer_split": None,
            "ep": layout.ep if drafter.network.is_moe else 1,
        }
    )


def mtp_layers(model: ModelSpec) -> int:
    """MTP modules in ``model``'s checkpoint (``num_nextn_predict_layers``; 0 when its config has none).

    >>> mtp_layers(load_model("deepseek-v3")), mtp_layers(load_model("llama-3.1-8b"))
    (1, 0)
    """
    return model.mtp_layers


def check_drafter(model: ModelSpec, speculation: Speculation | None) -> None:
    """Refuse a speculation ``model`` cannot run (MTP without MTP layers, a draft model of another vocabulary or
    no smaller than ``model``) before any work starts.

    Raises:
        InputError: field ``spec`` (see :func:`drafter_for`).
    """
    if speculation is None:
        return
    drafter = drafter_for(model, speculation)
    if speculation.method == "draft":
        _check_smaller(model, drafter.network, speculation)


def _check_smaller(model: ModelSpec, draft: ModelSpec, speculation: Speculation) -> None:
    """Refuse a draft model no smaller than the target. Checked on the request's own models rather than in
    :func:`drafter_for`, which may price a drafter for a target trimmed to a few layers."""
    drafted, target = params_total(draft), params_total(model)
    if drafted >= target:
        # Speculative decoding pays off only when drafting is cheaper than the target's own step: the draft
        # model is the "smaller, faster approximation model" of Leviathan et al., ICML 2023 (arXiv:2211.17192).
        raise InputError(
            f"--spec {speculation_text(speculation)}: the draft model ({drafted / 1e9:.1f} B parameters) is not "
            f"smaller than the target ({target / 1e9:.1f} B), so drafting would cost more than decoding",
            field="spec",
            fix="draft with a smaller model of the target's family (e.g. llama-3.1-8b for llama-3.1-70b)",
        )
