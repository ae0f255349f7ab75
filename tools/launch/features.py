"""The engine features a plan's request turns on, as every engine mapping needs them: speculative decoding (who
drafts, how many tokens, where the drafter's weights are) and prefix caching (the hit rate the plan assumed).

Engine-independent: :mod:`.vllm`, :mod:`.sglang` and :mod:`.trtllm` turn a :class:`Drafting` into their own flags.

An EAGLE-3 head is not part of the model's checkpoint and shardplan bundles none of its weights (only the shapes of a
few public heads, :mod:`shardplan.tools.catalogs.eagle_heads`), so a plan that speculates with one needs its folder
or hub id at export time: the head its request named (``--spec eagle:HEAD:K``), or ``shardplan export --spec-model
PATH``; without either the export stops with an error naming the option rather than print a command that cannot
start. The notes name the head the plan priced, and say so when the head given is not that one. A draft model named
in the request by a bundled name is served from its Hugging Face id; ``--spec-model`` replaces it (a local copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import Plan
from shardplan.contracts.speculation import Speculation, speculation_text
from shardplan.errors import InputError
from shardplan.text import one_line
from shardplan.tools.catalogs.drafters import check_drafter, drafter_for, mtp_layers
from shardplan.tools.catalogs.eagle_heads import EagleHead, eagle_head
from shardplan.tools.catalogs.models import resolve_model_name

__all__ = ["Drafting", "drafting", "prefix_hit", "SPEC_MODEL_FIX"]

SPEC_MODEL_FIX = ("give --spec-model PATH: the EAGLE head's folder or Hugging Face id, trained for this model (an "
                  "EAGLE-3 head, which all three engines load); plan with --spec eagle:PATH:K to price that head")


@dataclass(frozen=True)
class Drafting:
    """Speculative decoding as the engines are told it."""

    spec: Speculation
    drafter: str | None
    """The drafter's weights (EAGLE head or draft model, a folder or hub id); None for MTP, whose layers are in the
    model's own checkpoint."""
    mtp_layers: int
    """MTP modules in the model's checkpoint (``num_nextn_predict_layers``)."""
    model_type: str
    """The target model's ``model_type`` (``deepseek_v3``): the engines support MTP per model family."""
    head_note: str | None = None
    """For an EAGLE-3 head: the head the plan priced (its shapes and their source), and whether the one loaded is it."""


def _draft_weights(name: str) -> str:
    """Where the engines load a draft model named ``name`` in the request: a bundled model's Hugging Face id, the
    folder of a ``config.json`` path (its weights sit beside it), or the name as written (a hub id)."""
    if name.endswith(".json"):
        return str(Path(name).parent)
    try:
        return resolve_model_name(name)
    except InputError:
        return name


def drafting(plan: Plan, model: ModelSpec, spec_model: str | None = None) -> Drafting | None:
    """The speculative decoding ``plan``'s request asks for, with the drafter's weights (None without speculation).

    Raises:
        InputError: field ``spec_model``: an EAGLE plan without ``spec_model``, or ``spec_model`` given where nothing
            loads it (no speculation, or MTP); field ``spec``: MTP on a model without MTP layers.
    """
    spec = plan.request.workload.speculation
    given = spec_model.strip() if spec_model and spec_model.strip() else None
    if spec is None or spec.method == "mtp":
        if given is not None:
            why = "the plan does not speculate" if spec is None else "MTP drafts with the model's own layers"
            raise InputError(f"--spec-model {one_line(given, 120)} has nothing to load: {why}", field="spec_model",
                             fix="leave out --spec-model (it names an EAGLE head or a draft model)")
        if spec is None:
            return None
    check_drafter(model, spec)  # a plan written before the check, or edited by hand
    priced = drafter_for(model, spec).head
    if given is None and priced is not None:
        given = priced.weights  # the head the request named (its folder or hub id)
    if spec.method == "eagle" and given is None:
        raise InputError(f"the plan speculates with an EAGLE head ({speculation_text(spec)}), which is not part of "
                         f"{model.name}'s checkpoint and is not bundled", field="spec_model", fix=SPEC_MODEL_FIX)
    drafter = None
    if spec.method != "mtp":
        drafter = given if given is not None else _draft_weights(spec.draft_model or "")
    return Drafting(spec=spec, drafter=drafter, mtp_layers=mtp_layers(model), model_type=model.architecture,
                    head_note=_head_note(model, spec, priced, drafter) if priced is not None else None)


def _head_note(model: ModelSpec, spec: Speculation, priced: EagleHead, loaded: str | None) -> str:
    """The head the plan priced, and a warning when the head the command loads is a readable config of other
    shapes (a hub id cannot be read here, so it is taken at its word)."""
    note = priced.describe()
    if loaded is None or loaded == priced.weights:
        return note
    try:
        other = eagle_head(model, loaded)
    except InputError:
        return note
    mine, theirs = priced.network, other.network
    if (mine.hidden_size, mine.intermediate_size, mine.vocab_size) != (
        theirs.hidden_size, theirs.intermediate_size, theirs.vocab_size
    ):
        note += (f"; the head loaded, {one_line(loaded, 120)}, has other shapes (width {theirs.hidden_size}, FFN "
                 f"{theirs.intermediate_size}, {theirs.vocab_size:,} draft tokens): plan again with --spec "
                 f"eagle:{one_line(loaded, 120)}:{spec.draft_tokens} to price it")
    return note


def prefix_hit(plan: Plan) -> float:
    """The share of prompt tokens the plan assumed found in the prefix cache: its cost report's (which may come from
    a trace or a simulation) where it has one, else the request's."""
    effect = plan.dag_cost.prefix_cache if plan.dag_cost is not None else None
    return effect.hit if effect is not None else plan.request.workload.prefix_hit
