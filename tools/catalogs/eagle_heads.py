"""The EAGLE-3 head that ``--spec eagle:K`` drafts with: its shapes, read from its ``config.json``.

``eagle`` means EAGLE-3 (Li et al., arXiv 2503.01840), the head all three engines load from the exported commands
(vLLM ``"method": "eagle3"``, SGLang ``EAGLE3``, TensorRT-LLM ``Eagle3``). As vLLM (``llama_eagle3.py`` and its
``EagleProposer``) and SGLang (``llama_eagle3.py``) run it, the head is one Llama decoder layer with:

* ``fc``, a replicated projection ``3 h_target -> h`` that fuses the target's hidden states from three of its layers
  (a low, a middle and a high one: vLLM's default ``(2, L // 2, L - 3)``), which the target must therefore output
  beside its last one. It runs once a step, on the first draft pass: vLLM's proposer calls
  ``combine_hidden_states`` before that pass only, and SGLang applies ``fc`` only when the hidden input is wider
  than the embedding; later passes feed the head's own output hidden state back;
* attention whose QKV projection reads the token's embedding concatenated with the hidden state (``2 h`` wide),
  over a KV cache of its own;
* a dense FFN of the head's own ``intermediate_size``;
* its own LM head over a reduced draft vocabulary, ``draft_vocab_size`` rows (a ``d2t`` table maps draft ids to
  target ids), vocabulary-parallel over the tensor-parallel group (``ParallelLMHead``). The embedding is the
  target's: the public heads ship none, and vLLM skips ``embed_tokens`` when a checkpoint lacks it.

Which head is priced, in this order:

1. ``eagle:HEAD:K``: HEAD a head's ``config.json`` or the folder holding it, or the ``head`` id of a bundled entry;
2. the head bundled for the target (``tools/data/eagle_heads.yaml``, each entry citing the config it copies);
3. otherwise an assumed head: one block of the target's own width and a full-vocabulary LM head, which is what all
   three engines build from a head config without ``draft_vocab_size`` (vLLM's ``Eagle3LlamaForCausalLM`` and
   TensorRT-LLM's ``_ensure_draft_vocab_size`` default it to ``vocab_size``; SGLang then loads the target's LM
   head). It is the dearest head of that width, so the plan never counts on a saving it was not shown; the plan's
   notes say it was assumed and how to name the real head.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from shardplan.contracts.model import ModelSpec
from shardplan.errors import InputError
from shardplan.reading import parse_json_text, read_text
from shardplan.text import counted, one_line
from shardplan.tools.catalogs.models import model_from_config

__all__ = ["EagleHead", "eagle_head", "bundled_heads", "AUX_LAYERS"]

AUX_LAYERS = 3
"""Target layers whose hidden states ``fc`` fuses (``fc`` is ``3 * target_hidden_size`` wide in vLLM and SGLang)."""


@dataclass(frozen=True)
class EagleHead:
    """An EAGLE-3 head's network and where its shapes came from."""

    network: ModelSpec
    """One decoder layer of the head's width; ``vocab_size`` is the draft vocabulary, the rows of its own LM head."""
    target_hidden: int
    """Width of each target hidden state ``fc`` fuses (the target's ``hidden_size``)."""
    source: str
    """Where the shapes came from, for the plan's notes."""
    weights: str | None
    """Where an engine loads the head (a folder or hub id) when the request named it; None otherwise."""
    assumed: bool = False
    """Whether no config gave the head: the target's width and a full-vocabulary LM head were assumed."""

    @property
    def fuse_width(self) -> int:
        """Input width of ``fc``: the target's hidden states from :data:`AUX_LAYERS` layers."""
        return AUX_LAYERS * self.target_hidden

    @property
    def qkv_input(self) -> int:
        """Input width of the layer's QKV projection: the embedding and the hidden state side by side."""
        return 2 * self.network.hidden_size

    def describe(self) -> str:
        """One line for the plan's notes: the head's shapes and their source."""
        net = self.network
        attention = ("the target's MLA attention" if net.mla is not None else
                     f"{net.num_attention_heads} query and {net.num_kv_heads} KV heads, QKV over embedding and hidden "
                     f"state, {self.qkv_input} wide")
        text = (f"EAGLE-3 head: 1 layer of width {net.hidden_size} ({attention}), "
                f"fc {self.fuse_width} -> {net.hidden_size} on the first pass, its own LM head over "
                f"{net.vocab_size:,} draft tokens; {self.source}")
        if self.assumed:
            text += ("; name the head you will serve with --spec eagle:HEAD:K (its config.json or folder) to price "
                     "its own shapes, a reduced draft vocabulary among them")
        return text


@lru_cache(maxsize=1)
def bundled_heads() -> dict[str, dict[str, Any]]:
    """The bundled heads, keyed by the bundled target repository id they draft for.

    >>> bundled_heads()["meta-llama/Llama-3.1-8B"]["config"]["draft_vocab_size"]
    32000
    """
    import yaml

    raw = yaml.safe_load((resources.files("shardplan.tools") / "data" / "eagle_heads.yaml").read_text())
    heads: dict[str, dict[str, Any]] = raw["heads"]
    return heads


