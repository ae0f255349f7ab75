"""Seeing a plan: a self-contained HTML report and a Chrome/Perfetto trace of its simulated schedule.

>>> from shardplan.tools.report import render_report, trace_events
"""

from __future__ import annotations

from .html import render_report
from .timeline import trace_events

__all__ = ["render_report", "trace_events"]
