"""Attention data-parallel ranks: independent rank schedulers that the MoE layers synchronise every step, in the
simulator (:mod:`shardplan.tools.simulation.ranks`), and the analytic rule that prices them
(:mod:`shardplan.tools.serving.attention_dp`).

Mechanics are checked exactly with a linear price; the deployment runs use the serving model's step pricer with
the roofline backend, so they need no measured tables.
"""

from __future__ import annotations

import doctest
from dataclasses import dataclass, field

import numpy as np
import pytest

from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.memory import memory_report
from shardplan.tools.serving import attention_dp
from shardplan.tools.serving.at_rate import load_for_rate
from shardplan.tools.serving.attention_dp import (
    chunk_ranks,
    decoders_round_s,
    rank_chunk_pass_s,
    rank_steps,
    synced_round_s,
)
from shardplan.tools.serving.options import priced_deployment
from shardplan.tools.serving.steady import continuous_point
from shardplan.tools.serving.steps import StepPricer
from shardplan.tools.simulation import ranks
from shardplan.tools.simulation.engine import Engine
from shardplan.tools.simulation.loop import Workers, run_events
from shardplan.tools.simulation.ranks import RankGroup
from shardplan.tools.simulation.replica import StepPlan
from shardplan.tools.simulation.router import least_loaded_rank
from shardplan.tools.simulation.run import Simulation, SimulationOptions, simulate
from shardplan.tools.simulation.state import Requests
from shardplan.tools.traffic.stream import RequestStream

QWEN3_30B = load_model("Qwen/Qwen3-30B-A3B")
H100 = make_cluster("H100", 8)
WORK = Workload(isl=2048, osl=256)
SPEC = "adp=4,tp=2,ep=8"


@dataclass
class LinearRanks:
    """A rank's own pass of 4 ms plus 0.5 ms a decode token plus 0.05 ms a prompt token, and an MoE section of
    0.5 ms a token over every rank's tokens; as one replica, the two add up to :meth:`step_s`."""

    lanes: int = 1
    calls: list[tuple[tuple[float, float], ...]] = field(default_factory=list)

    def rank_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        return 0.004 + 0.0005 * decode_tokens + 0.00005 * prefill_tokens

    def experts_s(self, tokens: float) -> float:
        return 0.0005 * tokens

    def step_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        return self.rank_pass_s(decode_tokens, prefill_tokens) + self.experts_s(decode_tokens + prefill_tokens)

    def chunk_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        return self.step_s(decode_tokens, prefill_tokens)


def _stream(isl: list[int], osl: list[int], arrival: list[float]) -> RequestStream:
    return RequestStream(np.array(arrival), np.array(isl), np.array(osl), np.full(len(isl), -1))


def _engine(requests: Requests, costs: LinearRanks, budget: int = 256) -> Engine:
    return Engine(requests, costs, kv_blocks=400, max_num_seqs=16, max_batched_tokens=budget)


def test_one_rank_is_the_plain_engine() -> None:
    # The same requests through one engine and through a group of one rank: every time is the same.
    stream = _stream([300, 40, 700, 90, 20], [12, 30, 5, 17, 40], [0.0, 0.002, 0.003, 0.05, 0.051])
    alone, grouped = Requests.from_stream(stream), Requests.from_stream(stream)
    costs = LinearRanks()
    engine = _engine(alone, costs)
    run_events(alone, Workers([engine]))
    group = RankGroup([_engine(grouped, costs)], costs)
    run_events(grouped, Workers([group]))
    for times in ("scheduled", "first_token", "finish"):
        assert getattr(grouped, times).tolist() == pytest.approx(getattr(alone, times).tolist(), rel=1e-12)
    assert group.steps == engine.steps and group.resident_s == pytest.approx(engine.resident_s, rel=1e-12)


def test_the_step_prices_of_one_rank_add_up_to_the_replica_step() -> None:
    # With one attention group, a rank's own pass and the MoE section are the two parts of the replica's pass.
    pricer = StepPricer.for_workload(QWEN3_30B, H100, parse_strategy("tp=2,ep=2").decode, WORK, backend="roofline")
    for decode, prefill in ((16, 0), (16, 2048), (100, 512)):
        whole = pricer.rank_pass_s(decode, prefill) + pricer.experts_s(decode + prefill)
        assert whole == pytest.approx(pricer.chunk_pass_s(decode, prefill), rel=1e-9)
        assert 0 < pricer.experts_s(decode + prefill) < pricer.linear_s(decode + prefill)


