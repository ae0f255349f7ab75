"""The engine simulator's own truth: what a replay of requests through the scheduler must get right.

Engine mechanics are checked exactly with a linear step price (chunked prefill, pure-decode steps taken
together, preemption and recompute); the deployment runs use the serving model's step pricer with the roofline
backend, so they need no measured tables.
"""

from __future__ import annotations

import doctest
import json
from dataclasses import dataclass

import numpy as np
import pytest

from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.traffic import Traffic, parse_arrival, parse_length
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.memory import memory_report
from shardplan.tools.serving.disaggregated import kv_transfer_s, prefill_worker
from shardplan.tools.serving.options import priced_deployment
from shardplan.tools.serving.steady import continuous_point
from shardplan.tools.serving.steps import StepPricer
from shardplan.tools.simulation import (
    blocks,
    capacity,
    engine,
    pools,
    reservation,
    results,
    router,
    run,
    scheduler_rules,
    trace,
)
from shardplan.tools.simulation.capacity import BLOCK_TOKENS, kv_blocks
from shardplan.tools.simulation.engine import Engine
from shardplan.tools.simulation.loop import Workers, run_events
from shardplan.tools.simulation.router import least_outstanding, round_robin
from shardplan.tools.simulation.run import Simulation, SimulationOptions, simulate
from shardplan.tools.simulation.state import Requests
from shardplan.tools.simulation.trace import trace_events
from shardplan.tools.traffic.stream import RequestStream

LLAMA_8B = load_model("meta-llama/Llama-3.1-8B")
H100 = make_cluster("H100", 8)
WORK = Workload(isl=1024, osl=256, ttft_ms=500, tpot_ms=30)
ROOFLINE = SimulationOptions(backend="roofline")


@dataclass
class LinearSteps:
    """A step price simple enough to work out by hand: 10 ms, plus 1 ms a decode token, plus 0.1 ms a prompt token."""

    def step_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        return 0.010 + 0.001 * decode_tokens + 0.0001 * prefill_tokens

    def chunk_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        return self.step_s(decode_tokens, prefill_tokens)


def _stream(isl: list[int], osl: list[int], arrival: list[float] | None = None) -> RequestStream:
    count = len(isl)
    times = np.array(arrival if arrival is not None else [0.0] * count)
    return RequestStream(times, np.array(isl), np.array(osl), np.full(count, -1))


def _replica(spec: str, concurrency: int, workload: Workload = WORK) -> tuple[PricedDeployment, StepPricer]:
    """An aggregated deployment of ``spec`` priced by the serving model at ``concurrency`` per replica (roofline)."""
    strategy = parse_strategy(spec)
    layout = strategy.decode.model_copy(update={"dp": 1})
    pricer = StepPricer.for_workload(LLAMA_8B, H100, layout, workload, backend="roofline")
    point = continuous_point(pricer, concurrency, workload)
    assert point is not None
    deployment = priced_deployment(
        strategy, workload, H100, budget=8, concurrency=concurrency * strategy.decode.dp,
        worker_concurrency=concurrency, ttft_ms=point.ttft_s * 1e3, tpot_ms=point.tpot_s * 1e3,
        requests_per_s=point.requests_per_s * strategy.decode.dp, memory=(40.0, True),
    )
    return deployment, pricer


def _with(arrival: str | None = None, **lengths: str) -> Workload:
    traffic = Traffic(arrival=parse_arrival(arrival or "poisson"),
                      **{k: parse_length(v) for k, v in lengths.items()})  # type: ignore[arg-type]
    return WORK.model_copy(update={"traffic": traffic})


def test_chunked_prefill_then_decode_steps_take_exactly_the_step_prices() -> None:
    # One request of 100 prompt tokens under a 64-token budget: chunks of 64 and 36 (the first token comes with
    # the second), then 9 decode steps of one sequence, taken together.
    stream = _stream([100], [10])
    requests = Requests.from_stream(stream)
    costs = LinearSteps()
    worker = Engine(requests, costs, kv_blocks=100, max_num_seqs=8, max_batched_tokens=64, record_steps=True)
    end = run_events(requests, Workers([worker]))
    ttft = costs.step_s(0, 64) + costs.step_s(0, 36)
    assert requests.first_token[0] == pytest.approx(ttft, rel=1e-12)
    assert end == requests.finish[0] == pytest.approx(ttft + 9 * costs.step_s(1, 0), rel=1e-12)
    assert [(r.prefill_tokens, r.decode_tokens, r.count) for r in worker.records] == [(64, 0, 1), (36, 0, 1), (0, 1, 9)]
    assert worker.steps == 11 and requests.scheduled[0] == 0.0


