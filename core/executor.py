"""Run one function over many inputs on local threads, local processes or a Ray cluster, results as they finish.

A sweep's cells and an evaluation's cases are independent calls of one function. The caller gets each result in
its own thread as soon as it is done (to write it to disk at once), so a run that is killed loses only the calls
still running. Ray is optional (``pip install "shardplan[ray]"``) and imported only when asked for.

Only as many calls are handed out as there are workers on the local backends: an interrupted run has nothing
queued to cancel. On Ray every call is submitted at once and Ray schedules them on the cluster's CPUs; a local
Ray started here is shut down when the run ends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal

from shardplan.errors import InputError

__all__ = ["Backend", "ExecutorChoice", "run_calls", "ray_available", "RAY_INSTALL"]

Backend = Literal["threads", "processes", "ray"]
"""Where calls run: threads of this process (for work that releases the GIL or shares a memo), local processes
(CPU-bound Python, one per core), or the tasks of a Ray cluster."""

RAY_INSTALL = 'pip install "shardplan[ray]"'


@dataclass(frozen=True)
class ExecutorChoice:
    """Which backend runs the calls, with how many local workers, and which Ray cluster."""

    backend: Backend = "processes"
    workers: int | None = None
    """Local workers (threads or processes), or the CPUs of a local Ray started here; None: the CPUs."""
    ray_address: str | None = None
    """An existing Ray cluster ('auto', 'ray://host:10001', 'host:6379'); None with backend ray: start a local one."""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise InputError(f"workers={self.workers} is below 1", field="workers", fix="give 1 or more workers")

    @property
    def worker_count(self) -> int:
        return self.workers or os.cpu_count() or 1

    def describe(self) -> str:
        """One line: where the calls run."""
        if self.backend == "ray":
            return f"Ray at {self.ray_address}" if self.ray_address else f"a local Ray of {self.worker_count} CPUs"
        return f"{self.worker_count} local {self.backend}"


def ray_available() -> bool:
    """Whether Ray can be imported here."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def run_calls(function: Callable[[Any], Any], inputs: Sequence[Any], choice: ExecutorChoice) -> Iterator[
        tuple[int, Any]]:
    """``function(inputs[i])`` for every i on the chosen backend, yielded as ``(i, result)`` in the order they
    finish. ``function`` must be a module-level function and the inputs picklable on the process and Ray
    backends. An exception raised by a call is raised here, after the other running calls are abandoned.

    Raises:
        InputError: Ray asked for but not installed, or a Ray cluster that cannot be reached.

    >>> sorted(run_calls(abs, [-2, 3, -5], ExecutorChoice("threads", workers=2)))
    [(0, 2), (1, 3), (2, 5)]
    """
    if not inputs:
        return
    if choice.backend == "ray":
        yield from _ray_calls(function, inputs, choice)
        return
    pool: Executor = (ThreadPoolExecutor(max_workers=choice.worker_count, thread_name_prefix="shardplan")
                      if choice.backend == "threads" else ProcessPoolExecutor(max_workers=choice.worker_count))
    with pool:
        pending = iter(enumerate(inputs))
        running: dict[Future[Any], int] = {}

        def submit_next() -> None:
            item = next(pending, None)
            if item is not None:
                running[pool.submit(function, item[1])] = item[0]

        for _ in range(choice.worker_count):
            submit_next()
        try:
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    index = running.pop(future)
                    yield index, future.result()
                    submit_next()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def _ray_calls(function: Callable[[Any], Any], inputs: Sequence[Any], choice: ExecutorChoice) -> Iterator[
        tuple[int, Any]]:
    """The calls as Ray tasks (one CPU each) on the cluster at ``choice.ray_address``, or on a local Ray of
    ``choice.worker_count`` CPUs started here and shut down at the end."""
    try:
        import ray
    except ImportError:
        raise InputError("Ray is not installed", field="ray", fix=f"{RAY_INSTALL}, or run without --ray") from None
    started = False
    if not ray.is_initialized():
        try:
            if choice.ray_address:
                ray.init(address=choice.ray_address, log_to_driver=False, logging_level=logging.ERROR)
            else:
                ray.init(num_cpus=choice.worker_count, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = choice.ray_address or "a local Ray"
            raise InputError(f"cannot start or reach {where}: {exc}", field="ray",
                             fix="give the address of a running cluster (ray start --head), or --ray alone") from None
        started = True
    refs: dict[Any, int] = {}
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(function)
        refs = {task.remote(item): index for index, item in enumerate(inputs)}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                yield refs.pop(ref), ray.get(ref)
    finally:
        for ref in refs:  # calls not yet finished when the run stops (an error, Ctrl-C)
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
