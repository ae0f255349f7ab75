"""The serving model: mixed-step pricing, continuous and static steady states, memory per replica, xPyD pools."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.measured.database import measured_available
from shardplan.tools.cost.memory import memory_report, memory_reports
from shardplan.tools.serving.aggregated import replica_capacity
from shardplan.tools.serving.disaggregated import decode_workers, pool_options, prefill_worker
from shardplan.tools.serving.engine_limits import engine_seq_cap
from shardplan.tools.serving.steady import continuous_point, static_point
from shardplan.tools.serving.steps import StepPricer

LLAMA_70B = load_model("meta-llama/Llama-3.1-70B")
H200_8 = make_cluster("H200", 8)
LLAMA_8B = load_model("meta-llama/Llama-3.1-8B")
H100 = make_cluster("H100", 1)
WORK = Workload(isl=3000, osl=300)


@pytest.fixture(scope="module")
def tp4() -> StepPricer:
    return StepPricer(LLAMA_70B, H200_8, PhaseStrategy(tp=4), WORK.isl, WORK.osl)


@pytest.mark.parametrize("backend", ["auto", "roofline"])
@pytest.mark.parametrize(
    ("name", "layout", "isl"),
    [("meta-llama/Llama-3.1-8B", PhaseStrategy(tp=1), 1024), ("Qwen/Qwen3-30B-A3B", PhaseStrategy(tp=1), 4096)],
)
def test_a_step_carrying_one_whole_prompt_costs_about_a_prefill(
    name: str, layout: PhaseStrategy, isl: int, backend: str
) -> None:
    # The prompt's tokens pay linear work and causal attention, not a decode attention kernel per token:
    # priced as a chunk, one whole prompt costs what a prefill of it costs, up to the interpolation.
    pricer = StepPricer(load_model(name), make_cluster("H100", 8), layout, isl, 256, backend=backend)  # type: ignore[arg-type]
    assert pricer.prefill_attention_s(isl) > 0
    assert pricer.chunk_pass_s(0, isl) == pytest.approx(pricer.prefill_s(1), rel=0.1)


def test_a_mixed_step_reads_the_weights_once(tp4: StepPricer) -> None:
    decode, prefill = 32, 2048
    mixed = tp4.step_s(decode, prefill)
    # Cheaper than a decode step plus a separate prefill step (weights and launches counted twice) ...
    assert mixed < tp4.step_s(decode, 0) + tp4.step_s(0, prefill)
    # ... and dearer than either part alone.
    assert mixed > max(tp4.step_s(decode, 0), tp4.step_s(0, prefill))


def test_step_time_grows_with_tokens_and_context(tp4: StepPricer) -> None:
    times = [tp4.step_s(n, 0) for n in (1, 8, 64, 512, 4096)]
    assert times == sorted(times) and times[-1] > 2 * times[0]
    assert tp4.decode_attention_s(256) > tp4.decode_attention_s(16) > 0


def test_continuous_steady_state_obeys_littles_law(tp4: StepPricer) -> None:
    for concurrency in (1, 16, 64, 256):
        point = continuous_point(tp4, concurrency, WORK)
        assert point is not None
        in_flight = point.requests_per_s * (point.ttft_s + (WORK.osl - 1) * point.tpot_s)
        assert in_flight == pytest.approx(concurrency, rel=0.01)
        assert point.tokens_per_s == pytest.approx(point.requests_per_s * WORK.osl)


def test_more_concurrency_raises_throughput_and_tpot(tp4: StepPricer) -> None:
    points = [continuous_point(tp4, c, WORK) for c in (1, 8, 32, 128)]
    assert all(p is not None for p in points)
    rates = [p.tokens_per_s for p in points if p]
    tpots = [p.tpot_s for p in points if p]
    assert rates == sorted(rates) and tpots == sorted(tpots)


def test_prefill_chunks_slow_the_decode_steps_they_ride_in(tp4: StepPricer) -> None:
    point = continuous_point(tp4, 64, WORK)
    assert point is not None and 0 < point.prefill_chunk <= WORK.max_batched_tokens
    assert point.tpot_s > tp4.step_s(point.decoding, 0)


def test_static_batching_makes_ttft_grow_with_the_batch_continuous_does_not(tp4: StepPricer) -> None:
    static = [static_point(tp4, c, WORK.model_copy(update={"batching": "static"})) for c in (8, 64)]
    assert static[1].ttft_s > 6 * static[0].ttft_s
    continuous = [continuous_point(tp4, c, WORK) for c in (8, 64)]
    assert continuous[0] and continuous[1] and continuous[1].ttft_s < 2 * continuous[0].ttft_s
    assert continuous[1].ttft_s < static[1].ttft_s


def test_concurrency_beyond_the_step_budget_is_not_served(tp4: StepPricer) -> None:
    assert continuous_point(tp4, 300, WORK.model_copy(update={"max_batched_tokens": 256})) is None


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from(["meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "Qwen/Qwen3-30B-A3B"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    isl=st.integers(64, 32_000),
    osl=st.integers(1, 4_000),
    utilization=st.floats(0.5, 1.0),
    batching=st.sampled_from(["continuous", "static"]),
)
def test_max_batch_agrees_with_fits(model: str, tp: int, isl: int, osl: int, utilization: float, batching: str) -> None:
    spec, gpu = load_model(model), make_cluster("H100", 8).gpu
    layout = PhaseStrategy(tp=tp)
    work = Workload(isl=isl, osl=osl, batch=1, gpu_memory_utilization=utilization, batching=batching)  # type: ignore[arg-type]
    report = memory_report(spec, gpu, layout, work, "shared", isl + osl, layout)
    most = report.max_batch
    if most == 0:
        assert not report.fits
        return
    at = memory_reports(spec, gpu, Strategy(prefill=layout, decode=layout), work.at_concurrency(most))[0]
    over = memory_reports(spec, gpu, Strategy(prefill=layout, decode=layout), work.at_concurrency(most + 1))[0]
    assert at.fits and not over.fits
    assert at.max_batch == most  # the same answer whatever batch the report was made at


def test_less_memory_for_the_engine_holds_fewer_sequences() -> None:
    layout = PhaseStrategy(tp=4)
    roomy = replica_capacity(LLAMA_70B, H200_8, layout, WORK)
    tight = replica_capacity(LLAMA_70B, H200_8, layout, WORK.model_copy(update={"gpu_memory_utilization": 0.6}))
    assert roomy > tight > 0


def test_split_pools_count_every_gpu_and_serve_the_slower_pools_rate() -> None:
    work = Workload(isl=2048, osl=256)
    prefill = prefill_worker(LLAMA_70B, H200_8, PhaseStrategy(tp=4), work)
    decodes = decode_workers(LLAMA_70B, H200_8, PhaseStrategy(tp=4), work)
    assert prefill is not None and decodes
    # A batch one prefill worker can feed (a faster decode worker would saturate the prefill pool).
    decode = max((d for d in decodes if d.requests_per_s < prefill.requests_per_s), key=lambda d: d.sequences)
    options = pool_options(LLAMA_70B, H200_8, prefill, decode, work, budget=8)
    assert options
    for option in options:
        x, y = option.strategy.prefill.dp, option.strategy.decode.dp
        assert option.figures.gpus_used == 4 * x + 4 * y <= 8
        f = option.figures
        assert f.requests_per_s == pytest.approx(min(x * prefill.requests_per_s, y * decode.requests_per_s))
        assert f.tokens_per_s_per_gpu == pytest.approx(f.tokens_per_s / f.gpus_used)
        assert option.kv_transfer_ms > 0 and option.figures.ttft_ms > prefill.step_s * 1e3


def test_the_serving_modules_examples_hold() -> None:
    import doctest

    from shardplan import bisection, packing
    from shardplan.contracts import strategy
    from shardplan.tools.cost import memory
    from shardplan.tools.serving import engine_limits, options, placement, steady, steps

    for module in (steps, steady, placement, options, memory, packing, strategy, bisection, engine_limits):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_a_prefill_step_of_cached_prompts_takes_no_more_than_the_engine_runs() -> None:
    # Behind a 99.9% prefix hit a 8,192-token budget would fit 8,192 one-token prompts a step; vLLM runs 1,024
    # sequences a step on an 80 GB GPU. The prompts waiting at a step's start are then a chain bounded by the
    # arrivals a step sees, not by the step's size (the size made a 27k-square matrix: 5 GiB and minutes).
    work = Workload(isl=1024, osl=128, rate=3.0, prefix_hit=0.999)
    worker = prefill_worker(LLAMA_8B, H100, PhaseStrategy(tp=1), work)
    assert worker is not None
    assert worker.prompts == engine_seq_cap(work.engine, H100.gpu) == 1024
    assert worker.single_s <= worker.ttft_s(3.0) < 1.1 * worker.single_s  # an idle worker, nearly always


def test_a_prefill_pools_capacity_counts_the_prompts_of_its_step() -> None:
    layout = PhaseStrategy(tp=2)
    work = Workload(isl=8192, osl=256, batch=1, prefill_batch=1)
    report = memory_report(LLAMA_70B, H200_8.gpu, layout, work, "prefill", work.isl)
    most = report.max_batch
    assert 0 < most < 10_000
    fits = memory_report(LLAMA_70B, H200_8.gpu, layout, work.at_concurrency(most, most), "prefill", work.isl)
    over = memory_report(LLAMA_70B, H200_8.gpu, layout, work.at_concurrency(most + 1, most + 1), "prefill", work.isl)
    assert fits.fits and not over.fits


def test_a_step_pricer_prices_under_its_engine_and_backend() -> None:
    """The serving model prices with the workload's engine tables, or the roofline alone when asked."""
    layout = PhaseStrategy(tp=4)
    sglang = Workload(isl=1024, osl=128, engine="sglang")
    pricer = StepPricer.for_workload(LLAMA_70B, H200_8, layout, sglang)
    assert pricer.engine == "sglang" and pricer.backend == "auto"
    roofline = StepPricer.for_workload(LLAMA_70B, H200_8, layout, sglang, backend="roofline")
    vllm = StepPricer.for_workload(LLAMA_70B, H200_8, layout, sglang.model_copy(update={"engine": "vllm"}))
    assert min(p.step_s(16, 0) for p in (pricer, roofline, vllm)) > 0
    if measured_available():  # shared samples are keyed by engine and backend, not reused across them
        assert pricer.step_s(16, 0) != roofline.step_s(16, 0)
        assert pricer.step_s(16, 0) != vllm.step_s(16, 0)


