"""Capabilities run in child processes that can really be stopped: time limits and cancellation for servers.

A thread cannot be stopped in Python, so a server that runs a long search or a huge DAG build in one
keeps computing (and keeps the memory) after its client gave up. :class:`CapabilityWorkers` runs each
call in a worker process instead: when the call passes its time limit or its caller is cancelled, the
worker is killed and its memory goes back to the system; the server process never holds a DAG.

Workers are forked from a forkserver that has already imported the capability layer, so a fresh worker
starts in milliseconds; an idle worker is reused (its memoised searches with it). Each call carries the
caller's working directory and ``SHARDPLAN_*`` variables, so path rules are the caller's, not those of
the moment the forkserver started.

Each worker runs under an address-space limit (:func:`~shardplan.limits.worker_memory_bytes`, 4 GiB unless
``$SHARDPLAN_WORKER_MEMORY`` says otherwise): a call that needs more gets a one-line ``MemoryError`` naming the
limit instead of taking the machine's memory, and its worker is replaced. At most as many calls run at once as
the machine's available memory holds at that limit (and never more than :data:`MAX_WORKERS`).

>>> import anyio
>>> workers = CapabilityWorkers()
>>> anyio.run(workers.call, "get_rule", {"rule_id": "DEC-1"}, 30.0)[1]["id"]
'DEC-1'
>>> workers.close()
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import anyio
from pydantic import ValidationError

from shardplan.errors import InputError, ShardplanError
from shardplan.limits import worker_memory_bytes
from shardplan.tools.api.capabilities import CAPABILITIES
from shardplan.tools.api.registry import Capability, dump, error_dict

__all__ = ["CapabilityWorkers", "MAX_WORKERS", "timeout_error", "memory_error", "concurrent_calls"]

MAX_WORKERS = 4
"""Calls run at once; further calls wait for a free worker (their time limit starts when they run)."""
_KEEP_IDLE = 2
_PRELOAD = ["shardplan.tools.api.capabilities", "shardplan.tools.planning.planner", "shardplan.validators.validate"]


def timeout_error(name: str, seconds: float) -> dict[str, Any]:
    """The structured error of a call stopped at its time limit."""
    return {"error": "TimeoutError", "message": f"{name} did not finish within {seconds:g} s and was stopped",
            "field": None, "fix": "ask for less work (fewer GPUs, a smaller model or DAG), or raise "
                                  "SHARDPLAN_TOOL_TIMEOUT where the server is started"}


def _gib(size: int) -> str:
    return f"{size / 1024**3:.3g} GiB"


def memory_error(name: str, limit: int) -> dict[str, Any]:
    """The structured error of a call that needed more memory than a worker may map."""
    return {"error": "MemoryError", "message": f"{name} needed more than the memory limit of {_gib(limit)} per call "
                                              "and was stopped",
            "field": None, "fix": "ask for less work (fewer GPUs, a smaller model or DAG, detail=false), or raise "
                                  "SHARDPLAN_WORKER_MEMORY (e.g. 8G) where the server is started"}


def _stopped(name: str, limit: int) -> dict[str, Any]:
    return {"error": "InternalError", "message": f"{name} stopped unexpectedly: its worker process died (a call past "
                                                f"the memory limit of {_gib(limit)} can end so)",
            "field": None, "fix": "ask for less work and call again, or raise SHARDPLAN_WORKER_MEMORY where the "
                                  "server is started"}


def _death(worker: _Worker, name: str, limit: int) -> dict[str, Any]:
    """The error of a call whose worker died: compiled code (pydantic-core, Rust) that cannot allocate under the
    address-space limit aborts the process (SIGABRT) rather than raising MemoryError, so an abort is read as
    the memory limit reached; any other death is unexpected."""
    worker.process.join(timeout=5)
    if worker.process.exitcode == -signal.SIGABRT:
        return memory_error(name, limit)
    return _stopped(name, limit)


def _peak_address_space(worker: _Worker) -> int:
    """The most address space ``worker`` has mapped (VmPeak), in bytes; 0 where the system does not say.

    Compiled code that fails to allocate under the limit may also hang (a panic while panicking) rather than
    abort; such a call ends at its time limit, and its peak tells that memory, not time, stopped it.
    """
    try:
        with open(f"/proc/{worker.process.pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _available_memory() -> int | None:
    """Bytes of memory the system can give without swapping (MemAvailable), when it says."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def concurrent_calls(limit: int, available: int | None) -> int:
    """Calls that may run at once: :data:`MAX_WORKERS`, fewer when ``available`` bytes do not hold that many
    workers at ``limit`` bytes each, and at least one.

    >>> concurrent_calls(4 * 1024**3, 24 * 1024**3), concurrent_calls(4 * 1024**3, 9 * 1024**3)
    (4, 2)
    """
    if available is None:
        return MAX_WORKERS
    return max(1, min(MAX_WORKERS, available // limit))


def _limit_memory(limit: int) -> None:
    """Cap this process's address space at ``limit`` bytes (soft and hard: a call cannot lift it)."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _serve(conn: Connection, memory: int, functions: Mapping[str, Callable[..., Any]]) -> None:
    """A worker's loop: run each (name, arguments, context) it receives with ``functions[name]`` and send back
    (ok, data), in at most ``memory`` bytes of address space; a call that runs out of it ends the worker after its
    answer."""
    # Under the stdio transport the server's stdout is the protocol: nothing a capability prints may reach it.
    os.dup2(2, 1)
    _limit_memory(memory)
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
            reply: tuple[bool, Any] = (True, dump(functions[name](**arguments)))
        except (ShardplanError, ValidationError) as exc:
            reply = (False, error_dict(exc))
        except RecursionError:
            reply = (False, {"error": "InputError", "message": "the input is nested too deeply", "field": None,
                             "fix": "send flatter JSON"})
        except MemoryError:
            # The call's objects are gone with its frames; the answer is small, and the worker is not reused.
            conn.send((False, memory_error(name, memory)))
            return
        except Exception as exc:  # noqa: BLE001  (a bug in one call must not take the server down)
            reply = (False, {**error_dict(exc), "error": "InternalError"})
        conn.send(reply)


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, context: Any, memory: int, functions: Mapping[str, Callable[..., Any]]) -> None:
        self.conn, child = context.Pipe()
        # The functions travel by reference (module and name), so a worker imports what it runs.
        self.process: BaseProcess = context.Process(target=_serve, args=(child, memory, functions), daemon=True)
        self.process.start()
        child.close()
        self.memory = memory

    def kill(self) -> None:
        """Stop the process at once and reap it."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class CapabilityWorkers:
    """Runs capabilities in worker processes, each call bounded by a time limit and stopped when cancelled."""

    def __init__(self, capabilities: Mapping[str, Capability] | None = None) -> None:
        """``capabilities``: what the workers may run, by name (default :data:`CAPABILITIES`; a layer above this
        one, the sweep's, adds its own)."""
        chosen = dict(capabilities if capabilities is not None else CAPABILITIES)
        self._functions = {name: cap.func for name, cap in chosen.items()}
        self._context = multiprocessing.get_context("forkserver")
        modules = dict.fromkeys([*_PRELOAD, *(func.__module__ for func in self._functions.values())])
        self._context.set_forkserver_preload(list(modules))
        self._idle: list[_Worker] = []
        self._slots: anyio.CapacityLimiter | None = None

    async def call(self, name: str, arguments: dict[str, Any], seconds: float) -> tuple[bool, Any]:
        """``(True, result data)`` or ``(False, error dict)`` of capability ``name`` called with ``arguments``.

        Past ``seconds`` the worker is killed and the error says so; when the caller is cancelled the worker
        is killed too and the cancellation goes on.
        """
        try:
            memory = worker_memory_bytes()
        except InputError as exc:
            return False, exc.to_dict()
        if self._slots is None:
            self._slots = anyio.CapacityLimiter(concurrent_calls(memory, _available_memory()))
        async with self._slots:
            while self._idle and not self._idle[-1].process.is_alive():
                self._idle.pop().kill()  # an idle worker that died (killed for memory, say) is replaced
            if self._idle and self._idle[-1].memory != memory:  # the limit changed: a worker under the new one
                self._idle.pop().kill()
            worker = self._idle.pop() if self._idle else _Worker(self._context, memory, self._functions)
            finished = False
            try:
                env = {k: v for k, v in os.environ.items() if k.startswith("SHARDPLAN_")}
                context = {"cwd": os.getcwd(), "env": env}
                try:
                    worker.conn.send((name, arguments, context))
                except OSError:  # the worker died before it read the call
                    return False, _stopped(name, memory)
                with anyio.move_on_after(seconds) as scope:
                    await _wait_readable(worker)
                if scope.cancelled_caught:
                    if _peak_address_space(worker) >= 0.9 * memory:  # stuck at its limit, not slow
                        return False, memory_error(name, memory)
                    return False, timeout_error(name, seconds)
                try:
                    ok, data = worker.conn.recv()
                except (EOFError, OSError):  # the worker died (killed for memory by the system, say)
                    return False, _death(worker, name, memory)
                # A worker that ran out of memory ends after its answer: it is not kept for the next call.
                finished = ok or not (isinstance(data, dict) and data.get("error") == "MemoryError")
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
