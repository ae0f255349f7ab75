"""Running a plan request through a policy, with progress on the terminal."""

from __future__ import annotations

from ..tools.contracts import Plan, PlanRequest

__all__ = ["run_plan"]


def run_plan(request: PlanRequest, *, progress: bool = True) -> Plan:
    """Plan ``request`` with its policy; ``progress`` shows a spinner on stderr while it works."""
    from ..tools.planner import plan

    if not progress:
        return plan(request)
    from rich.console import Console

    with Console(stderr=True).status(f"planning {request.model} on {request.gpus} x {request.gpu}..."):
        return plan(request)
