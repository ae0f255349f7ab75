"""The planning graph's shape, as its Mermaid drawing: a change of nodes or edges is a visible diff.

Update the snapshot with ``SHARDPLAN_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/test_agent_graph_snapshot.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from shardplan.agent.graph import graph_mermaid

SNAPSHOT = Path(__file__).parent / "snapshots" / "agent_graph.mmd"


def test_graph_drawing_matches_snapshot() -> None:
    drawing = graph_mermaid()
    if os.environ.get("SHARDPLAN_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(drawing)
    assert SNAPSHOT.exists(), "no snapshot yet: run with SHARDPLAN_UPDATE_SNAPSHOTS=1"
    assert drawing == SNAPSHOT.read_text()


def test_graph_has_the_planning_loop() -> None:
    drawing = graph_mermaid()
    for node in ("understand", "retrieve", "propose", "tools", "check", "respond"):
        assert f"\t{node}({node})" in drawing
    assert "check -.-> propose;" in drawing  # feedback goes back to the model
    assert "tools --> check;" in drawing
    assert "check -.-> respond;" in drawing