def test_a_prompt_chunk_rides_in_a_decode_step_and_prices_it() -> None:
    # A (100 prompt tokens, 10 out) alone, then B (30, 3) arriving during A's first chunk: B's prompt fills what
    # A's second chunk leaves of the 64-token budget, its last 2 tokens ride with A's decode token, then both decode.
    stream = _stream([100, 30], [10, 3], [0.0, 0.001])
    requests = Requests.from_stream(stream)
    c = LinearSteps()
    run_events(requests, Workers([Engine(requests, c, kv_blocks=100, max_num_seqs=8, max_batched_tokens=64)]))
    steps = [c.step_s(0, 64), c.step_s(0, 64), c.step_s(1, 2), c.step_s(2, 0), c.step_s(2, 0)]
    assert requests.first_token.tolist() == pytest.approx([sum(steps[:2]), sum(steps[:3])], rel=1e-12)
    assert requests.finish.tolist() == pytest.approx([sum(steps) + 6 * c.step_s(1, 0), sum(steps)], rel=1e-12)
    assert requests.scheduled.tolist() == pytest.approx([0.0, steps[0]], rel=1e-12)


def test_preemption_when_kv_blocks_run_out_recomputes_the_latest_admitted_and_is_counted() -> None:
    # Four prompts of 3 blocks fit 20 blocks; grown to 111 tokens each needs 7 blocks, 28 in all: the engine
    # must preempt, and what it preempts is the most recently admitted sequence, recomputed from scratch.
    stream = _stream([48] * 4, [64] * 4)
    requests = Requests.from_stream(stream)
    worker = Engine(requests, LinearSteps(), kv_blocks=20, max_num_seqs=8, max_batched_tokens=512, record_steps=True)
    run_events(requests, Workers([worker]))
    assert worker.preemptions > 0 and int(requests.preemptions.sum()) == worker.preemptions
    assert requests.preemptions[0] == 0 and requests.preemptions[3] > 0
    assert worker.peak_blocks <= 20 and not np.isnan(requests.finish).any()
    assert np.array_equal(requests.generated, requests.osl)
    # Recompute: every preemption re-prefills the prompt and the tokens generated so far.
    prefilled = sum(r.prefill_tokens for r in worker.records)
    assert prefilled > int(stream.isl.sum())
    assert requests.finish[3] > requests.finish[0]
    # The preempted sequence goes back to the front of the queue, ahead of requests that never ran.
    queued = Requests.from_stream(_stream([48] * 5, [64] * 5))
    worker = Engine(queued, LinearSteps(), kv_blocks=20, max_num_seqs=4, max_batched_tokens=512)
    for rid in range(5):
        worker.enqueue(rid, 0.0)
    while worker.preemptions == 0:
        worker.step(float("inf"))
    assert list(worker.waiting) == [3, 4] and queued.computed[3] == 0 and queued.generated[3] > 0
    # Without the pressure nothing is preempted.
    roomy = Requests.from_stream(stream)
    spacious = Engine(roomy, LinearSteps(), kv_blocks=40, max_num_seqs=8, max_batched_tokens=512)
    run_events(roomy, Workers([spacious]))
    assert spacious.preemptions == 0 and roomy.finish.max() < requests.finish.max()


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("concurrency", [2, 4])
def test_at_low_load_it_agrees_with_the_analytic_steady_state(concurrency: int, engine: str) -> None:
    # Open arrivals at the rate the steady state serves with ``concurrency`` sequences in flight, priced as open
    # arrivals: fixed lengths, the same step prices, so only the dynamics differ, and at low load they barely do;
    # under each engine's own scheduler (SGLang's prompt steps apart, TensorRT-LLM's whole prompts).
    work = WORK.model_copy(update={"engine": engine})
    rate = _replica("tp=1", concurrency, work)[0].figures.requests_per_s
    deployment, _ = _replica("tp=1", concurrency, work.model_copy(update={"rate": rate}))
    options = SimulationOptions(backend="roofline", max_num_seqs=256)
    summary = simulate(LLAMA_8B, H100, deployment, work, requests=3000, rate=rate, seed=1, options=options).summary
    assert summary.figures.source == "simulation"
    assert summary.figures.ttft_ms == pytest.approx(deployment.figures.ttft_ms, rel=0.05)
    assert summary.figures.tpot_ms == pytest.approx(deployment.figures.tpot_ms, rel=0.05)
    assert summary.mean_in_flight == pytest.approx(concurrency, rel=0.1)


def _little(summary: SimulationSummary) -> tuple[float, float]:
    """Requests in flight on average, and throughput x mean request latency."""
    return summary.mean_in_flight, summary.completed_per_s * summary.figures.e2e_ms / 1e3


