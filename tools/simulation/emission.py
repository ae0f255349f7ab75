"""How many tokens a decoding sequence gains a step under speculative decoding, without inventing a distribution.

A step verifies K + 1 positions of each sequence and keeps A + 1 of them on average (``emit``). No acceptance
distribution is invented: every sequence of a step gains the same whole number of tokens, the floor or the
ceiling of the mean, and the fractional part left over is carried to the next steps, so that over any run of
steps the sequences gain exactly the mean on average. Without speculation (``emit`` = 1) every step gains one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Emission"]

_EPS = 1e-9
"""Slack for the float sum of fractional carries (a whole number must not come out one short)."""


@dataclass
class Emission:
    """The mean tokens a step adds to a decoding sequence (``emit``) and the fraction not yet paid out."""

    emit: float = 1.0
    carry: float = 0.0

    @property
    def plain(self) -> bool:
        """One token a step: no speculative decoding."""
        return self.emit == 1.0

    @property
    def most(self) -> int:
        """The most tokens one step may add to a sequence."""
        return math.ceil(self.emit)

    def gained(self, repeats: int) -> int:
        """Tokens each decoding sequence gains over ``repeats`` steps; the fraction left is carried over."""
        if self.plain:
            return repeats
        total = self.carry + repeats * self.emit
        whole = math.floor(total + _EPS)
        self.carry = total - whole
        return whole

    def steps_to(self, tokens: int) -> int:
        """Steps until the sequences have gained ``tokens`` tokens, from the current carry (at least one)."""
        if self.plain or tokens <= 0:
            return tokens
        return max(1, math.ceil((tokens - self.carry - _EPS) / self.emit))