_HEAD_FIX = ("give the head's config.json or its folder (--spec eagle:PATH:K), or leave it out to price the head "
             "bundled for the model (Llama-3.1-8B, Llama-3.1-70B) or one of the model's own width")


@lru_cache(maxsize=16)
def _head_config(name: str) -> tuple[dict[str, Any], str, str]:
    """The config, a description of its source and where its weights load from, for a head the request named."""
    for entry in bundled_heads().values():
        if entry.get("head") and str(entry["head"]).lower() == name.strip().lower():
            return entry["config"], entry["source"], str(entry["head"])
    path = Path(name).expanduser()
    folder = path if path.is_dir() else path.parent
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise InputError(f"--spec eagle:{one_line(name, 120)}:K: no EAGLE-3 head config at {one_line(name, 120)}",
                         field="spec", fix=_HEAD_FIX)
    what = f"EAGLE-3 head config {one_line(name, 120)}"
    config = parse_json_text(read_text(path, what=what, field="spec", fix=_HEAD_FIX), what=what, field="spec")
    if not isinstance(config, dict):
        raise InputError(f"{what} is not a JSON object", field="spec", fix=_HEAD_FIX)
    return config, f"read from {one_line(name, 120)}", str(folder)


def _from_config(model: ModelSpec, config: dict[str, Any], source: str, weights: str | None) -> EagleHead:
    """The head ``config`` describes, checked against the target ``model`` it drafts for."""
    what = f"the EAGLE-3 head ({source})"
    layers = config.get("num_hidden_layers", 1)
    if layers != 1:
        raise InputError(f"{what} has {layers} decoder layers; shardplan models the one-layer heads the EAGLE-3 "
                         "authors and SpecForge publish", field="spec", fix=_HEAD_FIX)
    target_hidden = config.get("target_hidden_size") or config.get("hidden_size")
    if target_hidden != model.hidden_size:
        raise InputError(f"{what} fuses hidden states {target_hidden} wide, but {model.name}'s are "
                         f"{model.hidden_size}: it was trained for another model", field="spec", fix=_HEAD_FIX)
    if config.get("vocab_size") != model.vocab_size:
        raise InputError(f"{what} maps its drafts into a vocabulary of {counted(config.get('vocab_size'), 'token')}, "
                         f"not "
                         f"{model.name}'s {model.vocab_size:,}: the target could not verify them", field="spec",
                         fix=_HEAD_FIX)
    draft_vocab = config.get("draft_vocab_size") or model.vocab_size
    if not isinstance(draft_vocab, int) or not 1 <= draft_vocab <= model.vocab_size:
        raise InputError(f"{what}: draft_vocab_size {draft_vocab!r} is not a whole number from 1 to the target's "
                         f"{counted(model.vocab_size, 'token', spec=',')}", field="spec", fix=_HEAD_FIX)
    if not config.get("draft_vocab_size"):
        source += " (no draft_vocab_size: the engines then use the full vocabulary, and so does the price)"
    plain = model_from_config({**config, "model_type": "llama"}, name="EAGLE-3 head", kv_dtype=model.kv_dtype)
    network = plain.model_copy(update={"name": f"{model.name} (EAGLE-3 head)", "vocab_size": draft_vocab,
                                       "tie_word_embeddings": False, "warnings": []})
    return EagleHead(network, model.hidden_size, source, weights)


def _assumed(model: ModelSpec) -> EagleHead:
    """A head of the target's own width, attention kind and dense FFN, with a full-vocabulary LM head."""
    network = model.model_copy(
        update={
            "name": f"{model.name} (EAGLE-3 head, assumed)",
            "num_layers": 1,
            "layer_types": ["full"],
            "moe": None,
            "mtp_layers": 0,
            "tie_word_embeddings": False,
            "warnings": [],
        }
    )
    source = (f"assumed, no head is bundled for {model.name}: the target's width and dense FFN, and a full "
              f"{model.vocab_size:,}-token LM head (what the engines build when a head's config gives no "
              "draft_vocab_size)")
    return EagleHead(network, model.hidden_size, source, None, assumed=True)


def eagle_head(model: ModelSpec, head: str | None) -> EagleHead:
    """The EAGLE-3 head drafting for ``model``: the one ``head`` names, else the bundled one, else an assumed one.

    Raises:
        InputError: field ``spec``: a named head that cannot be read, has several layers, or was trained for a
            model of another hidden width or vocabulary.
    """
    if head is not None:
        config, source, weights = _head_config(head)
        return _from_config(model, config, source, weights)
    entry = bundled_heads().get(model.name)
    if entry is None:
        return _assumed(model)
    named = f"bundled for {model.name}" + (f" ({entry['head']})" if entry.get("head") else "")
    return _from_config(model, entry["config"], f"{named}: {entry['source']}", None)
