"""How one scheduler's step shares its token budget among the running set, and which sequences sit the step out.

vLLM (V1) and TensorRT-LLM mix prompt chunks and decode tokens in one step: every running sequence asks for the
tokens it has not computed yet (one for a decoding sequence, under speculative decoding its ``K + 1`` verified
positions; the rest of its prompt for one being prefilled) and gets them in admission order while the budget
lasts. SGLang's scheduler (and vLLM's V0 engine without chunked prefill) composes a step of one kind: a *prefill*
step carries prompt tokens only, the decoding sequences sitting it out; a *decode* step carries one token for every
decoding sequence, the budget not counting them, and prompts wait for the next prefill step. A sequence whose first
token is still in the pipeline sits out any step (:mod:`.pipeline`).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np

from shardplan.tools.simulation.admission import COMPUTED, GENERATED, KNOWN

__all__ = ["StepKind", "Grants", "share_budget", "has_prompt_work"]

StepKind = Literal["prefill", "decode"]
"""What a step of SGLang's scheduler carries: prompt chunks, or one token per decoding sequence."""


class Grants(NamedTuple):
    """A step's share of the budget, one entry per running sequence in admission order."""

    need: np.ndarray
    """Tokens each has not computed yet."""
    decoding: np.ndarray
    """Which of them decode (one token left to compute, an output token already out)."""
    grant: np.ndarray
    """Tokens each computes in the step (a decoding sequence's one token, whatever it verifies)."""


def share_budget(state: np.ndarray, held: np.ndarray | bool, verify: int, budget: int,
                 only: StepKind | None = None) -> Grants:
    """Share ``budget`` tokens among the running set ``state`` (rows of :mod:`.admission`) in admission order;
    ``held``: the sequences whose first token is still in the pipeline (False: none); ``verify``: the budget a
    decoding sequence takes; ``only``: a step of one kind (the module docstring), None: a mixed step.

    >>> from shardplan.tools.simulation.admission import ROWS
    >>> state = np.zeros((ROWS, 3), dtype=np.int64)
    >>> state[KNOWN], state[COMPUTED], state[GENERATED] = [101, 500, 300], [100, 0, 0], [1, 0, 0]
    >>> [share_budget(state, False, 1, 400, only).grant.tolist() for only in (None, "prefill", "decode")]
    [[1, 399, 0], [0, 400, 0], [1, 0, 0]]
    """
    need = state[KNOWN] - state[COMPUTED]
    decoding = (need == 1) & (state[GENERATED] > 0)
    # A decoding sequence's one token is its K + 1 verified positions of the budget under speculation.
    cost = need + (verify - 1) * decoding if verify > 1 else need
    if held is not False:
        cost = np.where(held, 0, cost)
    if only == "prefill":
        cost = np.where(decoding, 0, cost)
    elif only == "decode":
        cost = np.where(decoding, cost, 0)
        budget = int(cost.sum())
    before = np.cumsum(cost) - cost
    room = np.maximum(budget - before, 0)
    grant = np.where(cost > need, (room >= cost).astype(need.dtype), np.minimum(need, room))
    # A sequence that sits the step out (held in the pipeline, or of the other kind) gets nothing.
    return Grants(need, decoding, np.where(cost > 0, grant, 0))


def has_prompt_work(state: np.ndarray) -> bool:
    """Whether some running sequence still has prompt tokens to compute: one without an output token yet, or one
    recomputing its sequence after a preemption (not a decoding sequence that a prefill step left out)."""
    return bool(((state[KNOWN] - state[COMPUTED] > 1) | (state[GENERATED] == 0)).any())