def test_littles_law_holds_on_its_output() -> None:
    # Requests in the deployment over time (integrated from the engines' steps and queues) equal throughput x mean
    # latency (from each request's own times): the two bookkeepings must agree.
    deployment, _ = _replica("dp=2", 32)
    work = _with("gamma:cv=2", isl="lognormal:mean=1024,cv=0.5,high=4096", osl="uniform:64,448")
    sim = simulate(LLAMA_8B, H100, deployment, work, requests=3000, rate=deployment.figures.requests_per_s * 0.8,
                   seed=3, options=SimulationOptions(backend="roofline", router="least_outstanding"))
    in_flight, product = _little(sim.summary)
    # Over a whole run, from empty to empty, the two are the same sum: equal up to rounding.
    assert in_flight > 10 and in_flight == pytest.approx(product, rel=1e-9)


def test_throughput_never_exceeds_what_the_step_times_allow() -> None:
    # However many clients push, a replica emits at most one token per running sequence per step, and a step of
    # D sequences lasts at least step_s(D, 0): tokens/s <= max over D <= max_num_seqs of D / step_s(D, 0).
    deployment, pricer = _replica("tp=1", 64)
    sim = simulate(LLAMA_8B, H100, deployment, _with("closed:400", osl="uniform:128,384"), requests=4000,
                   options=ROOFLINE)
    bound = max(d / pricer.step_s(d, 0) for d in range(1, 65))
    tokens = sim.summary.figures.tokens_per_s
    assert tokens <= bound
    assert tokens > 0.6 * bound  # saturated: close to the bound, not trivially under it
    assert sim.summary.mean_running_batch <= 64 and sim.workers.engines[0].peak_running == 64


def test_seeded_runs_repeat_exactly() -> None:
    deployment, _ = _replica("tp=1", 32)
    work = _with(isl="lognormal:mean=1024,cv=0.8,high=8192", osl="lognormal:mean=256,cv=0.8,high=2048")

    def once(seed: int) -> Simulation:
        return simulate(LLAMA_8B, H100, deployment, work, requests=1500, rate=8.0, seed=seed, options=ROOFLINE)

    first, again, other = once(5), once(5), once(6)
    assert first.summary.model_dump_json() == again.summary.model_dump_json()
    assert np.array_equal(first.requests.finish, again.requests.finish)
    assert not np.array_equal(first.requests.finish, other.requests.finish)
    assert first.summary.seed == 5 and first.summary.figures.ttft_ms != other.summary.figures.ttft_ms


def test_a_closed_loop_above_the_kv_capacity_queues_and_preempts_without_failing() -> None:
    # 700 clients of 1024+256 tokens against a KV cache of 316 such sequences and no sequence cap to speak of:
    # the running set is held by the blocks, the rest wait, and sequences that outgrow the cache are preempted.
    deployment, _ = _replica("tp=1", 64)
    options = SimulationOptions(backend="roofline", max_num_seqs=10_000)
    sim = simulate(LLAMA_8B, H100, deployment, _with("closed:700"), requests=2000, options=options)
    blocks = sim.summary.kv_blocks
    worker = sim.workers.engines[0]
    assert not np.isnan(sim.requests.finish).any() and np.array_equal(sim.requests.generated, sim.requests.osl)
    assert worker.peak_blocks <= blocks and sim.summary.kv_cache_peak <= 1.0
    assert worker.peak_running <= blocks // (WORK.isl // BLOCK_TOKENS) < 700
    assert sim.summary.queue_ms > 1000 and sim.summary.queue.p99_ms > sim.summary.queue.p50_ms
    assert sim.summary.preemptions == int(sim.requests.preemptions.sum()) > 0


def test_the_kv_cache_is_what_the_memory_model_leaves() -> None:
    for model, layout in [(LLAMA_8B, PhaseStrategy()), (load_model("Qwen/Qwen3-30B-A3B"), PhaseStrategy(adp=2, ep=2))]:
        blocks = kv_blocks(model, H100.gpu, layout, WORK, "shared", layout)
        sequences = memory_report(model, H100.gpu, layout, WORK.at_concurrency(1), "shared", 1280, layout).max_batch
        assert blocks * BLOCK_TOKENS // (WORK.isl + WORK.osl) in (sequences, sequences + 1)


def _split(spec: str, sequences: int) -> PricedDeployment:
    strategy = parse_strategy(spec)
    return priced_deployment(strategy, WORK, H100, budget=8, concurrency=sequences * strategy.decode.dp,
                             worker_concurrency=sequences, ttft_ms=100.0, tpot_ms=20.0, requests_per_s=1.0,
                             memory=(40.0, True), prefill_prompts=8)


