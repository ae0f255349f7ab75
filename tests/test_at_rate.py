"""A rate is a rate: asked for R requests/s, a deployment reports the figures of R itself, at the load R puts on
it (Little's law), and says so when it cannot serve R."""

from __future__ import annotations

import math

import pytest

from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.deployments import given_deployment
from shardplan.tools.serving.disaggregated import decode_workers, pool_options, prefill_worker
from shardplan.tools.serving.steps import StepPricer

LLAMA_8B = load_model("meta-llama/Llama-3.1-8B")
H100 = make_cluster("H100", 1)
ASK = Workload(isl=512, osl=64, ttft_ms=500, tpot_ms=25, objective="throughput")


def _at(rate: float) -> object:
    [best] = sorted(given_deployment(LLAMA_8B, H100, parse_strategy("tp=1"), ASK.model_copy(update={"rate": rate})),
                    key=lambda o: o.figures.e2e_ms)[:1]
    return best


@pytest.mark.parametrize("rate", [5.0, 20.0, 60.0])
def test_a_replica_serves_the_rate_itself_at_the_load_it_puts_on_it(rate: float) -> None:
    option = _at(rate)
    f = option.figures  # type: ignore[attr-defined]
    assert f.requests_per_s == rate and f.tokens_per_s == pytest.approx(rate * ASK.osl)
    # Little's law: the sequences in flight are the rate times the request latency (rounded up).
    assert option.concurrency == math.ceil(rate * f.e2e_ms / 1e3 - 1e-9)  # type: ignore[attr-defined]
    assert option.meets_targets  # type: ignore[attr-defined]


def test_more_load_means_longer_latencies_and_a_rate_too_high_is_missed_by_its_shortfall() -> None:
    light, busy = _at(5.0).figures, _at(60.0).figures  # type: ignore[attr-defined]
    assert light.tpot_ms < busy.tpot_ms and light.ttft_ms < busy.ttft_ms
    too_much = _at(500.0)
    (miss,) = [m for m in too_much.misses if m.metric == "rate"]  # type: ignore[attr-defined]
    served = too_much.figures.requests_per_s  # type: ignore[attr-defined]
    assert miss.target == 500.0 and miss.value == served < 500.0 and miss.gap == pytest.approx(1 - served / 500.0)


def test_a_decode_pool_runs_the_batch_the_rate_puts_on_it() -> None:
    cluster = make_cluster("H100", 8)
    work = Workload(isl=2048, osl=256, rate=4.0)
    layout = PhaseStrategy(tp=2)
    pricer = StepPricer.for_workload(LLAMA_8B, cluster, layout, work)
    prefill = prefill_worker(LLAMA_8B, cluster, layout, work)
    assert prefill is not None
    full = max(decode_workers(LLAMA_8B, cluster, layout, work, pricer), key=lambda d: d.sequences)
    [option] = pool_options(LLAMA_8B, cluster, prefill, full, work, budget=8, counts=(1, 1), pricer=pricer)
    running = option.worker_concurrency
    assert running < full.sequences, "a decode worker at 4 requests/s runs fewer sequences than its fullest batch"
    steps = work.osl - 1
    assert running == math.ceil(4.0 * steps * option.figures.tpot_ms / 1e3 - 1e-6)
    assert option.figures.tpot_ms == pytest.approx(pricer.step_s(running, 0) * 1e3, rel=0.05)
    assert option.figures.tpot_ms < full.step_s * 1e3 and option.figures.requests_per_s == 4.0
