"""Invariants of the engine simulator: what every replay must satisfy whatever it replays (conservation of requests
and tokens, ordered times and percentiles, the engines within their caps, Little's law on the run itself, a closed
loop's bound), the same seed giving the same run, and the compositions whose figures are known exactly (the KV
transfer in a split deployment's TTFT, ``fixed:N`` lengths, a trace's timestamps).

Each run is small (tens to a few hundred requests) and priced on the roofline (:mod:`simulation_checks`). The
scenarios marked with a bug in their name failed before its fix:

* ``pp`` with short outputs: under pipeline parallelism a prompt's first token leaves the pipeline after the
  step that carried its last chunk (``chunk_pass_s`` outlasts the round), but the scheduler decoded the sequence
  in the next steps all the same, so requests finished before their first token: negative TPOT, and a crash
  (``Percentiles`` refuses a negative P50) when most outputs were a few tokens. A sequence now sits out the steps
  before its first token is out, and a one-token request finishes when that token is out.
* speculation on a small KV cache: a decoding sequence's KV cache grows by the tokens it gains (up to
  ``ceil(A + 1)``), but the general step allocated one token's blocks, so the running set outgrew the cache
  (``kv_cache_peak`` above 1, refused by the summary's contract). Under prefix caching the blocks held were also
  recounted with the shared prefix's blocks as the sequence's own.
* speculation's last step: accepted drafts past a request's output length were counted as output tokens.
* attention data parallelism: each rank admits its share of ``max_num_seqs`` rounded up, but the summary reported
  the cap asked for, below what the replica ran when it was not a multiple of the ranks.
* attention data parallelism: a replica's KV-cache peak left out its ranks' cached prefixes and was taken after the
  step's finished sequences let their blocks go, so it came out below the mean in use (at a prefix hit of 0.9,
  0.6% against 1.0%; in a closed loop of identical requests, which finish together, without any prefix).
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pytest
import simulation_checks
from cli_helpers import run_main
from simulation_checks import QWEN3_30B, VARIED, WORK, Run, check_invariants, replay, workload

from shardplan.contracts.plan import PlanRequest
from shardplan.contracts.simulation import SimulationSummary
from shardplan.contracts.speculation import parse_speculation
from shardplan.contracts.strategy import parse_strategy
from shardplan.contracts.traffic import Traffic, parse_arrival
from shardplan.errors import InputError
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request
from shardplan.tools.simulation import grants, meter, pipeline, replica

SHORT = {"isl": "lognormal:mean=2048,cv=1,high=8000", "osl": "uniform:1,8"}
"""Long prompts and outputs of a few tokens: where a prompt's pass through a pipeline matters most."""
SMALL_KV = {"gpu_memory_utilization": 0.3}
"""Llama-3.1-8B on one H100 at 30% of its memory: a KV cache of about 40 such sequences, so a loop of hundreds of
clients preempts."""
EAGLE = parse_speculation("eagle:3", 1.7)

