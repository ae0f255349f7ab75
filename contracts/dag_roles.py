"""The step boundaries of a DAG, found by their fields and never by their ids.

A DAG from another tool, or one whose ids were renamed, names its nodes as it likes; what makes a node
the boundary that opens or closes a phase is its ``kind``, ``phase``, ``boundary`` and ``step``. The
validators and the pricing read the boundaries through :func:`boundary_role`, so what validates is what
can be priced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from shardplan.contracts.dag import CommNode, ComputeNode, StateNode
from shardplan.errors import InputError

__all__ = ["BoundaryRole", "BOUNDARY_ROLES", "PhaseBounds", "boundary_role", "step_boundaries", "phase_bounds"]

BoundaryRole = Literal["prefill_start", "prefill_end", "decode_start", "decode_end"]
"""What a step boundary marks: prefill opens and closes, decode step t opens, step t closes and t+1 opens."""

BOUNDARY_ROLES: tuple[BoundaryRole, ...] = ("prefill_start", "prefill_end", "decode_start", "decode_end")

_FIELDS: dict[BoundaryRole, tuple[str, str]] = {
    "prefill_start": ("the start of prefill", "phase 'prefill', boundary 'step_start'"),
    "prefill_end": ("the end of prefill", "phase 'prefill', boundary 'step_end'"),
    "decode_start": ("the start of decode step t", "phase 'decode', boundary 'step_start', step 0"),
    "decode_end": ("the end of decode step t (step t+1)", "phase 'decode', boundary 'step_end', step 1"),
}
"""Per role, what the boundary marks and the fields that give it that role, for error messages."""


def boundary_role(node: ComputeNode | CommNode | StateNode) -> BoundaryRole | None:
    """The role of ``node`` when it is a step boundary of prefill or decode, else None.

    Prefill's boundary with ``boundary='step_end'`` closes it and any other opens it. In decode a
    boundary closes step t when it says ``step_end`` or belongs to a later step (``step >= 1``), and
    otherwise opens step t (``step`` 0). Handoff nodes are never boundaries of a phase.

    >>> from shardplan.contracts.dag import StateNode
    >>> end = StateNode(id="b7", name="b7", phase="decode", ranks=[0], kind="step_boundary", boundary="step_end",
    ...                 step=1)
    >>> boundary_role(end), boundary_role(end.model_copy(update={"phase": "prefill"}))
    ('decode_end', 'prefill_end')
    """
    if node.kind != "step_boundary":
        return None
    boundary = getattr(node, "boundary", None)
    if node.phase == "prefill":
        return "prefill_end" if boundary == "step_end" else "prefill_start"
    if node.phase == "decode":
        if boundary == "step_end" or node.step >= 1:
            return "decode_end"
        if node.step == 0:
            return "decode_start"
    return None


def step_boundaries(nodes: Iterable[ComputeNode | CommNode | StateNode]) -> dict[BoundaryRole, list[str]]:
    """Ids of the step boundaries in each role (every role present, possibly empty), in graph order."""
    found: dict[BoundaryRole, list[str]] = {role: [] for role in BOUNDARY_ROLES}
    for node in nodes:
        role = boundary_role(node)
        if role is not None:
            found[role].append(node.id)
    return found


@dataclass(frozen=True)
class PhaseBounds:
    """The one boundary of each role: the ids a phase's latency is measured between."""

    prefill_start: str
    prefill_end: str
    decode_start: str
    decode_end: str


def phase_bounds(nodes: Iterable[ComputeNode | CommNode | StateNode]) -> PhaseBounds:
    """The boundaries that open and close prefill and decode step t, one of each.

    Raises:
        InputError: a role has no boundary, or more than one; the message names the fields that give the
            role and ``field`` is ``nodes``.
    """
    found = step_boundaries(nodes)
    for role in BOUNDARY_ROLES:
        ids = found[role]
        marks, fields = _FIELDS[role]
        if not ids:
            raise InputError(
                f"the DAG has no step boundary for {marks}: no node has kind 'step_boundary' with {fields}",
                field="nodes",
                fix=f"add a step_boundary node with {fields} (shardplan build draws one)",
            )
        if len(ids) > 1:
            shown = ", ".join(ids[:4]) + (", ..." if len(ids) > 4 else "")
            raise InputError(
                f"the DAG has {len(ids)} step boundaries for {marks} ({shown}); exactly one is expected",
                field="nodes",
                fix=f"keep one step_boundary node with {fields}",
            )
    return PhaseBounds(*(found[role][0] for role in BOUNDARY_ROLES))