def test_a_split_deployment_puts_the_kv_transfer_in_ttft() -> None:
    # One client at a time: TTFT is exactly one prefill step of one prompt plus the KV transfer, and every
    # later token one decode step of one sequence on the decode worker.
    deployment = _split("prefill:tp=2;decode:tp=2;disagg", 16)
    sim = simulate(LLAMA_8B, H100, deployment, _with("closed:1"), requests=20, options=ROOFLINE)
    prefill = StepPricer.for_workload(LLAMA_8B, H100, PhaseStrategy(tp=2), WORK, backend="roofline")
    transfer = kv_transfer_s(LLAMA_8B, H100, PhaseStrategy(tp=2), PhaseStrategy(tp=2), WORK.isl, same_node=True)
    assert transfer > 0
    assert sim.summary.figures.ttft_ms == pytest.approx((prefill.prefill_s(1) + transfer) * 1e3, rel=1e-9)
    assert sim.summary.figures.tpot_ms == pytest.approx(prefill.step_s(1, 0) * 1e3, rel=1e-9)


def test_split_pools_serve_every_request_through_the_queue_and_the_transfer() -> None:
    deployment = _split("prefill:dp=2,tp=2;decode:dp=2,tp=2;disagg", 48)
    sim = simulate(LLAMA_8B, H100, deployment, _with(osl="uniform:1,400"), requests=2000, rate=12.0, seed=2,
                   options=ROOFLINE)
    pricer = StepPricer.for_workload(LLAMA_8B, H100, PhaseStrategy(tp=2), WORK, backend="roofline")
    worker = prefill_worker(LLAMA_8B, H100, PhaseStrategy(tp=2), WORK, pricer)
    assert worker is not None
    transfer = kv_transfer_s(LLAMA_8B, H100, PhaseStrategy(tp=2), PhaseStrategy(tp=2), WORK.isl, same_node=True)
    ttft = (sim.requests.first_token - sim.requests.arrival)
    assert ttft.min() >= worker.single_s + transfer - 1e-12
    assert not np.isnan(sim.requests.finish).any() and (sim.requests.osl == 1).any()
    assert min(e.steps for e in sim.workers.engines) > 0  # both decode workers took requests
    in_flight, product = _little(sim.summary)
    assert in_flight == pytest.approx(product, rel=1e-9)
    assert sim.summary.router == "least_outstanding"


def test_routers_pick_in_turn_or_the_least_loaded() -> None:
    requests = Requests.from_stream(_stream([16] * 3, [4] * 3))
    engines = [Engine(requests, LinearSteps(), 100, 8, 64) for _ in range(3)]
    assert [round_robin(engines, 0.0, turn) for turn in range(4)] == [0, 1, 2, 0]
    engines[0].enqueue(0, 0.0)
    engines[1].enqueue(1, 0.0)
    assert least_outstanding(engines, 0.0, 0) == 2
    engines[2].enqueue(2, 0.0)
    engines[2].enqueue(2, 0.0)
    assert least_outstanding(engines, 0.0, 0) == 0


def test_the_summary_and_the_trace() -> None:
    deployment, _ = _replica("tp=1", 16)
    options = SimulationOptions(backend="roofline", record_steps=True)
    sim = simulate(LLAMA_8B, H100, deployment, WORK, requests=400, rate=4.0, options=options)
    figures = sim.summary.figures
    for metric in ("ttft", "tpot", "e2e"):
        p = figures.percentiles[metric]  # type: ignore[index]
        assert p.p50_ms <= p.p90_ms <= p.p95_ms <= p.p99_ms
    assert sim.summary.completed_per_s == pytest.approx(400 / sim.summary.duration_s)
    # A queue that keeps up serves the rate offered: the run's completions fall short of it only by the drain.
    assert sim.summary.settled is True and figures.requests_per_s == 4.0
    assert figures.tokens_per_s == pytest.approx(4.0 * float(sim.requests.osl.mean()))
    assert sim.summary.goodput == 1.0 and sim.summary.misses == []
    strict = simulate(LLAMA_8B, H100, deployment, WORK.model_copy(update={"tpot_ms": 1.0}), requests=400, rate=4.0,
                      options=ROOFLINE).summary
    assert strict.goodput == 0.0 and [m.metric for m in strict.misses] == ["tpot"]
    events = trace_events(sim.workers)["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(sim.workers.engines[0].records) and sum(e["args"]["steps"] for e in slices) == (
        sim.summary.steps)
    json.dumps(events)


def test_the_modules_examples_run() -> None:
    for module in (blocks, capacity, engine, pools, reservation, results, router, run, scheduler_rules, trace):
        assert doctest.testmod(module).failed == 0, module.__name__