# id: (spec, workload, requests, rate, clients, options, model)
SCENARIOS = {
    "tp1-poisson-fixed": ("tp=1", WORK, 200, 8.0, None, {}, None),
    "tp1-gamma-varied": ("tp=1", workload("gamma:cv=3", **VARIED), 300, 10.0, None, {}, None),
    "dp2-least-outstanding": ("dp=2", workload(**VARIED), 300, 16.0, None, {"router": "least_outstanding"}, None),
    "tp1-closed-small-kv-preempts": ("tp=1", workload("closed:200", **VARIED, **SMALL_KV), 300, None, 200,
                                     {"max_num_seqs": 1000}, None),
    "tp1-closed-send-delay": ("tp=1", workload("closed:16", **VARIED), 200, None, 16, {"send_delay_s": 0.05}, None),
    "tp1-trtllm-small-kv": ("tp=1", workload("closed:100", **VARIED, **SMALL_KV, engine="trtllm"), 200, None, 100,
                            {"max_num_seqs": 1000}, None),
    "tp1-sglang-small-kv": ("tp=1", workload("closed:200", **VARIED, **SMALL_KV, engine="sglang"), 300, None, 200,
                            {"max_num_seqs": 1000}, None),
    "bug-sglang-open-small-kv": ("tp=1", workload(isl="lognormal:mean=8000,cv=0.5,high=20000", osl="uniform:1,400",
                                                  **SMALL_KV, engine="sglang"), 200, 4.0, None, {}, None),
    "adp2-sglang-closed": ("adp=2,ep=2", workload("closed:64", **VARIED, engine="sglang"), 200, None, 64, {},
                           QWEN3_30B),
    "tp1-prefix": ("tp=1", workload(**VARIED, prefix_hit=0.6), 200, 8.0, None, {}, None),
    "dp2-prefix-affinity": ("dp=2", workload(**VARIED, prefix_hit=0.6), 200, 16.0, None, {}, None),
    "bug-pp2-short-outputs": ("pp=2", workload("gamma:cv=4", **SHORT), 200, 6.0, None, {}, None),
    "bug-pp4-closed-one-token": ("pp=4", workload("closed:3", isl="fixed:3000", osl="fixed:1"), 60, None, 3, {},
                                 None),
    "bug-pp2-closed-small-kv": ("pp=2", workload("closed:200", isl=SHORT["isl"], osl="uniform:1,300", **SMALL_KV),
                                300, None, 200, {"max_num_seqs": 1000}, None),
    "bug-spec-open-outputs": ("tp=1", workload(**VARIED, speculation=parse_speculation("eagle:3", 2.5)), 200, 8.0,
                              None, {}, None),
    "bug-spec-small-kv": ("tp=1", workload("closed:150", **VARIED, **SMALL_KV, speculation=EAGLE), 300, None, 150,
                          {"max_num_seqs": 1000}, None),
    "tp1-sglang-spec-small-kv": ("tp=1", workload("closed:150", **VARIED, **SMALL_KV, speculation=EAGLE,
                                                  engine="sglang"), 300, None, 150, {"max_num_seqs": 1000}, None),
    "bug-spec-prefix-small-kv": ("tp=1", workload("closed:150", **VARIED, **SMALL_KV, speculation=EAGLE,
                                                  prefix_hit=0.6), 300, None, 150, {"max_num_seqs": 1000}, None),
    "split-varied": ("prefill:tp=1;decode:tp=1;disagg", workload(isl=VARIED["isl"], osl="uniform:1,300"), 200,
                     8.0, None, {}, None),
    "split-2x2-closed": ("prefill:dp=2;decode:dp=2;disagg", workload("closed:24", **VARIED), 200, None, 24, {},
                         None),
    "split-pp-decode": ("prefill:tp=1;decode:pp=2;disagg", workload(**SHORT), 200, 6.0, None, {}, None),
    "adp2-closed-small-kv": ("adp=2,ep=2", workload("closed:300", **VARIED, gpu_memory_utilization=0.5), 300,
                             None, 300, {"max_num_seqs": 1000}, QWEN3_30B),
    "bug-adp2-pp2-short-outputs": ("adp=2,ep=2,pp=2", workload(**SHORT), 200, 6.0, None, {}, QWEN3_30B),
    "bug-adp2-prefix-peak": ("adp=2,ep=2", workload(**VARIED, prefix_hit=0.9), 200, 6.0, None, {}, QWEN3_30B),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_run_conserves_its_requests_and_keeps_its_engines_within_their_caps(name: str) -> None:
    spec, work, requests, rate, clients, options, model = SCENARIOS[name]
    run = replay(spec, work, requests=requests, rate=rate, seed=1, **options,
                 **({"model": model} if model is not None else {}))
    check_invariants(run, clients, delayed="send_delay_s" in options)
    summary = run.summary
    if "small-kv" in name and "trtllm" not in name and "open" not in name:
        assert summary.kv_cache_peak > 0.9  # the scenario reaches what it is there for
        # SGLang holds room back for its running requests' outputs before it admits (test below); the others preempt.
        assert summary.preemptions > 0 or "sglang" in name
    if "trtllm" in name:
        # GUARANTEED_NO_EVICT: a request is admitted only when its whole sequence fits, so nothing is preempted.
        assert summary.preemptions == 0 and summary.kv_cache_peak > 0.5


def test_a_one_token_request_behind_a_pipeline_finishes_when_its_prompt_is_out() -> None:
    # pp=4, one client, one output token: TTFT is the prompt's pass through the four stages, and the request ends
    # there too (it used to end at the step's end, a round of the four lanes, before its own token was out).
    run = replay("pp=4", workload("closed:1", isl="fixed:4000", osl="fixed:1"), requests=5)
    r = run.requests
    assert np.array_equal(r.finish, r.first_token)
    assert (np.diff(r.arrival) > 0).all() and (r.arrival[1:] >= r.finish[:-1]).all()


@pytest.mark.parametrize(("asked", "cap"), [(2, 4), (10, 12), (8, 8)])
def test_an_attention_dp_replica_reports_the_cap_its_ranks_admit(asked: int, cap: int) -> None:
    # Four rank schedulers each admit their share of --max-num-seqs rounded up, at least one (as shardplan export
    # sets it): the replica's cap is four times that. The summary reported the number asked for, so a cap of 2
    # showed a mean running batch near 4 "at most 2".
    run = replay("adp=4,ep=4", workload("closed:40"), requests=80, model=QWEN3_30B, max_num_seqs=asked)
    check_invariants(run, clients=40)
    assert run.summary.max_num_seqs == cap
    ranks = run.sim.workers.engines[0].ranks  # type: ignore[attr-defined]
    assert [rank.peak_running for rank in ranks] == [cap // 4] * 4


def test_a_closed_loop_holds_exactly_its_clients_until_it_drains() -> None:
    # 8 clients and 400 requests of varied lengths: until the last request is sent, one is in flight per client.
    run = replay("tp=1", workload("closed:8", **VARIED), requests=400, seed=2)
    r = run.requests
    check_invariants(run, clients=8)
    last_sent = float(r.arrival.max())
    for moment in np.linspace(0.0, last_sent, 50)[1:-1]:
        assert int(((r.arrival <= moment) & (r.finish > moment)).sum()) == 8


@pytest.mark.parametrize("spec", ["tp=1", "prefill:tp=1;decode:tp=1;disagg"])
def test_the_same_seed_gives_the_same_run_and_another_seed_another(spec: str) -> None:
    work = workload("gamma:cv=2", **VARIED)

    def once(seed: int) -> Run:
        return replay(spec, work, requests=200, rate=8.0, seed=seed)

    first, again, other = once(4), once(4), once(5)
    assert first.summary.model_dump_json() == again.summary.model_dump_json()
    for field in ("arrival", "isl", "osl", "first_token", "finish"):
        assert np.array_equal(getattr(first.requests, field), getattr(again.requests, field))
        assert not np.array_equal(getattr(first.requests, field), getattr(other.requests, field))
    assert first.summary.figures != other.summary.figures


def test_a_closed_loop_of_fixed_lengths_draws_nothing_so_the_seed_changes_nothing() -> None:
    """Correct behaviour, not a lapse of determinism: a closed loop of fixed lengths draws no random number (no
    arrival times, no lengths), so two seeds replay the same run; only the summary's ``seed`` differs."""
    runs = [replay("tp=1", workload("closed:8"), requests=100, seed=seed).summary for seed in (0, 1)]
    assert runs[0].model_copy(update={"seed": 1}) == runs[1]


@pytest.mark.parametrize("spec", ["tp=1", "prefill:tp=1;decode:tp=1;disagg"])
@pytest.mark.parametrize("arrival", ["poisson", "gamma:cv=3", "closed:8"])
def test_fixed_lengths_written_as_a_distribution_replay_the_plain_lengths(spec: str, arrival: str) -> None:
    rate = None if arrival.startswith("closed") else 6.0
    plain = WORK.model_copy(update={"traffic": Traffic(arrival=parse_arrival(arrival))})
    written = workload(arrival, isl=f"fixed:{WORK.isl}", osl=f"fixed:{WORK.osl}")
    one, two = (replay(spec, w, requests=100, rate=rate, seed=3).summary for w in (plain, written))
    assert one.model_dump(exclude={"traffic"}) == two.model_dump(exclude={"traffic"})


def test_fixed_lengths_through_the_cli_are_the_plan_s_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100", gpus=1, workload=WORK)
    model, cluster = resolve_request(request)
    path = tmp_path / "plan.json"
    path.write_text(plan_for_strategy(request, model, cluster, parse_strategy("tp=1")).model_dump_json())
    base = ["simulate", str(path), "--rate", "5", "--requests", "100", "--seed", "2", "--json"]
    summaries = []
    for extra in ([], ["--isl-dist", f"fixed:{WORK.isl}", "--osl-dist", f"fixed:{WORK.osl}"], []):
        assert run_main([*base, *extra]) == 0
        summaries.append(SimulationSummary.model_validate(json.loads(capsys.readouterr().out)))
    assert summaries[0] == summaries[2]  # the CLI run repeats too
    assert summaries[0].model_dump(exclude={"traffic"}) == summaries[1].model_dump(exclude={"traffic"})


def test_a_split_deployment_s_ttft_is_its_prefill_step_then_its_kv_transfer() -> None:
    # Each request's first token is the end of the prefill step that carried it plus its own KV transfer; the
    # decode workers, offered more clients than their cap, run exactly their cap and never more.
    run = replay("prefill:dp=2;decode:dp=2;disagg", workload("closed:40", **VARIED), requests=200, seed=1,
                 sequences=8, max_num_seqs=8, record_steps=True)
    check_invariants(run, clients=40)
    workers, r = run.sim.workers, run.requests
    assert workers.prefill is not None and workers.transfer_s is not None
    ends = np.array(sorted(step.start_s + step.duration_s for step in workers.prefill.records))
    prefilled = r.first_token - workers.transfer_s
    nearest = ends[np.clip(np.searchsorted(ends, prefilled), 0, ends.size - 1)]
    assert np.allclose(prefilled, nearest, rtol=0, atol=1e-9)
    assert (workers.transfer_s > 0).all() and (r.first_token - r.scheduled >= workers.transfer_s - 1e-12).all()
    assert [engine.peak_running for engine in workers.engines] == [8, 8]  # type: ignore[attr-defined]
    assert run.summary.max_num_seqs == 8 and run.summary.mean_running_batch <= 8


def test_a_trace_replays_its_timestamps(tmp_path: Path) -> None:
    # Timestamps from 100 s (as logs write them): the requests arrive at the trace's times from its first request
    # (0 for the first), or on its clock scaled to a rate asked for; lengths are the rows'.
    rows = [(100.0 + 0.25 * i + 0.01 * (i % 3), 500 + 10 * i, 20 + i) for i in range(40)]
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n" + "".join(f"{t},{i},{o}\n" for t, i, o in rows))
    times = np.array([t for t, _, _ in rows]) - rows[0][0]
    traced = WORK.model_copy(update={"traffic": Traffic(trace=str(path), arrival=parse_arrival("trace"))})
    own = replay("tp=1", traced, requests=40)
    check_invariants(own)
    assert own.requests.arrival[0] == 0.0 and np.allclose(own.requests.arrival, times, rtol=0, atol=1e-9)
    assert own.requests.isl.tolist() == [i for _, i, _ in rows] and own.summary.rate is None
    scaled = replay("tp=1", traced, requests=40, rate=2.0)
    assert np.allclose(scaled.requests.arrival, times * (39 / times[-1]) / 2.0, rtol=1e-12)
    assert scaled.requests.isl.tolist() == own.requests.isl.tolist()


def test_the_examples_run() -> None:
    for module in (replica, pipeline, grants, meter, simulation_checks):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_trtllm_with_context_chunking_splits_prompts_under_the_budget() -> None:
    # Two 6,000-token prompts at once under an 8,192-token step: whole prompts (trtllm-serve's default) take a step
    # each, the second admitted a step later; with enable_chunked_prefill the second starts in the first step's
    # remaining 2,192 tokens, which makes the first step longer and the first prompt's token later.
    work = workload("closed:2", isl="fixed:6000", osl="fixed:4", engine="trtllm")
    whole = replay("tp=1", work, requests=2, sequences=2)
    chunked = replay("tp=1", work, requests=2, sequences=2, trtllm_chunked_context=True)
    for run in (whole, chunked):
        check_invariants(run, clients=2)
    assert whole.requests.scheduled[1] > 0 and (chunked.requests.scheduled == 0).all()
    assert chunked.requests.first_token[0] > whole.requests.first_token[0]
    assert any("enable_chunked_prefill" in note for note in chunked.summary.notes)
    assert not any("enable_chunked_prefill" in note for note in whole.summary.notes)


@pytest.mark.parametrize("lengths", ["fixed:12000", "uniform:2000,12000", "lognormal:mean=3000,cv=1"])
def test_trtllm_chunks_prompts_that_can_outgrow_its_step_budget(lengths: str) -> None:
    # TensorRT-LLM refuses a prompt longer than max_num_tokens unless chunked prefill is on, so a workload whose
    # prompts can be longer than the 8,192-token step (a cap above it, or none) runs chunked, as shardplan export
    # launches it: no step carries more than the budget, and short prompts of the mix share steps too.
    work = workload(isl=lengths, osl="fixed:16", engine="trtllm")
    run = replay("tp=1", work, requests=60, rate=2.0, seed=3, record_steps=True)
    check_invariants(run)
    steps = _steps(run)
    assert max(s.prefill_tokens + s.decode_tokens for s in steps) <= 8192
    assert sum(s.prefill_tokens for s in steps) == int(run.requests.isl.sum())
    assert any("enable_chunked_prefill, as shardplan export sets it" in note for note in run.summary.notes)
    # A prompt that fits a step may be split too: it starts in the room another step left.
    ends = {s.start_s: s.start_s + s.duration_s for s in steps if s.prefill_tokens}
    r = run.requests
    fits = [i for i in range(len(r)) if r.isl[i] <= 8192]
    assert not fits or any(r.first_token[i] > ends[r.scheduled[i]] + 1e-9 for i in fits)
    # Prompts that all fit a step keep trtllm-serve's default: each enters a step whole.
    short = replay("tp=1", workload(isl="uniform:2000,8000", osl="fixed:16", engine="trtllm"), requests=20,
                   rate=2.0, seed=3)
    assert not any("enable_chunked_prefill" in note for note in short.summary.notes)


def test_vllm_v0_refuses_a_prompt_longer_than_its_budget_before_the_run() -> None:
    # V0 without chunked prefill takes a prompt only whole: one longer than the step cannot run.
    work = workload(isl="fixed:12000", osl="fixed:16")
    with pytest.raises(InputError) as caught:
        replay("tp=1", work, requests=4, rate=1.0, vllm_v0_unchunked=True)
    assert caught.value.field == "max_batched_tokens"


def _steps(run: Run) -> list[replica.StepRecord]:
    return [record for worker in run.sim.workers.engines for record in getattr(worker, "records", [])]


@pytest.mark.parametrize("spec", ["tp=1", "pp=2"])
def test_sglang_runs_prompt_steps_apart_from_decode_steps_and_prompts_first(spec: str) -> None:
    # SGLang's scheduler: "Run prefill first if possible"; a step carries prompt chunks or decodes, never both
    # (--enable-mixed-chunk off). With room in the KV cache and seats free, no decode step leaves a prompt waiting.
    work = workload(**VARIED, engine="sglang")
    sglang = replay(spec, work, requests=300, rate=12.0, seed=2, record_steps=True)
    mixed = replay(spec, work, requests=300, rate=12.0, seed=2, record_steps=True, sglang_mixed_chunk=True)
    for run in (sglang, mixed):
        check_invariants(run)
    steps = _steps(sglang)
    assert steps and not any(s.decode_tokens and s.prefill_tokens for s in steps)
    assert any(s.prefill_tokens for s in steps) and any(s.decode_tokens for s in steps)
    assert all(s.waiting == 0 for s in steps if s.decode_tokens)
    assert any(s.decode_tokens and s.prefill_tokens for s in _steps(mixed))
    assert any("SGLang's scheduler" in note for note in sglang.summary.notes)
    assert not any("SGLang's scheduler" in note for note in mixed.summary.notes)


def test_sglang_decodes_wait_out_the_prompt_steps() -> None:
    # One long decode and, once it runs, prompts of 4,000 tokens arriving: each prompt step holds the decode back
    # for the whole step, where vLLM's mixed step carries its token along. Its TPOT is longer under SGLang.
    work = workload("closed:4", isl="fixed:4000", osl="fixed:64", engine="sglang")
    sglang = replay("tp=1", work, requests=40, seed=0)
    vllm = replay("tp=1", work.model_copy(update={"engine": "vllm"}), requests=40, seed=0)
    mixed = replay("tp=1", work, requests=40, seed=0, sglang_mixed_chunk=True)
    for run in (sglang, vllm, mixed):
        check_invariants(run, clients=4)
    tpot = {name: float(np.mean((r.requests.finish - r.requests.first_token) / (r.requests.osl - 1)))
            for name, r in (("sglang", sglang), ("vllm", vllm), ("mixed", mixed))}
    assert tpot["sglang"] > tpot["vllm"]
    assert tpot["mixed"] == pytest.approx(tpot["vllm"])


def test_vllm_v0_without_chunked_prefill_runs_whole_prompts_in_steps_of_their_own() -> None:
    # vLLM's V0 engine with chunked prefill off (MLA models from v0.7.1 until MLA's chunked prefill): a step carries
    # whole prompts, up to the budget, or decodes, prompts first. Prompts longer than the 8,192-token step of today's
    # vLLM enter whole under the budget the run sets (max_model_len).
    work = workload(isl="uniform:6000,12000", osl="uniform:16,128", max_batched_tokens=32768)
    v0 = replay("tp=1", work, requests=200, rate=1.5, seed=4, record_steps=True, vllm_v0_unchunked=True)
    v1 = replay("tp=1", work, requests=200, rate=1.5, seed=4, record_steps=True)
    for run in (v0, v1):
        check_invariants(run)
    steps = _steps(v0)
    assert not any(s.decode_tokens and s.prefill_tokens for s in steps)
    # Whole prompts: each request's first token comes at the end of the very step that admitted it.
    ends = {s.start_s: s.start_s + s.duration_s for s in steps if s.prefill_tokens}
    r = v0.requests
    assert all(r.first_token[i] == pytest.approx(ends[r.scheduled[i]]) for i in range(len(r)))
    assert sum(s.prefill_tokens for s in steps) == int(r.isl.sum())
    assert any("V0 scheduler" in note for note in v0.summary.notes)
    assert any(s.decode_tokens and s.prefill_tokens for s in _steps(v1))


def test_requests_longer_than_the_model_s_context_are_refused_as_the_engine_would() -> None:
    # An uncapped distribution can draw prompts past the 131,072-token context: the engine refuses those, so the
    # simulation does too, naming how many and the longest, rather than running requests no engine would.
    with pytest.raises(InputError) as caught:
        replay("tp=1", workload(isl="lognormal:mean=60000,cv=1", osl="fixed:16"), requests=200, rate=0.01)
    assert caught.value.field == "lengths" and "context of 131072 tokens" in str(caught.value)


def test_vllm_runs_no_more_sequences_than_its_step_carries_tokens() -> None:
    # Open arrivals meet vLLM's default cap (1,024 on an H100), which vLLM itself refuses above a 256-token step, and
    # so is a cap asked for: the run caps the running set at the budget and says so. SGLang keeps the cap asked for.
    work = workload(isl="fixed:64", osl="fixed:32", max_batched_tokens=256)
    for run in (replay("tp=1", work, requests=400, rate=40.0), replay("tp=1", work, requests=40, rate=4.0,
                                                                      max_num_seqs=300)):
        check_invariants(run)
        assert run.summary.max_num_seqs == 256
        assert any("refuses max_num_seqs above max_num_batched_tokens" in note for note in run.summary.notes)
    sglang = replay("tp=1", work.model_copy(update={"engine": "sglang"}), requests=40, rate=4.0, max_num_seqs=300)
    assert sglang.summary.max_num_seqs == 300


def test_sglang_admits_only_what_its_reservation_leaves_room_for() -> None:
    # SGLang's PrefillAdder admits a request only when its prompt and output (up to 4,096 tokens) fit beside
    # new_token_ratio of the running requests' remaining outputs, so on a small KV cache it retracts nothing where
    # vLLM, admitting on a prompt's blocks, preempts; it runs fewer sequences at once for it. Its ratio falls from
    # 0.7 to 0.098 over 600 decode steps and stays there while nothing is retracted.
    work = workload("closed:200", **VARIED, **SMALL_KV)
    sglang = replay("tp=1", work.model_copy(update={"engine": "sglang"}), requests=300, seed=1, max_num_seqs=1000)
    vllm = replay("tp=1", work, requests=300, seed=1, max_num_seqs=1000)
    check_invariants(sglang, clients=200)
    assert sglang.summary.preemptions == 0 < vllm.summary.preemptions
    assert sglang.summary.mean_running_batch < vllm.summary.mean_running_batch
    assert any("SGLang's admission" in note for note in sglang.summary.notes)
    engine = sglang.sim.workers.engines[0]
    assert engine.reservation is not None and engine.reservation.ratio == pytest.approx(0.098)
    assert not any("SGLang's admission" in note for note in vllm.summary.notes)
