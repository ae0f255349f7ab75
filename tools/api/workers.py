"""Capabilities run in child processes that can really be stopped: time limits and cancellation for servers.

A thread cannot be stopped in Python, so a server that runs a long search or a huge DAG build in one
keeps computing (and keeps the memory) after its client gave up. :class:`CapabilityWorkers` runs each
call in a worker process instead: when the call passes its time limit or its caller is cancelled, the
worker is killed and its memory goes back to the system; the server process never holds a DAG.

Workers are forked from a forkserver that has already imported the capability layer, so a fresh worker
starts in milliseconds; an idle worker is reused (its memoised searches with it). Each call carries the
caller's working directory and ``SHARDPLAN_*`` variables, so path rules are the caller's, not those of
the moment the forkserver started.

>>> import anyio
from pydantic import ValidationError

from shardplan.errors import ShardplanError
from shardplan.tools.api.capabilities import CAPABILITIES
from shardplan.tools.api.registry import dump, error_dict
>>> workers = CapabilityWorkers()
>>> anyio.run(workers.call, "get_rule", {"rule_id": "DEC-1"}, 30.0)[1]["id"]
'DEC-1'
>>> workers.close()
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import anyio
from pydantic import ValidationError

from shardplan.errors import ShardplanError
from shardplan.tools.api.capabilities import CAPABILITIES
from shardplan.tools.api.registry import dump, error_dict

__all__ = ["CapabilityWorkers", "MAX_WORKERS", "timeout_error"]

MAX_WORKERS = 4
"""Calls run at once; further calls wait for a free worker (their time limit starts when they run)."""
_KEEP_IDLE = 2
_PRELOAD = ["shardplan.tools.api.capabilities", "shardplan.tools.planning.planner", "shardplan.validators.validate"]


def timeout_error(name: str, seconds: float) -> dict[str, Any]:
    """The structured error of a call stopped at its time limit."""
    return {"error": "TimeoutError", "message": f"{name} did not finish within {seconds:g} s and was stopped",
            "field": None, "fix": "ask for less work (fewer GPUs, a smaller model or DAG), or raise "
                                  "SHARDPLAN_TOOL_TIMEOUT where the server is started"}


def _stopped(name: str) -> dict[str, Any]:
    return {"error": "InternalError", "message": f"{name} stopped unexpectedly: its worker process died",
            "field": None, "fix": "ask for less work and call again"}


def _serve(conn: Connection) -> None:
    """A worker's loop: run each (name, arguments, context) it receives and send back (ok, data)."""
    # Under the stdio transport the server's stdout is the protocol: nothing a capability prints may reach it.
    os.dup2(2, 1)
    while True:
        try:
            name, arguments, context = conn.recv()
        except (EOFError, OSError):
            return
        os.environ.update(context["env"])
        for key in [k for k in os.environ if k.startswith("SHARDPLAN_") and k not in context["env"]]:
            del os.environ[key]
        try:
            os.chdir(context["cwd"])
            reply: tuple[bool, Any] = (True, dump(CAPABILITIES[name].func(**arguments)))
        except (ShardplanError, ValidationError) as exc:
            reply = (False, error_dict(exc))
        except RecursionError:
            reply = (False, {"error": "InputError", "message": "the input is nested too deeply", "field": None,
                             "fix": "send flatter JSON"})
        except Exception as exc:  # noqa: BLE001  (a bug in one call must not take the server down)
            reply = (False, {**error_dict(exc), "error": "InternalError"})
        conn.send(reply)


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, context: Any) -> None:
        self.conn, child = context.Pipe()
        self.process: BaseProcess = context.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        child.close()

    def kill(self) -> None:
        """Stop the process at once and reap it."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class CapabilityWorkers:
    """Runs capabilities in worker processes, each call bounded by a time limit and stopped when cancelled."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(_PRELOAD)
        self._idle: list[_Worker] = []
        self._slots: anyio.CapacityLimiter | None = None

    async def call(self, name: str, arguments: dict[str, Any], seconds: float) -> tuple[bool, Any]:
        """``(True, result data)`` or ``(False, error dict)`` of capability ``name`` called with ``arguments``.

        Past ``seconds`` the worker is killed and the error says so; when the caller is cancelled the worker
        is killed too and the cancellation goes on.
        """
        if self._slots is None:
            self._slots = anyio.CapacityLimiter(MAX_WORKERS)
        async with self._slots:
            while self._idle and not self._idle[-1].process.is_alive():
                self._idle.pop().kill()  # an idle worker that died (killed for memory, say) is replaced
            worker = self._idle.pop() if self._idle else _Worker(self._context)
            finished = False
            try:
                env = {k: v for k, v in os.environ.items() if k.startswith("SHARDPLAN_")}
                context = {"cwd": os.getcwd(), "env": env}
                try:
                    worker.conn.send((name, arguments, context))
                except OSError:  # the worker died before it read the call
                    return False, _stopped(name)
                with anyio.move_on_after(seconds) as scope:
                    await _wait_readable(worker)
                if scope.cancelled_caught:
                    return False, timeout_error(name, seconds)
                try:
                    ok, data = worker.conn.recv()
                except (EOFError, OSError):  # the worker died (killed for memory by the system, say)
                    return False, _stopped(name)
                finished = True
                return ok, data
            finally:
                if finished and len(self._idle) < _KEEP_IDLE:
                    self._idle.append(worker)
                else:
                    worker.kill()

    def close(self) -> None:
        """Stop every idle worker."""
        while self._idle:
            self._idle.pop().kill()


async def _wait_readable(worker: _Worker) -> None:
    """Return once the worker has answered (or died); checks often, so cancellation is prompt."""
    delay = 0.001
    while not worker.conn.poll():
        if not worker.process.is_alive():
            return
        await anyio.sleep(delay)
        delay = min(delay * 2, 0.02)
