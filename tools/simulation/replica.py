"""What the event loop and the routers see of a replica, and the records of the steps it runs.

A replica is one scheduler (:class:`~.engine.Engine`) or a group of attention data-parallel rank schedulers
(:class:`~.ranks.RankGroup`); both compose a step as a :class:`StepPlan`, take identical steps together
(:func:`repeats_before`) and record them as :class:`StepRecord` for the trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

__all__ = ["StepCosts", "StepPrices", "StepRecord", "StepPlan", "Replica", "repeats_before", "waited"]


class StepCosts(Protocol):
    """Step prices in seconds, as :class:`~shardplan.tools.serving.steps.StepPricer` gives them."""

    def step_s(self, decode_tokens: float, prefill_tokens: float) -> float: ...

    def chunk_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float: ...


@dataclass
class StepPrices:
    """One scheduler's step prices, memoised by load: a step's duration and the pass of its prompt chunk through
    every pipeline stage (the step's own duration when it carries no prompt)."""

    costs: StepCosts
    _found: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)

    def __call__(self, decode: int, prefill: int) -> tuple[float, float]:
        key = (decode, prefill)
        found = self._found.get(key)
        if found is None:
            step = self.costs.step_s(decode, prefill)
            found = (step, max(step, self.costs.chunk_pass_s(decode, prefill)) if prefill else step)
            self._found[key] = found
        return found


class Replica(Protocol):
    """What the event loop, the routers and the summary use of a replica (or decode worker): one scheduler
    (:class:`~.engine.Engine`), or the attention data-parallel ranks of one (:class:`~.ranks.RankGroup`)."""

    @property
    def clock(self) -> float:
        """When its next step starts."""

    @property
    def has_work(self) -> bool: ...

    def enqueue(self, rid: int, now: float) -> None: ...

    def step(self, horizon: float) -> np.ndarray: ...

    def outstanding_at(self, now: float) -> int: ...

    def cached_tokens(self, group: int) -> int:
        """Tokens of prefix group ``group``'s prefix its prefix cache holds (0 without one)."""

    @property
    def resident_s(self) -> float: ...

    @property
    def running_s(self) -> float: ...

    @property
    def blocks_s(self) -> float: ...

    @property
    def peak_blocks(self) -> int: ...

    @property
    def preemptions(self) -> int: ...

    @property
    def steps(self) -> int: ...

    @property
    def records(self) -> list[StepRecord]: ...


class StepPlan(NamedTuple):
    """A step an engine has composed (its admissions and preemptions made) and not run yet."""

    decode: int
    """Decode tokens it carries."""
    prefill: int
    """Prompt tokens it carries."""
    most: int
    """Identical steps it may be taken as: pure decode until a sequence finishes or the free blocks run short;
    otherwise 1."""
    run: Callable[[float, float, int], np.ndarray]
    """Run it ``repeats`` times, each lasting ``duration`` (its prompt chunks out after ``chunk_pass``), from the
    engine's clock: ``run(duration, chunk_pass, repeats)``; returns the ids of the requests that finished."""
    until: float | None = None
    """Not a step but a wait, with nothing to run until this time (a sequence's first token still in the
    pipeline): ``run`` then lasts the wait it is given, and is not priced."""


def repeats_before(most: int, duration: float, horizon: float, now: float) -> int:
    """How many of ``most`` identical steps of ``duration`` from ``now`` to take at once: the last one starts
    before ``horizon`` (at least one).

    >>> repeats_before(10, 0.5, 2.2, 1.0), repeats_before(10, 0.5, math.inf, 1.0), repeats_before(1, 0.5, 9.0, 1.0)
    (3, 10, 1)
    """
    if most <= 1 or not math.isfinite(horizon):
        return most
    return min(most, max(1, math.ceil((horizon - now) / duration)))


def waited(until: float, horizon: float, now: float) -> float:
    """How long a scheduler with nothing to run waits from ``now``: until ``until``, or until ``horizon`` (the
    next event that may bring it work) when that comes first and later than ``now``.

    >>> waited(2.0, 1.5, 1.0), waited(2.0, 1.0, 1.0), waited(2.0, math.inf, 1.0)
    (0.5, 1.0, 1.0)
    """
    end = min(until, horizon) if horizon > now else until
    return end - now


@dataclass(frozen=True)
class StepRecord:
    """``count`` identical steps from ``start_s``, lasting ``duration_s`` in all, for the trace."""

    start_s: float
    duration_s: float
    decode_tokens: int
    prefill_tokens: int
    count: int
    running: int
    waiting: int
