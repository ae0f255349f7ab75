"""The ``--ray`` option of ``sweep`` and ``eval``: a bare ``--ray`` starts a local Ray, ``--ray ADDRESS`` joins a
cluster; without it the work runs on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from shardplan.executor import Backend, ExecutorChoice

__all__ = ["LOCAL_RAY", "RayOption", "BareRayFlag", "executor_choice"]

LOCAL_RAY = "local"
"""The value a bare ``--ray`` stands for: start a Ray on this machine."""

RayOption = Annotated[str | None, typer.Option(
    "--ray", help="Run on Ray: --ray alone starts a local Ray; --ray ADDRESS joins a cluster (needs "
    "pip install \"shardplan[ray]\").")]


class BareRayFlag(TyperCommand):
    """Reads a bare ``--ray`` (nothing after it, another option, or a YAML or existing file next) as ``--ray local``:
    click's options either always or never take a value."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        fixed: list[str] = []
        for i, arg in enumerate(args):
            fixed.append(arg)
            following = args[i + 1] if i + 1 < len(args) else None
            if arg == "--ray" and (following is None or following.startswith("-")
                                   or following.endswith((".yaml", ".yml")) or Path(following).is_file()):
                fixed.append(LOCAL_RAY)
        return super().parse_args(ctx, fixed)


def executor_choice(ray: str | None, workers: int | None, local: Backend = "processes") -> ExecutorChoice:
    """Where the work runs: ``local`` workers without ``--ray``, else a local Ray or the cluster named."""
    if ray is None:
        return ExecutorChoice(local, workers=workers)
    return ExecutorChoice("ray", workers=workers, ray_address=None if ray == LOCAL_RAY else ray)
