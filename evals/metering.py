"""What a chat-model policy did during one evaluated case: its model calls, tool calls and tokens.

LangChain's callbacks report every chat-model start and end and every tool start; a context-local handler,
registered once as an inheritable configure hook, feeds them to the :class:`Meter` of the case being run, so
runs on several threads count apart. Without LangChain nothing can be metered, and the counts stay null. The
builtin policy calls no model: its counts stay at zero, which the runner reports as null.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["Meter", "metered"]


class Meter:
    """Counts what a chat-model policy does: model calls, tool calls, tokens (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.model_calls = 0
        self.tool_calls = 0
        self.tokens: int | None = None

    def add_tokens(self, count: int) -> None:
        with self.lock:
            self.tokens = (self.tokens or 0) + count


_METER: ContextVar[Any] = ContextVar("shardplan_eval_meter", default=None)
_HOOKED = False
_HOOK_LOCK = threading.Lock()


def _handler_class() -> type:
    from langchain_core.callbacks import BaseCallbackHandler

    class MeterHandler(BaseCallbackHandler):
        """Feeds a :class:`Meter` from LangChain callbacks (any chat model, any tool)."""

        def __init__(self, meter: Meter) -> None:
            self.meter = meter

        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            with self.meter.lock:
                self.meter.model_calls += 1

        def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
            with self.meter.lock:
                self.meter.tool_calls += 1

        def on_llm_end(self, response: Any, **kwargs: Any) -> None:
            total = 0
            for generations in getattr(response, "generations", []) or []:
                for generation in generations:
                    usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
                    if usage:
                        total += int(usage.get("total_tokens", 0))
            if not total:
                usage = (getattr(response, "llm_output", None) or {}).get("token_usage") or {}
                total = int(usage.get("total_tokens", 0) or 0)
            if total:
                self.meter.add_tokens(total)

    return MeterHandler


@contextmanager
def metered() -> Iterator[Meter]:
    """Count the chat-model and tool activity of the code run inside (this thread and what it spawns)."""
    global _HOOKED
    meter = Meter()
    try:
        from langchain_core.tracers.context import register_configure_hook
    except ImportError:  # without LangChain nothing can be metered; the counts stay null
        yield meter
        return
    with _HOOK_LOCK:
        if not _HOOKED:
            register_configure_hook(_METER, inheritable=True)
            _HOOKED = True
    token = _METER.set(_handler_class()(meter))
    try:
        yield meter
    finally:
        _METER.reset(token)