class _Watched(RankGroup):
    """A group that keeps what each step's ranks carried and what the step was priced at."""

    seen: list[tuple[list[tuple[int, int]], float]]

    def _price(self, plans: list[StepPlan | None]) -> tuple[float, float]:
        priced = super()._price(plans)
        loads = [(p.decode, p.prefill) if p is not None else (0, 0) for p in plans]
        self.seen.append((loads, priced[0]))
        return priced


def test_a_step_lasts_at_least_its_slowest_rank_and_a_chunk_holds_every_rank() -> None:
    # Rank 0 decodes one long request; a prompt of 2,000 tokens reaches rank 1 while it does. Every step lasts the
    # slowest rank's own pass plus the experts on all the ranks' tokens, and rank 0's sequence gets no token
    # until the chunk's step is over: its TPOT rises although it carries no prompt.
    stream = _stream([16, 2000], [40, 2], [0.0, 0.05])
    requests = Requests.from_stream(stream)
    costs = LinearRanks()
    group = _Watched([_engine(requests, costs, budget=4096), _engine(requests, costs, budget=4096)], costs)
    group.seen = []
    run_events(requests, Workers([group]))
    chunk_steps = 0
    for loads, duration in group.seen:
        slowest = max(costs.rank_pass_s(d, p) for d, p in loads)
        assert duration >= slowest
        assert duration == pytest.approx(slowest + costs.experts_s(sum(d + p for d, p in loads)), rel=1e-12)
        chunk_steps += any(p for _, p in loads)
    assert chunk_steps == 2  # the first prompt's, then the second's
    # Rank 0's request: 39 tokens after its first, one in the chunk's step and one beside the other's decode token.
    decode_alone = costs.step_s(1, 0)
    with_chunk = costs.rank_pass_s(0, 2000) + costs.experts_s(2001)
    both_decode = costs.rank_pass_s(1, 0) + costs.experts_s(2)
    tpot = (requests.finish[0] - requests.first_token[0]) / 39
    assert tpot == pytest.approx((37 * decode_alone + with_chunk + both_decode) / 39, rel=1e-9)
    assert requests.first_token[1] == pytest.approx(requests.scheduled[1] + with_chunk, rel=1e-12)


def test_requests_go_to_the_rank_with_the_lowest_four_waiting_plus_running() -> None:
    requests = Requests.from_stream(_stream([100] * 8, [10] * 8, [0.0] * 8))
    costs = LinearRanks()
    first, second = _engine(requests, costs), _engine(requests, costs)
    first.enqueue(0, 0.0)  # one waiting: 4
    for rid in (1, 2, 3):
        second.enqueue(rid, 0.0)
    second.step(float("inf"))  # three running: 3
    assert (first.running, len(first.waiting), second.running, len(second.waiting)) == (0, 1, 3, 0)
    assert least_loaded_rank([first, second]) == 1
    second.enqueue(4, 0.0)  # 3 running + 4 for the waiting one: 7
    assert least_loaded_rank([first, second]) == 0


def _replica(per_rank: int) -> tuple[PricedDeployment, StepPricer]:
    strategy = parse_strategy(SPEC)
    layout = strategy.decode.model_copy(update={"dp": 1})
    pricer = StepPricer.for_workload(QWEN3_30B, H100, layout, WORK, backend="roofline")
    # The load: the rate ``per_rank`` sequences a rank serve; the figures: Poisson arrivals at that rate.
    closed = continuous_point(pricer, layout.adp * per_rank, WORK)
    assert closed is not None
    arriving = WORK.model_copy(update={"rate": closed.requests_per_s})

    def served(load: float) -> float:
        found = continuous_point(pricer, load, arriving)
        return found.requests_per_s if found is not None else 0.0

    concurrency = load_for_rate(served, closed.requests_per_s, 1.0, 8.0 * layout.adp * per_rank)
    assert concurrency is not None
    point = continuous_point(pricer, concurrency, arriving)
    assert point is not None
    deployment = priced_deployment(
        strategy, WORK, H100, budget=8, concurrency=round(concurrency), worker_concurrency=round(concurrency),
        ttft_ms=point.ttft_s * 1e3, tpot_ms=point.tpot_s * 1e3, requests_per_s=point.requests_per_s,
        memory=(40.0, True),
    )
    return deployment, pricer


