"""Bisection for the largest integer that passes a monotone test: the memory capacity, the concurrency next to
the targets."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["largest_passing"]


def largest_passing(low: int, high: int, passes: Callable[[int], bool], relative: float = 0.0) -> int:
    """The largest value between ``low`` (known to pass) and ``high`` (known to fail) that passes, by bisection
    to within ``relative`` of ``low`` (exactly, at 0).

    >>> largest_passing(64, 96, lambda c: c <= 84, relative=1 / 32)
    84
    >>> largest_passing(1, 100, lambda c: c <= 37)
    37
    """
    while high - low > max(1, int(low * relative)):
        middle = (low + high) // 2
        if passes(middle):
            low = middle
        else:
            high = middle
    return low
