"""Prefix caching priced: prefill computes the uncached rest of each prompt (its attention still reads the cached
tokens), the shared prefix's KV is held once, a split deployment's prefill pool shrinks when it bound the rate; the
simulator's LRU prefix cache, its routing and its traces agree with that.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from shardplan.contracts.constraints import parse_constraints
from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.traffic import Traffic
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.builder.build import build_dag
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.planning import prefix_cache as planning_prefix_cache
from shardplan.tools.planning.planner import plan
from shardplan.tools.serving.aggregated import replica_capacity
from shardplan.tools.serving.deployments import given_deployment
from shardplan.tools.serving.steady import continuous_point, static_point
from shardplan.tools.serving.steps import StepPricer
from shardplan.tools.simulation import prefix_cache, prefixes, router
from shardplan.tools.simulation.engine import Engine
from shardplan.tools.simulation.loop import Workers, run_events
from shardplan.tools.simulation.prefix_cache import PrefixCache
from shardplan.tools.simulation.prefixes import shared_prefixes
from shardplan.tools.simulation.run import SimulationOptions, simulate
from shardplan.tools.simulation.state import Requests
from shardplan.tools.traffic.stream import RequestStream, request_stream
from shardplan.tools.traffic.traces import read_trace

LLAMA_8B = load_model("llama-3.1-8b")
H100 = make_cluster("H100", 1)
H100_8 = make_cluster("H100", 8)
TP1 = PhaseStrategy()
ROOFLINE = SimulationOptions(backend="roofline")
DONE_WHEN: dict[str, float] = {"isl": 8192, "osl": 64, "rate": 20.0, "ttft_ms": 2000.0}
"""The split-pool request: long prompts, short outputs, a rate; the prefill pool sizes the deployment."""


def test_doctests() -> None:
    for module in (prefix_cache, prefixes, router, planning_prefix_cache):
        assert doctest.testmod(module).failed == 0


def test_prefill_attention_of_the_uncached_rest_is_the_whole_prompt_s_less_the_prefix_s() -> None:
    # The uncached queries attend causally among themselves and to every cached key: 1 - h^2 of a whole prompt's
    # causal work (FlashAttention's bottom-right causal mask), while the projections compute 1 - h of the tokens.
    def prefill_work(hit: float) -> tuple[float, float]:
        dag = build_dag(LLAMA_8B, H100, parse_strategy("tp=1"), Workload(isl=4096, osl=16, batch=1, prefix_hit=hit))
        nodes = [n for n in dag.nodes if getattr(n, "phase", None) == "prefill" and getattr(n, "flops", 0)]
        attention = sum(n.flops for n in nodes if n.kind == "attention")
        linear = sum(n.flops for n in nodes if n.kind == "linear")
        return attention, linear

    whole, projections = prefill_work(0.0)
    for hit in (0.25, 0.5, 0.9):
        attention, linear = prefill_work(hit)
        assert attention / whole == pytest.approx(1 - hit**2, rel=2e-3)
        assert linear / projections == pytest.approx(1 - hit, rel=2e-3)


def test_ttft_falls_with_the_hit_rate_and_never_below_the_attention_left() -> None:
    ttfts = []
    for hit in (0.0, 0.25, 0.5, 0.75, 0.95):
        workload = Workload(isl=8192, osl=256, rate=0.5, prefix_hit=hit)
        pricer = StepPricer.for_workload(LLAMA_8B, H100, TP1, workload, backend="roofline")
        point = continuous_point(pricer, 1.0, workload)
        assert point is not None
        # The attention of the uncached tokens over the whole prompt is still paid, and the projections of them.
        floor = pricer.prefill_attention_s(workload.prefill_tokens) + pricer.linear_s(workload.prefill_tokens)
        assert point.ttft_s >= floor * 0.999
        ttfts.append(point.ttft_s)
    assert all(later < earlier for earlier, later in zip(ttfts, ttfts[1:], strict=False))


def test_no_hit_changes_no_figure() -> None:
    # A hit rate too small to cache one token takes exactly the path of none: every figure equal, and no effect.
    plain = Workload(isl=2048, osl=256, rate=2.0)
    tiny = plain.model_copy(update={"prefix_hit": 1e-6})
    assert tiny.prefill_tokens == plain.prefill_tokens == 2048
    strategy = parse_strategy("tp=1")
    before = [o.figures for o in given_deployment(LLAMA_8B, H100, strategy, plain)]
    after = [o.figures for o in given_deployment(LLAMA_8B, H100, strategy, tiny)]
    assert before == after
    assert replica_capacity(LLAMA_8B, H100, TP1, plain) == replica_capacity(LLAMA_8B, H100, TP1, tiny)
    assert planning_prefix_cache.prefix_cache_effect(LLAMA_8B, H100, strategy, plain, None) is None


def test_the_largest_fitting_concurrency_grows_with_the_hit_rate() -> None:
    held = [replica_capacity(LLAMA_8B, H100, TP1, Workload(isl=8192, osl=256, prefix_hit=h))
            for h in (0.0, 0.25, 0.5, 0.75, 0.9)]
    assert all(later > earlier for earlier, later in zip(held, held[1:], strict=False))
    # The prefix is held once: KV per sequence (1 - h) isl + osl, so about (isl + osl) / ((1 - h) isl + osl) more.
    assert held[2] / held[0] == pytest.approx((8192 + 256) / (4096 + 256), rel=0.05)


def test_a_split_deployment_whose_prefill_pool_binds_needs_fewer_prefill_gpus() -> None:
    split = parse_constraints(["disaggregated"])
    without = plan(PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=8, workload=Workload(**DONE_WHEN),
                               constraints=split))
    cached = plan(PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=8,
                              workload=Workload(**DONE_WHEN, prefix_hit=0.5), constraints=split))
    assert without.status == cached.status == "ok"
    assert without.strategy is not None and cached.strategy is not None
    assert without.strategy.disaggregated and cached.strategy.disaggregated
    assert cached.strategy.prefill.gpus < without.strategy.prefill.gpus
    assert cached.figures is not None and without.figures is not None
    assert cached.figures.ttft_ms < without.figures.ttft_ms
    effect = cached.dag_cost.prefix_cache if cached.dag_cost is not None else None
    assert effect is not None and effect.hit == 0.5 and effect.prefill_tokens_computed == 4096
    assert effect.prefill_gpus_without is not None and effect.prefill_gpus_without > cached.strategy.prefill.gpus
    assert effect.max_concurrency is not None and effect.max_concurrency_without is not None
    assert effect.max_concurrency > effect.max_concurrency_without
    assert "prefill pool bounds this split deployment" in cached.explanation
    assert f"{counted(cached.strategy.prefill.gpus, 'prefill GPU')} serve the rate" in cached.explanation
    # Only the uncached tokens' KV moves to the decode worker, whose prefix cache holds the prefix.
    assert cached.deployment is not None and without.deployment is not None
    assert cached.deployment.kv_transfer_ms < without.deployment.kv_transfer_ms
    assert without.dag_cost is not None and without.dag_cost.prefix_cache is None


class _LinearSteps:
    """10 ms a step, 1 ms a decode token, 0.1 ms a prompt token: a price simple enough to reason about."""

    def step_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        return 0.010 + 0.001 * decode_tokens + 0.0001 * prefill_tokens

    def chunk_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        return self.step_s(decode_tokens, prefill_tokens)


def _replay(groups: list[int], prefix: int, isl: int, blocks: int, gap_s: float = 1.0) -> Requests:
    """One engine with a prefix cache of ``blocks`` blocks serving requests of ``groups`` (in order, ``gap_s``
    apart), each sharing ``prefix`` tokens of an ``isl``-token prompt with its group."""
    count = len(groups)
    stream = RequestStream(np.arange(count) * gap_s, np.full(count, isl), np.full(count, 4), np.array(groups))
    requests = Requests.from_stream(stream, np.full(count, prefix))
    engine = Engine(requests, _LinearSteps(), blocks, 64, 8192, prefix=PrefixCache(16))
    run_events(requests, Workers([engine]))
    return requests


def test_one_shared_prefix_hits_after_its_first_request() -> None:
    requests = _replay([0] * 50, prefix=512, isl=1024, blocks=400)
    assert requests.hit[0] == 0
    assert requests.hit[1:].tolist() == [512] * 49


def test_more_groups_than_the_cache_holds_evict_each_other() -> None:
    # 20 groups of 32 prefix blocks taken in turn, 200 blocks of cache: least recently used goes first, so each
    # group was evicted before its turn comes back. Three groups fit and hit.
    thrashing = _replay(list(range(20)) * 5, prefix=512, isl=1024, blocks=200)
    assert thrashing.hit.max() == 0
    fitting = _replay(list(range(3)) * 30, prefix=512, isl=1024, blocks=200)
    assert fitting.hit[3:].min() == 512


def test_a_prefix_running_sequences_use_is_never_evicted() -> None:
    cache = PrefixCache(16)
    cache.acquire(1, 160)
    cache.acquire(2, 160)
    cache.release(2)
    cache.evict(0)
    assert cache.held(1) == 160 and cache.held(2) == 0 and cache.pinned == 10
    cache.release(1)
    cache.evict(0)
    assert cache.held(1) == 0 and cache.pinned == 0


def test_cache_affinity_keeps_a_group_on_the_replica_that_holds_it() -> None:
    # Two replicas, three groups in turn: affinity sends every later request of a group where its prefix is cached,
    # so each group's prefix is computed once; round robin alternates each group over both replicas (twice).
    stream = RequestStream(np.arange(90) * 0.5, np.full(90, 1024), np.full(90, 4), np.array(list(range(3)) * 30))

    def misses(router: str) -> int:
        requests = Requests.from_stream(stream, np.full(90, 512))
        engines = [Engine(requests, _LinearSteps(), 400, 64, 8192, prefix=PrefixCache(16)) for _ in range(2)]
        run_events(requests, Workers(engines, router))  # type: ignore[arg-type]
        return int((requests.hit == 0).sum())

    assert misses("cache_affinity") == 3
    assert misses("round_robin") == 6


def test_the_simulated_hit_rate_and_ttft_agree_with_the_analytic_model() -> None:
    for hit in (0.5, 0.9):
        workload = Workload(isl=2048, osl=128, rate=4.0, prefix_hit=hit)
        option = given_deployment(LLAMA_8B, H100, parse_strategy("tp=1"), workload)[0]
        run = simulate(LLAMA_8B, H100, option, workload, requests=800, seed=1, options=ROOFLINE)
        summary = run.summary
        assert summary.prefix_hit == pytest.approx(hit, abs=0.01)
        # The low-load tolerance of tests/test_analytic_tracks_simulation.py: 10% on TTFT.
        assert summary.figures.ttft_ms == pytest.approx(option.figures.ttft_ms, rel=0.10)
        assert any("prefix caching" in note for note in summary.notes)


def test_a_trace_s_prefix_token_column_is_read_and_used(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "rag.csv"
    path.write_text("input_tokens,output_tokens,doc_id,cached_tokens\n"
                    + "".join(f"{1000 + i},50,{i % 2},{600 if i >= 2 else 0}\n" for i in range(40)))
    trace = read_trace(str(path))
    assert trace.prefix_tokens is not None and trace.prefix_tokens[:3].tolist() == [0, 0, 600]
    workload = Workload(isl=1020, osl=50, traffic=Traffic(trace=str(path)), rate=1.0)
    stream = request_stream(workload, requests=40)
    shares = shared_prefixes(stream, 0.0)
    assert shares is not None and "prefix tokens" in shares.rule
    assert shares.prefix[2:].min() == 600


@pytest.mark.parametrize("cell", ["lots", "-3", "2000", "1.5"])
def test_a_malformed_prefix_token_cell_is_one_line_naming_the_column(tmp_path, cell: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.csv"
    path.write_text(f"input_tokens,output_tokens,prefix_tokens\n1000,50,0\n1000,50,{cell}\n")
    with pytest.raises(InputError) as caught:
        read_trace(str(path))
    message = str(caught.value)
    assert "\n" not in message and "column 'prefix_tokens'" in message and "row 2" in message
    assert caught.value.field == "workload"


def test_conversation_groups_reuse_the_last_turn() -> None:
    stream = RequestStream(np.zeros(4), np.array([100, 200, 400, 50]), np.array([20, 30, 40, 5]),
                           np.array([0, 0, 0, 1]))
    shares = shared_prefixes(stream, 0.0)
    assert shares is not None
    assert shares.prefix.tolist() == [0, 120, 230, 0]
    assert shares.keeps.tolist() == [120, 230, 440, 55]


def test_static_batching_prefills_the_uncached_rest() -> None:
    ttfts = []
    for hit in (0.0, 0.5, 0.9):
        workload = Workload(isl=4096, osl=64, batch=8, batching="static", prefix_hit=hit)
        pricer = StepPricer.for_workload(LLAMA_8B, H100, TP1, workload, backend="roofline")
        ttfts.append(static_point(pricer, 8, workload).ttft_s)
    assert ttfts[0] > ttfts[1] > ttfts[2]


def test_a_trace_s_groups_alone_give_the_simulated_hit_rate_as_the_effect(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Conversations: each turn of a session repeats the last turn's prompt and answer. No --prefix-hit: the
    # steady state prices none, the simulated run finds the repeated turns in its cache and the effect says so.
    rows = []
    for turn in range(5):
        for session in range(8):
            rows.append(f"{400 + 300 * turn},{100},s{session}\n")
    path = tmp_path / "chat.csv"
    path.write_text("input_tokens,output_tokens,session_id\n" + "".join(rows))
    workload = Workload(isl=1000, osl=100, traffic=Traffic(trace=str(path)), rate=2.0)
    strategy = parse_strategy("tp=1")
    option = given_deployment(LLAMA_8B, H100, strategy, workload)[0]
    run = simulate(LLAMA_8B, H100, option, workload, requests=40, seed=0, options=ROOFLINE)
    assert run.summary.prefix_hit is not None and 0.3 < run.summary.prefix_hit < 0.8
    simulated = option.model_copy(update={"simulation": run.summary})
    effect = planning_prefix_cache.prefix_cache_effect(LLAMA_8B, H100, strategy, workload, simulated)
    assert effect is not None and effect.source == "simulation" and effect.hit == run.summary.prefix_hit
    assert planning_prefix_cache.prefix_cache_effect(LLAMA_8B, H100, strategy, workload, option) is None


def test_a_warm_cache_spares_the_prompts_an_earlier_run_left(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Forty distinct prompts, each its own group and wholly its prefix (a benchmark client resending the prompts of
    # its last run): the run that finds the first twenty cached computes only their last block, the rest in full.
    path = tmp_path / "rerun.json"
    prompts = [2048] * 40
    path.write_text(f'{{"input_lens": {prompts}, "output_lens": {[32] * 40}, '
                    f'"prefix_group": {list(range(40))}, "prefix_tokens": {prompts}}}')
    workload = Workload(isl=2048, osl=32, rate=2.0, traffic=Traffic(trace=str(path)))
    option = given_deployment(LLAMA_8B, H100, parse_strategy("tp=1"), workload)[0]

    def run(warm: tuple[tuple[int, int], ...]):  # type: ignore[no-untyped-def]
        options = SimulationOptions(backend="roofline", warm_prefixes=warm)
        return simulate(LLAMA_8B, H100, option, workload, requests=40, seed=1, options=options)

    cold, warm = run(()), run(tuple((i, 2048) for i in range(20)))
    assert cold.requests.hit.max() == 0
    assert warm.requests.hit[:20].tolist() == [2032] * 20 and warm.requests.hit[20:].max() == 0
    ttft = (warm.requests.first_token - warm.requests.arrival)[:20]
    assert float(ttft.mean()) < 0.5 * float((cold.requests.first_token - cold.requests.arrival)[:20].mean())
    assert any("start warm: 20 prefixes" in note for note in warm.summary.notes)


def test_warm_prefixes_past_the_kv_cache_keep_the_most_recent() -> None:
    cache = PrefixCache(16)
    cache.warm([(group, 160) for group in range(10)], room=35)
    assert [cache.held(g) for g in range(10)] == [0] * 7 + [160] * 3
    assert cache.pinned == 0 and cache.evictions == 0