def _run(deployment: PricedDeployment, requests: int, seed: int) -> Simulation:
    """Poisson arrivals at the rate the deployment's steady state serves."""
    rate = deployment.figures.requests_per_s
    options = SimulationOptions(backend="roofline", max_num_seqs=100_000)
    return simulate(QWEN3_30B, H100, deployment, WORK, requests=requests, rate=rate, seed=seed, options=options)


def test_an_attention_dp_replica_runs_as_rank_schedulers_and_repeats_when_seeded() -> None:
    deployment, _ = _replica(8)
    first, again, other = _run(deployment, 800, 5), _run(deployment, 800, 5), _run(deployment, 800, 6)
    group = first.workers.engines[0]
    assert isinstance(group, RankGroup) and len(group.ranks) == 4
    assert all(rank.steps > 0 for rank in group.ranks)  # every rank took requests
    assert any("4 attention data-parallel ranks" in note for note in first.summary.notes)
    assert first.summary.model_dump_json() == again.summary.model_dump_json()
    assert np.array_equal(first.requests.finish, again.requests.finish)
    assert not np.array_equal(first.requests.finish, other.requests.finish)


def test_littles_law_holds_over_the_ranks() -> None:
    # Requests in the replica over time, summed from every rank's queue and running set, equal throughput x mean
    # latency from each request's own times.
    deployment, _ = _replica(16)
    summary = _run(deployment, 1500, 3).summary
    in_flight = summary.mean_in_flight
    assert in_flight > 20
    assert in_flight == pytest.approx(summary.completed_per_s * summary.figures.e2e_ms / 1e3, rel=1e-9)


@pytest.mark.parametrize("per_rank", [4, 16])
def test_the_analytic_rule_tracks_the_simulated_ranks(per_rank: int) -> None:
    # Open arrivals at the rate the chosen rule serves with ``per_rank`` sequences a rank: the same step prices,
    # so only how the chunks fall into steps differs. The rule holds TPOT to 5% and TTFT to 10% of the simulated
    # mean (benchmarks/bench_adp_ranks.py: within 3% and 6% on this model); lockstep, pricing every rank's chunk
    # in the same steps, is far off on both at the same rate.
    deployment, pricer = _replica(per_rank)
    rate = deployment.figures.requests_per_s
    simulated = _run(deployment, 3000, 1).summary.figures
    assert simulated.tpot_ms == pytest.approx(deployment.figures.tpot_ms, rel=0.05)
    assert simulated.ttft_ms == pytest.approx(deployment.figures.ttft_ms, rel=0.10)

    def lockstep(load: float) -> tuple[float, float, float]:
        point = continuous_point(pricer, load, WORK.model_copy(update={"rate": rate}), "lockstep")
        assert point is not None
        return point.requests_per_s, point.ttft_s * 1e3, point.tpot_s * 1e3

    load = load_for_rate(lambda c: lockstep(c)[0], rate, 1.0, 64.0 * per_rank)
    assert load is not None
    _, ttft, tpot = lockstep(load)
    assert ttft > 1.2 * simulated.ttft_ms and tpot < simulated.tpot_ms


def test_the_ranks_carrying_a_chunk_per_step() -> None:
    # Every rule carries each rank's chunks in a ``share`` of its steps on average; lockstep puts them all in the
    # same steps; the chosen rule gathers them in the steps after long ones, so more steps carry none than if
    # they fell independently, and a chunk rides in a step with more chunks than the binomial has.
    rounds = [0.01 + 0.02 * n for n in range(9)]
    for share in (0.05, 0.3, 0.7):
        for rule in ("independent", "binomial", "lockstep"):
            spread = chunk_ranks(8, share, rounds, rule)
            assert spread.sum() == pytest.approx(1.0) and spread @ np.arange(9) == pytest.approx(8 * share)
        coupled, binomial = chunk_ranks(8, share, rounds), chunk_ranks(8, share, rounds, "binomial")
        assert coupled[0] > binomial[0]
    assert chunk_ranks(8, 1.0, rounds).tolist() == [0.0] * 8 + [1.0]
    costs = LinearRanks()
    steps = rank_steps(costs, 8, 10.0, 2000.0, 0.1)
    uncoupled = rank_steps(costs, 8, 10.0, 2000.0, 0.1, "binomial")
    assert steps.chunk_out_s > uncoupled.chunk_out_s
    one = synced_round_s(costs, [(10.0, 2000.0)] + [(10.0, 0.0)] * 7)[0]
    assert steps.wait_s > steps.round_s / 2 and uncoupled.chunk_out_s >= one


