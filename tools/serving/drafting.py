"""The drafting part of a speculative decode step: K draft passes of the drafter, one after another.

An engine step under speculative decoding runs the target over each running sequence's last token and its K drafts
(the verify pass: ``D (K + 1)`` tokens of linear work, and attention of ``K + 1`` queries per sequence over one
read of its KV cache), samples the accepted tokens, and then drafts the next step's K tokens with the drafter
(:mod:`shardplan.tools.catalogs.drafters`): a first pass over every token the step scheduled (the ``D (K + 1)``
verified positions and any prompt chunk: vLLM V1 drafts from all of them, and a prompt's pass fills the drafter's own
KV cache), then ``K - 1`` passes of one token per sequence. Each pass is the drafter's own network on its own layout,
priced like a step of the target (its linear work, its attention over the context), plus the projection that fuses
hidden states before it: MTP's ``eh_proj`` on every pass, an EAGLE-3 head's ``fc`` over three of the target's hidden
states on the first pass only (its later passes feed the head's own hidden state back). An EAGLE-3 head's linear work
is its own network's: a QKV projection over embedding and hidden state (``2 h``) and its own LM head over the draft
vocabulary, not the target's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from shardplan.tools.catalogs.drafters import Drafter

__all__ = ["DraftCurves", "DraftPricer"]


class DraftCurves(Protocol):
    """The drafter network's step prices, as :class:`~.steps.StepPricer` gives them on the drafter's layout."""

    def linear_s(self, tokens: float) -> float: ...

    def decode_attention_s(self, sequences: float) -> float: ...

    def verify_attention_s(self, sequences: float) -> float: ...

    def prefill_attention_s(self, tokens: float) -> float: ...

    def fuse_s(self, tokens: float) -> float: ...

    def prefill_s(self, prompts: int) -> float: ...


@dataclass(frozen=True)
class DraftPricer:
    """Seconds the drafter adds to a step, from its network's own step prices."""

    drafter: Drafter
    network: DraftCurves

    def first_pass_s(self, sequences: float, prompt_tokens: float) -> float:
        """The first draft pass: over the ``K + 1`` verified positions of ``sequences`` sequences (their attention
        reads each sequence's drafter KV once) and over a prompt chunk of ``prompt_tokens`` tokens."""
        verify = self.drafter.speculation.verify_tokens
        tokens = sequences * verify + prompt_tokens
        return (
            self.network.linear_s(tokens)
            + self.network.fuse_s(tokens)
            + self.network.verify_attention_s(sequences)
            + self.network.prefill_attention_s(prompt_tokens)
        )

    def next_pass_s(self, sequences: float) -> float:
        """One of the ``K - 1`` later passes: one token per sequence, attending to its context (fused again only by
        a drafter that fuses every pass)."""
        fuse = self.network.fuse_s(sequences) if self.drafter.fuses_every_pass else 0.0
        return self.network.linear_s(sequences) + fuse + self.network.decode_attention_s(sequences)

    def draft_s(self, sequences: float, prompt_tokens: float = 0.0) -> float:
        """The drafting of one step carrying ``sequences`` decoding sequences and a prompt chunk of
        ``prompt_tokens`` tokens: the first pass, then the K - 1 others one after another."""
        if sequences <= 0 and prompt_tokens <= 0:
            return 0.0
        later = (self.drafter.passes - 1) * self.next_pass_s(sequences) if sequences > 0 else 0.0
        return self.first_pass_s(sequences, prompt_tokens) + later

    def prefill_s(self, prompts: int, prompt_tokens: int) -> float:
        """The drafter's pass over ``prompts`` whole prompts (``prompt_tokens`` tokens in all) prefilled together
        under static batching."""
        return self.network.prefill_s(prompts) + self.network.fuse_s(prompt_tokens)
