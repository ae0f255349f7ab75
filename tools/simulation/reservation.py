"""SGLang's admission reservation: the KV cache a waiting request must find free before SGLang admits it.

SGLang's ``PrefillAdder`` (python/sglang/srt/managers/schedule_policy.py) admits a waiting request only while the
free KV cache holds its prompt and its whole output, capped at ``CLIP_MAX_NEW_TOKENS_ESTIMATION`` (4,096 tokens),
beyond a share of what the running requests have left to generate: each one's remaining output, capped alike,
times ``new_token_ratio``. The scheduler moves that ratio (python/sglang/srt/managers/scheduler.py):

* it starts at 0.7 (``default_init_new_token_ratio`` times ``--schedule-conservativeness``, 1.0 by default);
* each decode step lowers it by (0.7 - 0.098) / 600, down to 0.098 (``default_min_new_token_ratio_factor`` 0.14 of
  the start, reached after ``default_new_token_ratio_decay_steps`` 600 steps);
* it goes back to the start whenever the scheduler idles;
* a decode step that finds no room retracts requests, and the ratio then becomes what the remaining requests have
  decoded plus 20 steps each (``retract_decode_steps``), over their whole outputs, at most 1 (``retract_decode``).

So SGLang admits fewer requests than its KV cache holds prompts for, and retracts (preempts) less often than vLLM,
which admits on a prompt's blocks. The simulator takes each request's output length as its ``max_tokens``, as
benchmark clients send them (``ignore_eos``); a server whose clients ask for more than they get reserves more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardplan.tools.simulation.blocks import blocks_for

__all__ = ["CLIP_MAX_NEW_TOKENS", "Reservation", "request_blocks"]

CLIP_MAX_NEW_TOKENS = 4096
"""SGLang's cap on the output tokens it reserves for one request (``CLIP_MAX_NEW_TOKENS_ESTIMATION``)."""
_INIT_RATIO = 0.7
_MIN_RATIO_FACTOR = 0.14
_DECAY_STEPS = 600
_RETRACT_DECODE_STEPS = 20


def request_blocks(isl: int, osl: int, block_tokens: int) -> int:
    """Blocks a waiting request must find free: its prompt and its output, the output capped at 4,096 tokens.

    >>> request_blocks(1000, 8000, 16), request_blocks(1000, 100, 16)
    (319, 69)
    """
    return int(-(-(isl + min(osl, CLIP_MAX_NEW_TOKENS)) // block_tokens))


@dataclass
class Reservation:
    """One SGLang scheduler's ``new_token_ratio`` (the module docstring); ``conservativeness`` is
    ``--schedule-conservativeness``.

    >>> r = Reservation()
    >>> r.decay(300); round(r.ratio, 3)
    0.399
    >>> r.decay(10_000); round(r.ratio, 3)
    0.098
    >>> r.retracted(np.array([100, 300]), np.array([1000, 1000])); r.ratio
    0.22
    >>> r.held_back(np.array([0, 500]), np.array([8000, 1000]), 16)  # 0.22 x (4,096 + 500) tokens
    64
    """

    conservativeness: float = 1.0
    ratio: float = math.nan

    def __post_init__(self) -> None:
        self.reset()

    @property
    def start(self) -> float:
        return min(_INIT_RATIO * self.conservativeness, 1.0)

    @property
    def floor(self) -> float:
        return min(self.start * _MIN_RATIO_FACTOR, 1.0)

    @property
    def per_step(self) -> float:
        """How much one decode step lowers the ratio."""
        return (self.start - self.floor) / _DECAY_STEPS

    def reset(self) -> None:
        """The scheduler idles: the ratio goes back to its start."""
        self.ratio = self.start

    def decay(self, steps: int) -> None:
        """``steps`` decode steps ran."""
        self.ratio = max(self.ratio - steps * self.per_step, self.floor)

    def retracted(self, generated: np.ndarray, osl: np.ndarray) -> None:
        """A decode step retracted requests; ``generated`` and ``osl`` are those of the requests still running."""
        total = int(osl.sum())
        if total:
            self.ratio = min(1.0, (int(generated.sum()) + _RETRACT_DECODE_STEPS * int(generated.size)) / total)

    def held_back(self, generated: np.ndarray, osl: np.ndarray, block_tokens: int) -> int:
        """Blocks held back for the running requests' outputs: the ratio times what they have left (each capped)."""
        left = np.minimum(osl - generated, CLIP_MAX_NEW_TOKENS).clip(min=0)
        return int(-(-math.ceil(self.ratio * float(left.sum())) // block_tokens))

    def steps_to_admit(self, computed: np.ndarray, generated: np.ndarray, osl: np.ndarray, used: int, need: int,
                       room: int, block_tokens: int, most: int, emit: float = 1.0) -> int:
        """How many of the next ``most`` pure decode steps run before a request needing ``need`` blocks fits the
        reservation: the first count after which the blocks the running set holds (``used`` now), those held back
        for its outputs and ``need`` fit ``room``. Each step every sequence gains ``emit`` tokens on average (under
        speculative decoding more than one; a new block when it crosses into one), has as many fewer left to
        generate, and the ratio decays. Looked at over at most ``_LOOK_AHEAD`` cells (sequences x steps); the last
        step looked at when none fits before it.

        One sequence of 16 tokens with 2,000 to generate holds back 0.7 x 2,000 tokens (88 blocks) at first; after
        89 steps it holds 7 blocks and 0.61 x 1,911 tokens back (73 blocks), and 20 more fit 100:

        >>> one = (np.array([16]), np.array([0]), np.array([2000]))
        >>> Reservation().steps_to_admit(*one, used=1, need=20, room=100, block_tokens=16, most=900)
        89
        """
        most = max(1, min(most, _LOOK_AHEAD // max(computed.size, 1)))
        steps = np.arange(1, most + 1)
        gained = np.floor(steps * emit).astype(np.int64)
        grown = blocks_for(computed[:, None] + gained[None, :], block_tokens).sum(axis=0)
        crossings = grown - int(blocks_for(computed, block_tokens).sum())
        left = np.minimum((osl - generated)[:, None] - gained[None, :], CLIP_MAX_NEW_TOKENS).clip(min=0).sum(axis=0)
        ratio = np.maximum(self.ratio - steps * self.per_step, self.floor)
        held = -(-np.ceil(ratio * left).astype(np.int64) // block_tokens)
        fits = used + crossings + held + need <= room
        return int(steps[fits.argmax()]) if fits.any() else most


_LOOK_AHEAD = 1 << 20
"""Cells (sequences x steps) :meth:`Reservation.steps_to_admit` looks at in one go."""
