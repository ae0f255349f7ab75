"""xPyD pools keep prefill headroom: no sizing whose prefill workers cannot feed its decode batches."""

from __future__ import annotations

import pytest

from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.disaggregated import decode_workers, pool_options, prefill_worker
from shardplan.tools.serving.steady import mdc_wait, queue_wait

LLAMA_8B = load_model("meta-llama/Llama-3.1-8B")
H100_2 = make_cluster("H100", 2)
WORK = Workload(isl=2048, osl=256)


def test_the_open_queue_wait_is_not_clamped_near_saturation() -> None:
    # A replica's own prefill slots clamp at 95% (Little's law bounds them); a pool fed by other workers
    # does not: at 99% its queue is five times longer than the clamp says, and it never settles at 100%.
    assert mdc_wait(0.99, 1.0) > 5 * queue_wait(0.99, 1.0)
    assert mdc_wait(1.0, 1.0) == float("inf")
    assert mdc_wait(0.5, 1.0) == queue_wait(0.5, 1.0)


def test_pools_never_run_the_prefill_workers_at_or_past_saturation() -> None:
    layout = PhaseStrategy(tp=1)
    prefill = prefill_worker(LLAMA_8B, H100_2, layout, WORK)
    decodes = decode_workers(LLAMA_8B, H100_2, layout, WORK)
    assert prefill is not None
    # One prefill worker cannot feed one decode worker's largest batches ...
    fast = [d for d in decodes if d.requests_per_s >= prefill.requests_per_s]
    slow = [d for d in decodes if d.requests_per_s < prefill.requests_per_s]
    assert fast and slow
    # ... so those sizings are not offered (the old model served them at the prefill pool's full rate) ...
    for decode in fast:
        assert not pool_options(LLAMA_8B, H100_2, prefill, decode, WORK, budget=2, counts=(1, 1))
    # ... while every batch it can feed is, its TTFT the prefill worker's at that rate: a step of the prompts that
    # arrived during the one before (one prompt when idle), growing with the load towards full steps and their
    # queue as the rate nears the worker's capacity.
    assert prefill.prompts == 4
    assert prefill.ttft_s(1e-9) == pytest.approx(prefill.single_s)
    ttfts = [prefill.ttft_s(share * prefill.requests_per_s) for share in (0.2, 0.5, 0.8, 0.95)]
    assert prefill.single_s < ttfts[0] < ttfts[1] < ttfts[2] < ttfts[3]
    assert ttfts[3] > prefill.step_s  # near capacity a prompt waits for full steps ahead of it
    for decode in slow:
        (option,) = pool_options(LLAMA_8B, H100_2, prefill, decode, WORK, budget=2, counts=(1, 1))
        least = prefill.ttft_s(decode.requests_per_s)
        assert option.figures.requests_per_s == pytest.approx(decode.requests_per_s)
        assert least * 1e3 <= option.figures.ttft_ms < least * 1e3 + 50  # the rest is the KV transfer
        assert option.figures.tpot_ms == pytest.approx(decode.step_s * 1e3)


def test_a_given_rate_past_the_prefill_pools_capacity_is_not_served() -> None:
    layout = PhaseStrategy(tp=1)
    prefill = prefill_worker(LLAMA_8B, H100_2, layout, WORK)
    decode = decode_workers(LLAMA_8B, H100_2, layout, WORK)[-1]
    assert prefill is not None
    at_capacity = WORK.model_copy(update={"rate": prefill.requests_per_s})
    assert not pool_options(LLAMA_8B, H100_2, prefill, decode, at_capacity, budget=2, counts=(1, 1))
    below = WORK.model_copy(update={"rate": 0.5 * prefill.requests_per_s})
    assert pool_options(LLAMA_8B, H100_2, prefill, decode, below, budget=2, counts=(1, 1))


def test_a_fixed_batch_the_prefill_pool_cannot_feed_runs_the_batch_it_can() -> None:
    from shardplan.contracts.strategy import parse_strategy
    from shardplan.tools.planning.deployment import best_option

    strategy = parse_strategy("prefill:tp=1;decode:tp=1;disagg")
    prefill = prefill_worker(LLAMA_8B, H100_2, PhaseStrategy(tp=1), WORK)
    assert prefill is not None
    option = best_option(LLAMA_8B, H100_2, strategy, WORK.model_copy(update={"batch": 170}))
    assert option is not None
    assert option.worker_concurrency < 170
    assert option.figures.requests_per_s < prefill.requests_per_s


def test_a_pool_of_prefill_workers_queues_as_one_queue_of_several_servers() -> None:
    # Three workers at the utilisation of one carry three times the load. Behind one queue (Dynamo's prefill
    # queue, a router sending each prompt to an idle worker) a prompt waits only when all three are busy, so
    # the pool's TTFT is shorter than one worker's at the same utilisation.
    layout = PhaseStrategy(tp=1)
    h100_8 = make_cluster("H100", 8)
    prefill = prefill_worker(LLAMA_8B, h100_8, layout, WORK)
    assert prefill is not None
    busiest = max(
        (d for d in decode_workers(LLAMA_8B, h100_8, layout, WORK) if d.requests_per_s < prefill.requests_per_s),
        key=lambda d: d.requests_per_s,
    )
    (one,) = pool_options(LLAMA_8B, h100_8, prefill, busiest, WORK, budget=8, counts=(1, 1))
    (three,) = pool_options(LLAMA_8B, h100_8, prefill, busiest, WORK, budget=8, counts=(3, 3))
    busy = busiest.requests_per_s / prefill.requests_per_s
    assert busy > 0.5
    pool = prefill.ttft_s(3 * busiest.requests_per_s, workers=3)
    transfer_ms = three.kv_transfer_ms or 0.0
    assert three.figures.ttft_ms == pytest.approx(pool * 1e3 + transfer_ms)
    alone = prefill.ttft_s(busiest.requests_per_s)  # one worker's wait beyond its own step of one prompt
    assert three.figures.ttft_ms < one.figures.ttft_ms - 0.3 * (alone - prefill.single_s) * 1e3
    assert three.figures.requests_per_s == pytest.approx(3 * one.figures.requests_per_s)
