"""Speculative decoding as a request states it: how drafts are made, how many, and how many are accepted.

A speculative decode step drafts ``draft_tokens`` tokens per sequence (DeepSeek's multi-token-prediction
layers, an EAGLE-3 head, or a smaller draft model), then runs the target model once over each sequence's last
token plus its drafts (``draft_tokens + 1`` tokens, a small prefill-like verify step), and keeps the accepted
drafts plus the one token the verify step produces itself. ``accepted`` is the mean number of accepted drafts
per step: it depends on the model, the draft and the traffic, so it is always given, never assumed. Engines
report it: vLLM's ``mean acceptance length`` and SGLang's ``accept length`` count the bonus token too (subtract
one); TensorRT-LLM's ``acceptance rate`` is per draft token (multiply by ``draft_tokens``, for one draft).

>>> spec = parse_speculation("mtp:2", 1.4)
>>> spec.method, spec.draft_tokens, spec.tokens_per_step
('mtp', 2, 2.4)
>>> parse_speculation("draft:llama-3.2-1b:4", 2.5).draft_model
'llama-3.2-1b'
>>> parse_speculation("eagle:/heads/eagle3-8b:3", 2.0).head
'/heads/eagle3-8b'
>>> speculation_text(spec)
'mtp:2'
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from shardplan.contracts.common import Contract
from shardplan.errors import InputError

__all__ = [
    "SpecMethod", "Speculation", "parse_speculation", "speculation_option", "speculation_text", "MAX_DRAFT_TOKENS",
]

SpecMethod = Literal["mtp", "eagle", "draft"]
"""How drafts are made: ``mtp`` the model's own multi-token-prediction layers (``num_nextn_predict_layers`` in its
config), ``eagle`` an EAGLE-3 head (one decoder layer on three of the target's hidden states, with its own
small-vocabulary LM head: what the exported commands load), ``draft`` a separate model."""

MAX_DRAFT_TOKENS = 16
"""Engines verify a handful of drafts (vLLM and SGLang examples use 1 to 8); more is a typo."""

_SPEC_FIX = ("write --spec mtp:K, eagle:K, eagle:HEAD:K (HEAD: the EAGLE-3 head's config.json or folder) or "
             "draft:MODEL:K with K draft tokens per step, e.g. mtp:1")
_ACCEPT_FIX = (
    "give --spec-accept, the mean accepted draft tokens per step, from 0 up to K: read it from the engine "
    "(vLLM's and SGLang's mean acceptance length minus one)"
)


class Speculation(Contract):
    """Speculative decoding: the drafter, the draft tokens per step and the mean accepted per step."""

    model_config = ConfigDict(frozen=True)

    method: SpecMethod = Field(
        description="mtp (the model's MTP layers), eagle (an EAGLE-3 head) or draft (a model)."
    )
    draft_tokens: int = Field(ge=1, le=MAX_DRAFT_TOKENS, description="Draft tokens per sequence per step (K).")
    accepted: float = Field(
        ge=0,
        allow_inf_nan=False,
        description="Mean accepted draft tokens per step (A, 0 to K), as the engine reports it (acceptance length "
        "minus one); each step then emits A + 1 tokens per sequence.",
    )
    draft_model: str | None = Field(
        default=None, max_length=300,
        description="The draft model (bundled name or config.json path), method draft only.",
    )
    head: str | None = Field(
        default=None, max_length=300,
        description="The EAGLE-3 head priced (its config.json or folder, or a bundled head's id), method eagle only; "
        "without it the head bundled for the model, else one of the model's width with a full-vocabulary LM head.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Speculation:
        if self.accepted > self.draft_tokens:
            raise ValueError(f"accepted={self.accepted:g} is more than the {self.draft_tokens} draft tokens per step")
        if (self.method == "draft") != (self.draft_model is not None):
            raise ValueError("a draft model is named with method draft, and only there")
        if self.head is not None and self.method != "eagle":
            raise ValueError("an EAGLE-3 head is named with method eagle, and only there")
        return self

    @property
    def tokens_per_step(self) -> float:
        """Output tokens one verify step emits per sequence, on average: the accepted drafts plus its own."""
        return self.accepted + 1.0

    @property
    def verify_tokens(self) -> int:
        """Tokens per sequence the target model runs in a verify step: the last token and the drafts."""
        return self.draft_tokens + 1


def parse_speculation(text: str, accepted: float | None) -> Speculation:
    """``mtp:K``, ``eagle:K``, ``eagle:HEAD:K`` or ``draft:MODEL:K`` with the mean accepted draft tokens per step.

    Raises:
        InputError: a malformed method or count (field ``spec``), or no acceptance (field ``spec_accept``).

    >>> try:
    ...     parse_speculation("eagle:3", None)
    ... except InputError as error:
    ...     error.field
    'spec_accept'
    """
    parts = text.strip().split(":")
    method = parts[0].strip().lower()
    shapes = {"mtp": (2,), "eagle": (2, 3), "draft": (3,)}
    if method not in shapes or len(parts) not in shapes[method]:
        raise InputError(f"--spec={text!r} is not mtp:K, eagle:K, eagle:HEAD:K or draft:MODEL:K", field="spec",
                         fix=_SPEC_FIX)
    count = parts[-1].strip()
    # isascii: str.isdigit also accepts superscripts such as '²', which int() refuses.
    if not (count.isascii() and count.isdigit()) or len(count) > 3 or not 1 <= int(count) <= MAX_DRAFT_TOKENS:
        raise InputError(
            f"--spec={text!r}: the draft tokens per step must be a whole number from 1 to {MAX_DRAFT_TOKENS}",
            field="spec",
            fix=_SPEC_FIX,
        )
    if accepted is None:
        raise InputError(
            f"--spec {text} needs --spec-accept: the acceptance is measured, never assumed",
            field="spec_accept",
            fix=_ACCEPT_FIX,
        )
    named = parts[1].strip() if len(parts) == 3 else None
    if len(parts) == 3 and not named:
        raise InputError(f"--spec={text!r} names no {'draft model' if method == 'draft' else 'head'}", field="spec",
                         fix=_SPEC_FIX)
    if not 0 <= accepted <= int(count):  # NaN fails too
        raise InputError(f"--spec-accept={accepted!r} is not a number from 0 to the {count} draft tokens per step",
                         field="spec_accept", fix=_ACCEPT_FIX)
    return Speculation(method=method, draft_tokens=int(count), accepted=accepted,  # type: ignore[arg-type]
                       draft_model=named if method == "draft" else None, head=named if method == "eagle" else None)


def speculation_text(spec: Speculation) -> str:
    """The ``--spec`` text of ``spec`` (the acceptance is its own option)."""
    named = spec.draft_model or spec.head
    middle = f"{named}:" if named else ""
    return f"{spec.method}:{middle}{spec.draft_tokens}"


def speculation_option(spec: str | None, accepted: float | None) -> Speculation | None:
    """The speculation that ``--spec`` and ``--spec-accept`` give (None without ``--spec``).

    Raises:
        InputError: as :func:`parse_speculation`, and ``--spec-accept`` without ``--spec``.
    """
    if spec is None:
        if accepted is not None:
            raise InputError("--spec-accept was given without --spec", field="spec",
                             fix="add --spec mtp:K, eagle:K or draft:MODEL:K, or leave out --spec-accept")
        return None
    return parse_speculation(spec, accepted)
