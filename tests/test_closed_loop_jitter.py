"""A closed loop's send delay: each client's next request reaches the engine some time after its last completion.

With identical requests the simulated clients run in lockstep. A delay shorter than a step does not spread them:
the first cycle's idle engine starts a step on the first request alone, and from then on every group's resends
fall inside a step already under way and enter the next one together, whatever the delay's size.
"""

from __future__ import annotations

import numpy as np
from test_simulation import H100, LLAMA_8B, ROOFLINE, LinearSteps, _replica, _stream, _with

from shardplan.tools.simulation.engine import Engine
from shardplan.tools.simulation.loop import Workers, run_events
from shardplan.tools.simulation.run import SimulationOptions, simulate
from shardplan.tools.simulation.state import Requests

CLIENTS, REQUESTS = 20, 400


def _loop(delays: np.ndarray | None) -> Requests:
    """20 clients of identical requests (200 prompt tokens, 20 out) through one engine, TensorRT-LLM's scheduler."""
    requests = Requests.from_stream(_stream([200] * REQUESTS, [20] * REQUESTS))
    worker = Engine(requests, LinearSteps(), kv_blocks=10_000, max_num_seqs=64, max_batched_tokens=8192,
                    chunked_prefill=False, reserve_whole=True)
    run_events(requests, Workers([worker]), clients=CLIENTS, send_delay_s=delays)
    return requests


def _burst(requests: Requests) -> float:
    """Mean, over the steady state's requests, of how many of them entered the engine in the same step as each."""
    kept = np.arange(CLIENTS, REQUESTS - CLIENTS)
    _, counts = np.unique(requests.scheduled[kept], return_counts=True)
    return float((counts * counts).sum() / counts.sum())


def test_each_resend_reaches_the_engine_its_delay_after_a_completion() -> None:
    delays = np.random.default_rng(0).exponential(1e-4, REQUESTS)
    requests = _loop(delays)
    finishes = set(requests.finish.tolist())
    sent = requests.arrival[CLIENTS:] - delays[CLIENTS:]
    assert all(min(abs(f - s) for f in finishes) < 1e-12 for s in sent.tolist())
    assert (requests.arrival[:CLIENTS] == 0.0).all()


def test_a_delay_shorter_than_a_step_leaves_the_lockstep_whatever_its_size() -> None:
    plain = _loop(None)
    assert _burst(plain) == CLIENTS  # every prompt of a cycle in one step
    # A step here lasts at least 10 ms: delays of 1 us to 100 us, three decades under it.
    runs = [_loop(np.random.default_rng(1).exponential(mean, REQUESTS)) for mean in (1e-6, 1e-5, 1e-4)]
    bursts = [_burst(r) for r in runs]
    ttfts = [float(np.mean(r.first_token[CLIENTS:-CLIENTS] - r.arrival[CLIENTS:-CLIENTS])) for r in runs]
    # One client split off at the first idle step (1 and 19 a step), and the groups stay as they are.
    assert bursts == [(1 + (CLIENTS - 1) ** 2) / CLIENTS] * 3
    assert max(ttfts) - min(ttfts) < 1e-3 * min(ttfts)
    plain_ttft = float(np.mean(plain.first_token[CLIENTS:-CLIENTS] - plain.arrival[CLIENTS:-CLIENTS]))
    assert min(ttfts) > 0.9 * plain_ttft


def test_send_delays_are_seeded_and_none_is_the_plain_closed_loop() -> None:
    deployment, _ = _replica("tp=1", 16)
    work = _with("closed:16")

    def once(seed: int, delay: float) -> Requests:
        options = SimulationOptions(backend="roofline", send_delay_s=delay)
        return simulate(LLAMA_8B, H100, deployment, work, requests=300, seed=seed, options=options).requests

    first, again, other = once(3, 1e-3), once(3, 1e-3), once(4, 1e-3)
    assert np.array_equal(first.finish, again.finish) and np.array_equal(first.arrival, again.arrival)
    assert not np.array_equal(first.arrival, other.arrival)
    plain = simulate(LLAMA_8B, H100, deployment, work, requests=300, seed=3, options=ROOFLINE).requests
    zero = once(3, 0.0)
    assert np.array_equal(zero.finish, plain.finish) and np.array_equal(zero.arrival, plain.arrival)
    assert np.array_equal(first.isl, plain.isl) and np.array_equal(first.osl, plain.osl)