QWEN3_30B = load_model("Qwen/Qwen3-30B-A3B")
H200_4 = make_cluster("H200", 4)


@pytest.mark.parametrize("groups", [2, 4])
def test_a_prompts_attention_is_one_attention_groups_work(groups: int) -> None:
    # Under attention DP a prompt attends on the one group that holds it: its attention must not grow with
    # the number of groups (nor carry the other groups' prompts' projections and experts).
    isl = 16384  # long enough that the causal attention is well above the sampling noise
    alone = StepPricer(QWEN3_30B, H200_4, PhaseStrategy(tp=1), isl, 512).prefill_attention_s(isl)
    spread = StepPricer(QWEN3_30B, H200_4, PhaseStrategy(adp=groups, ep=groups), isl, 512).prefill_attention_s(isl)
    assert alone > 0
    assert spread == pytest.approx(alone, rel=0.25)


def test_attention_dp_moe_decode_is_not_priced_far_slower_than_tensor_parallel() -> None:
    # AIConfigurator's measured-data estimate has adp=4 (experts over EP=4) at least as fast as tp=4 for this
    # MoE at 128 sequences; the prompt chunks riding in the steps must not make attention DP look ~2x slower.
    work = Workload(isl=4096, osl=512)
    tpot = {}
    for name, layout in {"adp": PhaseStrategy(adp=4, ep=4), "tp": PhaseStrategy(tp=4)}.items():
        point = continuous_point(StepPricer(QWEN3_30B, H200_4, layout, work.isl, work.osl), 128, work)
        assert point is not None
        tpot[name] = point.tpot_s
    assert tpot["adp"] <= 1.3 * tpot["tp"]


