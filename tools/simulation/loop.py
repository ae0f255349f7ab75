"""The event loop of a simulated deployment: arrivals, the router, engine steps, prefill steps, KV transfers.

Events are taken in time order from two heaps: what feeds the workers (arrivals, the KV cache of a prefilled
prompt reaching the decode pool, a prefill step ending) and the engines' next steps. At equal times the feeds go
first, so a request arriving as a step starts is in that step. An engine may take several identical steps at
once (:meth:`~.engine.Engine.step`) but starts none after the next feed event, nor, in a closed loop, after
another engine's next step: there a completion sends the next request, a feed that no heap holds yet.

Under open arrivals every feed is known before any engine could pass it (arrivals from the start; a prefill
step's end when it starts; a KV hand-off, no earlier than the prefill that pushes it), and a run of identical
steps ends at its first completion, so a router reading the engines' loads at an arrival
(:func:`~.router.least_outstanding`) reads what one-step-at-a-time stepping would give; the engines need no
lockstep. Stepping them in lockstep anyway cost a step per token of every sequence while any other engine was
busy: 4.2 million steps for 2,000 requests of 4,096 mean output tokens over three decode workers
(``benchmarks/bench_split_long_outputs.py``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shardplan.contracts.simulation import Router
from shardplan.tools.simulation.pools import PrefillPool
from shardplan.tools.simulation.replica import Replica
from shardplan.tools.simulation.router import ROUTES, cache_affinity, least_outstanding
from shardplan.tools.simulation.state import Requests

__all__ = ["Workers", "run_events"]

_ARRIVAL, _HANDOFF, _PREFILLED = 0, 1, 2


@dataclass
class Workers:
    """What serves the requests: replicas (or decode workers), and for a split deployment the prefill pool and
    each request's KV transfer time."""

    engines: Sequence[Replica]
    router: Router = "round_robin"
    prefill: PrefillPool | None = None
    transfer_s: np.ndarray | None = None
    """Per request, seconds its KV cache takes from the prefill pool to a decode worker."""
    transit_s: float = 0.0
    """Requests in transfer, integrated over time."""


def run_events(
    requests: Requests,
    workers: Workers,
    clients: int | None = None,
    progress: Callable[[int], None] | None = None,
    send_delay_s: np.ndarray | None = None,
) -> float:
    """Serve every request of ``requests`` and return when the last one finished (seconds).

    Open loop: requests arrive at their ``arrival`` times. Closed loop (``clients``): that many are sent at 0,
    and each completion sends the next one at once, or ``send_delay_s[r]`` seconds later for request ``r`` (a
    client's own time between seeing its last token and its next request reaching the engine). ``progress``
    hears the count of finished requests now and then. A split deployment (``workers.prefill``) prefills in the
    pool, moves the KV cache, then routes each request to the decode worker with the fewest outstanding requests.
    """
    total = len(requests)
    engines, pool, transfer = workers.engines, workers.prefill, workers.transfer_s
    affinity = pool is None and workers.router == "cache_affinity"
    route = least_outstanding if pool is not None else ROUTES.get(workers.router, least_outstanding)
    coupled = clients is not None and len(engines) > 1
    sent = min(clients, total) if clients is not None else total
    if clients is not None:
        requests.arrival[:sent] = 0.0
    feeds: list[tuple[float, int, int]] = [(float(requests.arrival[r]), _ARRIVAL, r) for r in range(sent)]
    heapq.heapify(feeds)
    steps: list[tuple[float, int]] = []
    stepping = [False] * len(engines)
    turn = done = 0
    end = 0.0
    every = max(1, total // 100)

    def to_engine(rid: int, now: float) -> None:
        nonlocal turn
        if affinity:
            index = cache_affinity(engines, now, int(requests.group[rid]), int(requests.prefix[rid]))
        else:
            index = route(engines, now, turn)
        turn += 1
        engine = engines[index]
        engine.enqueue(rid, now)
        if not stepping[index]:
            stepping[index] = True
            heapq.heappush(steps, (engine.clock, index))

    def completed(finished: np.ndarray) -> None:
        """Requests ``finished`` are done, each at its own ``finish`` (a step's end, or later for a one-token
        request whose prompt was still in the pipeline); their clients send their next requests from then."""
        nonlocal done, sent, end
        count = int(finished.size)
        times = requests.finish[finished]
        end = max(end, float(times.max()))
        if progress is not None and (done + count) // every != done // every:
            progress(done + count)
        done += count
        for now in np.sort(times).tolist() if clients is not None and sent < total else ():
            if sent >= total:
                break
            at = math.nextafter(now, math.inf) if send_delay_s is None else now + float(send_delay_s[sent])
            requests.arrival[sent] = at
            heapq.heappush(feeds, (at, _ARRIVAL, sent))
            sent += 1

    def prefilled(worker: int, now: float) -> None:
        assert pool is not None and transfer is not None
        prompts, started = pool.finish(worker, now)
        for step_end, busy in started:
            heapq.heappush(feeds, (step_end, _PREFILLED, busy))
        for rid in prompts.tolist():
            ready = now + float(transfer[rid])
            workers.transit_s += ready - now
            requests.first_token[rid] = ready
            requests.generated[rid] = 1
            if requests.osl[rid] == 1:
                requests.finish[rid] = ready
                completed(np.array([rid]))
            else:
                heapq.heappush(feeds, (ready, _HANDOFF, rid))

    while feeds or steps:
        if feeds and (not steps or feeds[0][0] <= steps[0][0]):
            now, kind, item = heapq.heappop(feeds)
            if kind == _ARRIVAL and pool is not None:
                for step_end, worker in pool.enqueue(item, now):
                    heapq.heappush(feeds, (step_end, _PREFILLED, worker))
            elif kind == _ARRIVAL:
                to_engine(item, now)
            elif kind == _HANDOFF:
                requests.computed[item] = requests.isl[item]
                to_engine(item, now)
            else:
                prefilled(item, now)
            continue
        _, index = heapq.heappop(steps)
        engine = engines[index]
        horizon = feeds[0][0] if feeds else math.inf
        if coupled and steps:
            horizon = min(horizon, steps[0][0])
        finished = engine.step(horizon)
        if engine.has_work:
            heapq.heappush(steps, (engine.clock, index))
        else:
            stepping[index] = False
        if finished.size:
            completed(finished)
    if pool is not None:
        pool.close(end)
    return end
