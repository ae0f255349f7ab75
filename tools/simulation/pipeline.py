"""First tokens still in the pipeline: why a sequence sits out a step under pipeline parallelism.

An engine keeps one batch in flight per pipeline stage (vLLM's virtual engines) and a sequence in one of them at a
time: its next token is computed from the last. A round of the replica lasts the mean of its lanes' passes
(:meth:`~shardplan.tools.serving.steps.StepPricer.step_s`), but the lane carrying a prompt's last chunk takes its
whole pass, ``chunk_pass_s``, to bring the first token out, which may be after the round ends. Until then the
sequence takes no part in a step; when no other sequence can run, the scheduler waits for the earliest such token.
Without pipeline stages (one lane) the first token is out when the step ends and nothing is ever held.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.tools.simulation.admission import GENERATED, ID

__all__ = ["FirstTokens"]


@dataclass
class FirstTokens:
    """The first tokens a scheduler's steps sent down the pipeline, as far as they hold sequences back: the latest
    time one comes out after the step that carried it ended."""

    latest: float = 0.0

    def sent(self, out: float, end: float) -> None:
        """A first token comes out at ``out`` from a step ending at ``end``.

        >>> tokens = FirstTokens()
        >>> tokens.sent(1.0, 2.0), tokens.pending(0.0)
        (None, False)
        >>> tokens.sent(3.0, 2.0), tokens.pending(2.0), tokens.pending(3.0)
        (None, True, False)
        """
        if out > end:
            self.latest = max(self.latest, out)

    def pending(self, clock: float) -> bool:
        """Whether a step from ``clock`` may find a sequence whose first token is not out yet."""
        return self.latest > clock

    def held(self, state: np.ndarray, first_token: np.ndarray, clock: float) -> np.ndarray | bool:
        """Which sequences of the running set ``state`` sit out a step from ``clock`` (False when none can):
        those that emitted their first token (``first_token``, per request) and not yet out of the pipeline."""
        if not self.pending(clock):
            return False
        return (state[GENERATED] > 0) & (first_token[state[ID]] > clock)