def test_each_attention_dp_rank_runs_as_many_sequences_as_its_own_step_budget_carries() -> None:
    # TensorRT-LLM's DeepSeek-R1 max-throughput run on 8 B200: 7,168 clients over 8 attention-DP ranks with
    # --max_num_tokens 2048 per rank (896 sequences a rank). One rank's budget would cap the replica at 2,047.
    from shardplan.contracts.strategy import parse_strategy
    from shardplan.tools.serving.aggregated import aggregated_options

    model = load_model("deepseek-ai/DeepSeek-V3", weight_dtype="fp4", kv_dtype="fp8")
    cluster = make_cluster("B200", 8)
    layout = parse_strategy("adp=8,ep=8").decode
    for budget in (2048, 8192):
        workload = Workload(isl=1024, osl=2048, batch=7168, engine="trtllm", max_batched_tokens=budget)
        (option,) = aggregated_options(model, cluster, layout, workload, budget=8, replicas=1)
        assert option.running_cap is None and option.worker_concurrency == 7168
    # per rank, the budget still bounds the running sequences: 1,024 a rank fill a 1,024-token budget
    tight = Workload(isl=1024, osl=2048, batch=8192, engine="trtllm", max_batched_tokens=1024)
    (capped,) = aggregated_options(model, cluster, layout, tight, budget=8, replicas=1)
    assert capped.running_cap == 8 * 1023
    # a split deployment's decode workers likewise: their grid reaches past one rank's budget
    workers = decode_workers(model, cluster, layout, tight)
    assert max(w.sequences for w in workers) > 1024
