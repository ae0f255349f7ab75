"""What one scheduler measured while it ran: integrals over time, peaks, counts and, when asked, every step.

The run's summary (:mod:`.results`) adds them up over the workers: the running batch and Little's law's area
(``running_s``, ``resident_s``), the KV cache in use (``blocks_s``, ``peak_blocks``), steps and preemptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardplan.tools.simulation.replica import StepRecord

__all__ = ["StepMeter"]


@dataclass(kw_only=True)
class StepMeter:
    """A scheduler's measurements (integrals are seconds x count)."""

    running_s: float = 0.0
    resident_s: float = 0.0
    """Requests at this worker (waiting or running) integrated over time: Little's law's area."""
    blocks_s: float = 0.0
    peak_blocks: int = 0
    step_blocks: int = 0
    """KV-cache blocks its last step held, cached prefixes included, before the sequences that finished in it let
    theirs go: what :attr:`peak_blocks` is the most of."""
    peak_running: int = 0
    steps: int = 0
    preemptions: int = 0
    last_finished: int = 0
    last_end: float = 0.0
    records: list[StepRecord] = field(default_factory=list)

    def measure(self, now: float, elapsed: float, repeats: int, running: int, waiting: int, decode: int,
                prefill: int, blocks: tuple[int, int, int], record: bool) -> None:
        """Count ``repeats`` steps of ``running`` sequences (``decode`` decode and ``prefill`` prompt tokens each)
        lasting ``elapsed`` in all from ``now``, ``waiting`` requests queued; ``blocks``: the running set's own
        blocks at the first step and at the last, and the cached prefixes'; ``record``: keep the steps.

        >>> meter = StepMeter()
        >>> meter.measure(0.0, 2.0, 4, running=3, waiting=1, decode=3, prefill=0, blocks=(10, 14, 2), record=False)
        >>> meter.running_s, meter.resident_s, meter.blocks_s, meter.peak_blocks, meter.steps
        (6.0, 8.0, 28.0, 16, 4)
        """
        first, used, cached = blocks
        self.running_s += running * elapsed
        self.resident_s += (running + waiting) * elapsed
        self.blocks_s += ((first + used) / 2 + cached) * elapsed
        self.step_blocks = used + cached
        self.peak_blocks = max(self.peak_blocks, self.step_blocks)
        self.peak_running = max(self.peak_running, running)
        self.steps += repeats
        if record and repeats:
            self.records.append(StepRecord(now, elapsed, decode, prefill, repeats, running, waiting))