def test_a_decode_lives_through_the_rounds_weighted_by_the_sequences_in_them() -> None:
    # Rounds that follow a Markov chain (long after long), sequences decoding for ``lifetime`` rounds that arrive in
    # proportion to time: a round carries the arrivals over the rounds before it, so the mean round a decode lives
    # through is the round's mean weighted by those arrivals. Checked against a run of the chain itself.
    transitions = np.array([[0.8, 0.15, 0.05], [0.3, 0.5, 0.2], [0.1, 0.4, 0.5]])
    rounds, lifetime = np.array([0.01, 0.2, 0.6]), 40
    stationary = np.linalg.matrix_power(transitions, 200)[0]
    cumulative, state = transitions.cumsum(axis=1), 0
    visited = np.empty(50_000, dtype=int)
    for step, draw in enumerate(np.random.default_rng(7).random(len(visited))):
        visited[step] = state
        state = int(np.searchsorted(cumulative[state], draw, side="right"))
    lengths = rounds[visited]
    behind = np.convolve(lengths, np.ones(lifetime))[: len(lengths)]  # the rounds up to and including this one
    decoders = (behind - lengths)[lifetime:]  # arrivals over the ``lifetime`` rounds before each round
    weighted = float(decoders @ lengths[lifetime:] / decoders.sum())
    priced = decoders_round_s(stationary, transitions, rounds, lifetime)
    assert priced == pytest.approx(weighted, rel=0.02)
    assert priced > float(stationary @ rounds) * 1.05  # the step mean leaves the clustering out
    memoryless = np.tile(stationary, (3, 1))  # rounds independent of the one before: no weighting
    assert decoders_round_s(stationary, memoryless, rounds, lifetime) == pytest.approx(float(stationary @ rounds))


def test_a_prompt_s_short_last_chunk_rides_as_long_as_the_other_ranks_chunks() -> None:
    # A rank's last chunk of a long prompt (10 tokens here) costs a full chunk's pass only when other ranks carry
    # full chunks in the same step; alone it is little more than a decode step.
    costs = LinearRanks()
    alone = [0.0, 1.0] + [0.0] * 7
    crowded = [0.0] * 8 + [1.0]
    short_alone = rank_chunk_pass_s(costs, 8, 10.0, 10.0, 2000.0, alone)
    full_alone = rank_chunk_pass_s(costs, 8, 10.0, 2000.0, 2000.0, alone)
    assert short_alone == pytest.approx(synced_round_s(costs, [(10.0, 10.0)] + [(10.0, 0.0)] * 7)[1])
    assert short_alone < 0.5 * full_alone
    short_crowded = rank_chunk_pass_s(costs, 8, 10.0, 10.0, 2000.0, crowded)
    assert short_crowded == pytest.approx(synced_round_s(costs, [(10.0, 10.0)] + [(10.0, 2000.0)] * 7)[1])
    assert short_crowded > full_alone


def test_the_modules_examples_run() -> None:
    for module in (attention_dp, ranks):
        assert doctest.testmod(module).failed == 0


def test_each_attention_dp_rank_holds_the_activations_of_a_whole_step_budget() -> None:
    # Each rank is a scheduler with a whole token budget of its own, so under load a rank's prefill step carries
    # as many tokens as a replica's does: four ranks at four times the load hold what one rank holds alone.
    model, gpu = load_model("Qwen/Qwen3-30B-A3B"), make_cluster("H100", 4).gpu
    one = memory_report(model, gpu, PhaseStrategy(tp=1, ep=1), Workload(isl=4096, osl=256, batch=16), "prefill", 4096)
    ranks = memory_report(model, gpu, PhaseStrategy(adp=4, tp=1, ep=4), Workload(isl=4096, osl=256, batch=64),
                          "prefill", 4096)
    assert ranks.activations_gb == pytest.approx(one.activations_gb)
    assert ranks.activations_gb > 0.9 * 8192 * 6 * model.hidden_size * 2 / 1e9  # a whole budget's residual stream
