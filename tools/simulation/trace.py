"""The steps of a simulated run as a Chrome/Perfetto trace: one track per replica or worker, one slice per step
(identical pure-decode steps taken together form one slice), and counters of the running and waiting sequences.

Open the file in ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from typing import Any

from shardplan.text import counted
from shardplan.tools.simulation.loop import Workers

__all__ = ["trace_events"]


def trace_events(workers: Workers) -> dict[str, Any]:
    """The trace of ``workers``' recorded steps (run with ``record_steps``); times in microseconds.

    >>> trace_events(Workers([]))["traceEvents"]
    []
    """
    events: list[dict[str, Any]] = []
    role = "decode worker" if workers.prefill is not None else "replica"
    for pid, engine in enumerate(workers.engines, start=1):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{role} {pid - 1}"}})
        for r in engine.records:
            name = f"decode {r.decode_tokens}" + (f" + prefill {r.prefill_tokens}" if r.prefill_tokens else "")
            events.append({"name": name, "ph": "X", "pid": pid, "tid": 0, "ts": r.start_s * 1e6,
                           "dur": r.duration_s * 1e6, "args": {"steps": r.count, "running": r.running,
                                                               "waiting": r.waiting}})
            events.append({"name": "sequences", "ph": "C", "pid": pid, "ts": r.start_s * 1e6,
                           "args": {"running": r.running, "waiting": r.waiting}})
    pool = workers.prefill
    if pool is not None:
        pid = len(workers.engines) + 1
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": "prefill pool"}})
        for p in pool.records:
            events.append({"name": f"prefill {counted(p.prompts, 'prompt')}", "ph": "X", "pid": pid, "tid": p.worker,
                           "ts": p.start_s * 1e6, "dur": p.duration_s * 1e6, "args": {"tokens": p.tokens}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
