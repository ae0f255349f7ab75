"""What each per-phase figure of a cost report is called wherever people read it, and what it means.

The terminal table of ``shardplan cost``, that command's ``--help`` and the HTML report's time table all
take their names from here, so that two figures measured differently never share a name. The two
communication figures are the ones that used to be misread: one is a stream's total busy time, the other
the share of the critical path, and the second can exceed the first.

Plain data with no heavy imports: the CLI builds ``--help`` from it at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PhaseColumn", "PHASE_COLUMNS", "column_label", "phase_columns_help"]


@dataclass(frozen=True)
class PhaseColumn:
    """One figure of :class:`~shardplan.contracts.PhaseCost` as shown to people."""

    field: str
    """The PhaseCost field it shows."""
    label: str
    """Column heading (without the unit)."""
    unit: str
    """``ms``, ``%`` or ``""`` for a count."""
    meaning: str
    """One sentence for ``--help`` and the report."""
    qualifier: str = ""
    """What the figure is taken over, after the unit: ``busiest GPU``."""

    def show(self, value: float, ms: Callable[[float], str] = "{:.2f}".format) -> str:
        """``value`` as the column shows it: milliseconds through ``ms``, shares as percentages, counts whole.

        >>> PHASE_COLUMNS[4].show(0.25), PHASE_COLUMNS[6].show(1620)
        ('25%', '1,620')
        """
        if self.unit == "ms":
            return ms(value)
        return f"{value:.0%}" if self.unit == "%" else f"{value:,.0f}"


PHASE_COLUMNS: tuple[PhaseColumn, ...] = (
    PhaseColumn("latency_ms", "latency", "ms", "the phase end to end: TTFT for prefill, one step for decode"),
    PhaseColumn(
        "compute_ms", "compute busy", "ms", "total busy time of the busiest GPU's compute stream", "busiest GPU"
    ),
    PhaseColumn(
        "communication_ms",
        "comm busy",
        "ms",
        "total busy time of the busiest GPU's communication stream, hidden transfers included",
        "busiest GPU",
    ),
    PhaseColumn(
        "exposed_communication_ms",
        "comm on critical path",
        "ms",
        "communication the latency waits for (not hidden behind compute); it exceeds comm busy when the "
        "critical path runs through the transfers of several GPUs, as pipeline send/recv chains do",
    ),
    PhaseColumn(
        "overlap_fraction", "comm hidden", "%", "share of all communication time that ran while its GPU computed"
    ),
    PhaseColumn(
        "bubble_fraction",
        "idle",
        "%",
        "share of GPU time spent neither computing nor communicating (pipeline bubbles, waits)",
    ),
    PhaseColumn("collectives", "collectives", "", "communication nodes of the phase (one decode step)"),
    PhaseColumn("inter_node_collectives", "across nodes", "", "those of them that leave a node"),
)
"""The per-phase figures in the order tables show them."""


def column_label(column: PhaseColumn, *, with_unit: bool = True) -> str:
    """The heading of ``column``: its label, the unit of milliseconds, and what it is taken over.

    >>> column_label(PHASE_COLUMNS[2]), column_label(PHASE_COLUMNS[3])
    ('comm busy ms (busiest GPU)', 'comm on critical path ms')
    """
    heading = f"{column.label} {column.unit}" if with_unit and column.unit == "ms" else column.label
    return f"{heading} ({column.qualifier})" if column.qualifier else heading


def phase_columns_help() -> str:
    """One line per column, ``label: meaning``, for a command's ``--help``."""
    return "\n\n".join(f"{column_label(c)}: {c.meaning}." for c in PHASE_COLUMNS)
