"""Steady state of one replica at a concurrency: TTFT, TPOT and throughput under continuous or static batching.

Continuous batching (vLLM V1, SGLang, TRT-LLM in-flight batching) with chunked prefill, in steady state
with ``C`` sequences in flight on a replica, prompts of ``I`` tokens, ``O`` output tokens and a step
budget of ``B`` tokens (``max_batched_tokens``):

* ``D`` of the ``C`` sequences are decoding; each step carries their ``D`` tokens. To keep them fed,
  prompts must enter at the rate they finish: ``D / (O - 1)`` requests per step, so on average
  ``P = D I / (O - 1)`` prompt tokens per step.
* A step that carries prompt work takes a chunk of ``p = min(B - D, max(I, P))`` tokens (a whole prompt
  when the budget allows, otherwise the chunk that fills it); a share ``f = P / p`` of the steps carry one.
  A plain step takes ``step(D, 0)``, a prefill step ``step(D, p)`` (:class:`~.steps.StepPricer`; with
  pipeline stages, a chunk's own pass through them is ``pass(D, p)``).
* TPOT is the mean step time, ``f step(D, p) + (1 - f) step(D, 0)``: every running sequence gets one
  token per step, and the prompt chunks slow the steps they ride in.
* TTFT is the wait for the prompts ahead and the step under way, then the prompt's own chunk passes
  (``I // (B - D)`` full ones and the rest). The step budget serves prompt tokens first come, first served at
  ``B - D`` a step: a prompt takes ``I / (B - D)`` of a full-budget step, ``s = I / (B - D) step(D, B - D)``,
  and the budget is busy ``rho = lambda s`` of the time. Arrivals are Poisson and the steps in between are
  plain decode steps, an M/D/1 queue whose server takes a decode step when no prompt waits: the wait is
  ``rho s / (2 (1 - rho)) + step(D, 0) / 2`` (the M/G/1 queue with vacations). Counting the share of steps
  that carry a chunk as the utilisation instead (``f``, a share of steps, not of time) leaves out most of
  the wait once prompts take long steps: the simulator's mean TTFT was 24-49% higher at 50-85% load.
* A fixed concurrency is a closed population, and a request sees the steady state of its ``C - 1`` peers (the
  arrival theorem of closed queues, as mean-value analysis uses it): the steps it decodes in carry the peers'
  prompt chunks, ``(C - 1) / C`` of them, and not its own next prompt, which comes after it; it arrives as a
  completion ends a step and waits out the step just begun, unless it has no peer and finds the engine idle.
  Open (Poisson) arrivals see the time average instead. Without this a lone sequence was priced a step's wait
  and its own next prompt's chunks: TTFT +31% and, at a 20k-token prompt, TPOT +39% over the simulator's.
* Little's law closes it: ``C = lambda (TTFT + (O - 1) TPOT)`` gives the request rate ``lambda``, the
  output ``lambda O`` tokens/s, and ``D = lambda (O - 1) TPOT``; the few rounds of this fixed point
  converge. When prompts arrive faster than the budget can prefill them (``D + P > B``), ``D`` is capped
  and the surplus of ``C`` waits: Little's law then puts that wait in TTFT.
* Attention data parallelism (``adp`` ranks): each rank is a scheduler of its own with ``C / adp`` sequences
  and a budget ``B`` of its own, and the ranks step together; the mean step, a chunk's pass and the wait for
  the step under way come from how many ranks carry a chunk in the same step (:mod:`.attention_dp`). A prompt
  longer than the budget ends in a short chunk, priced as such (a full chunk's price put TTFT at twice the
  simulated one for 8k-token prompts), it holds its rank's budget for ``I / free`` of a chunk's pass (what a
  Poisson prompt queues behind), and a closed population sees its peers as on one scheduler.

SGLang (``engine="sglang"``, one scheduler per replica) composes its steps otherwise: a step carries prompt chunks
or decodes, never both, and prompts go first (``--enable-mixed-chunk`` is off by default). A prompt step of ``p``
tokens takes ``step(0, p)`` and the whole budget ``B``; the decoding sequences sit it out. A round is then one
decode step and the prompt steps between two of them, ``step(D, 0) + (P / p) step(0, p)``, which is TPOT, and the
budget does not cap ``D``. A prompt's own chunks pass without decodes. A prompt step takes every prompt waiting, and
prompts arrive at random, ``m = P / I`` a round: a round has a prompt step with probability ``1 - exp(-m)``, which
carries ``m / (1 - exp(-m))`` prompts, so ``p = min(B, I m / (1 - exp(-m)))``. Priced one prompt a step instead,
the analytic TPOT was up to 25% over the simulator's where a prompt step's own cost is large (an MoE model's
experts read whole by a 1k-token prompt: Qwen3-30B-A3B at 1024/256 and 70% load).

Speculative decoding: a decode step verifies ``K + 1`` positions per sequence and emits ``A + 1`` tokens per
sequence on average, so a request decodes in ``(O - 1) / (A + 1)`` steps, each decoding sequence takes ``K + 1``
tokens of the step budget, prompts must enter at ``D (A + 1) / (O - 1)`` requests per step, and TPOT is the mean
step over ``A + 1`` (the step itself from :class:`~.steps.StepPricer`, which prices the verify pass and the drafting).

Prefix caching: ``I`` above is the prompt tokens prefill computes, those the prefix cache does not hold
(:attr:`~shardplan.contracts.workload.Workload.prefill_tokens`); the pricer's chunks attend to the whole prompt.

Static batching: the whole replica batch is prefilled together (TTFT), then decoded together (TPOT),
``C O / (TTFT + (O - 1) TPOT)`` tokens/s; ``prefill_batch`` splits the prefill into rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardplan.contracts.workload import Workload
from shardplan.tools.serving.attention_dp import RankRule, RankSteps, chunk_ranks, rank_chunk_pass_s, rank_steps
from shardplan.tools.serving.steps import StepPricer

__all__ = [
    "ServingPoint",
    "continuous_point",
    "static_point",
    "serving_point",
    "queue_wait",
    "mdc_wait",
    "waiting_probability",
    "busy_share",
]

_MAX_UTILISATION = 0.95
"""Utilisation above which the queueing formula is clamped (Little's law takes over beyond it)."""


def waiting_probability(servers: int, utilisation: float) -> float:
    """Probability that an arrival finds all ``servers`` busy (Erlang C, M/M/c) at ``utilisation`` below 1 of
    each, from the Erlang B recursion; for one server it is the utilisation itself.

    >>> waiting_probability(1, 0.7)
    0.7
    >>> round(waiting_probability(3, 0.82), 3)
    0.68
    """
    offered = servers * utilisation
    blocked = 1.0
    for count in range(1, servers + 1):
        blocked = offered * blocked / (count + offered * blocked)
    return blocked / (1 - utilisation * (1 - blocked))


def mdc_wait(utilisation: float, service: float, servers: int = 1) -> float:
    """Mean wait of an M/D/c queue (Poisson arrivals, fixed service time, ``servers`` servers fed by one queue)
    at ``utilisation`` below 1 of each server; infinite at or above 1, where the queue never settles.

    Half the M/M/c wait (Allen-Cunneen with deterministic service), exact for one server (Pollaczek-Khinchine).
    A pool of workers behind one queue waits far less than as many workers each with its own random share of
    the arrivals: at 82% three servers wait 0.63 service times, one server 2.3.

    >>> mdc_wait(0.5, 2.0)
    1.0
    >>> mdc_wait(0.99, 1.0) > 40
    True
    >>> round(mdc_wait(0.82, 1.0, servers=3), 2)
    0.63
    """
    busy = max(utilisation, 0.0)
    if busy >= 1.0:
        return math.inf
    return waiting_probability(servers, busy) * service / (2 * servers * (1 - busy))


def queue_wait(utilisation: float, service: float) -> float:
    """The M/D/1 wait at ``utilisation`` clamped at 95%: for a replica's own prefill slots, whose arrivals
    Little's law bounds by the sequences in flight (beyond the clamp it puts the surplus wait in TTFT).

    >>> queue_wait(0.5, 2.0)
    1.0
    """
    return mdc_wait(min(utilisation, _MAX_UTILISATION), service)


@dataclass(frozen=True)
class ServingPoint:
    """One replica serving ``concurrency`` sequences in steady state."""

    concurrency: float
    """Sequences in flight on the replica (a mean: a rate's load need not be a whole number)."""
    ttft_s: float
    tpot_s: float
    requests_per_s: float
    decoding: float
    """Sequences decoding on average (the rest wait for or run their prefill)."""
    prefill_chunk: float
    """Prompt tokens a prefill-carrying step takes (0 under static batching)."""
    output_tokens: int
    """Tokens each request produces (osl)."""

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of the replica."""
        return self.requests_per_s * self.output_tokens


def continuous_point(
    pricer: StepPricer, concurrency: float, workload: Workload, rule: RankRule = "independent"
) -> ServingPoint | None:
    """Steady state of continuous batching with chunked prefill at ``concurrency`` sequences per replica.

    A replica with attention data parallelism runs one scheduler per rank, each with its share of the sequences
    and a token budget of its own; the ranks' steps are priced together, their prompt chunks spread over the
    steps by ``rule`` (:mod:`.attention_dp`: the serving model's own, or one it is compared with).

    Returns None when the step budget cannot carry one token for every running sequence plus some prompt
    (``concurrency >= max_batched_tokens`` per scheduler), as engines cap running sequences at the budget.
    """
    # Behind a cached prefix a prompt's chunks carry only its uncached tokens (the budget counts what is computed).
    prompt, out, budget = workload.prefill_tokens, workload.osl, workload.max_batched_tokens
    ranks = pricer.layout.adp
    per_rank = concurrency / ranks
    verify, gained = pricer.verify_tokens, pricer.tokens_per_step
    if per_rank * verify >= budget:
        return None
    if out == 1:
        # Prefill only: every step is prompt chunks; the first token ends the request.
        chunk = float(min(budget, per_rank * prompt))
        step = _steps(pricer, 0, chunk, 1.0, rule).round_s
        rate = ranks * chunk / prompt / step
        return ServingPoint(concurrency, concurrency / rate, 0.0, rate, 0.0, chunk, out)
    per_request = (out - 1) / gained  # decode steps a request takes
    # SGLang's prompt steps take the whole budget, none of it the decodes'; its attention data-parallel ranks are
    # priced as the other engines' (the mixed rule of :mod:`.attention_dp`).
    prefill_first = workload.engine == "sglang" and ranks == 1
    decode_cap = math.inf if prefill_first else budget * per_request / (per_request * verify + prompt)
    open_arrivals = workload.open_arrivals
    decoding = min(per_rank, decode_cap)
    steps = RankSteps(0.0, 0.0, 0.0)
    chunk = ttft = 0.0
    for _ in range(8):
        free = float(budget) if prefill_first else max(budget - decoding * verify, 1.0)
        needed = decoding * prompt / per_request
        if prefill_first:
            # Prompts arrive at random, ``needed / prompt`` a round on average, and a prompt step takes every one
            # waiting: a round has one with probability 1 - exp(-m), carrying m / (1 - exp(-m)) prompts.
            arriving = needed / prompt
            chunk = min(free, prompt * arriving / -math.expm1(-arriving)) if arriving > 0 else float(prompt)
            share = needed / chunk  # prompt steps a round: SGLang runs as many as the budget needs
        else:
            chunk = min(free, max(float(prompt), needed))
            share = min(1.0, needed / chunk)  # at most one step in a mixed engine carries a chunk
        if ranks > 1:
            # The ranks step together while any of them has work: the replica's whole load counts.
            steps, ttft = _ranks_steps(
                pricer, decoding, prompt, free, chunk, share, per_request, rule, concurrency, open_arrivals
            )
        else:
            steps, ttft = _replica_steps(
                pricer, decoding, prompt, free, chunk, share, per_request, per_rank, open_arrivals, prefill_first
            )
        # A request decodes for ``per_request`` rounds of the length its decode lives through; the sequences a
        # round carries are the arrivals over that many rounds of the mean length (they differ where long rounds
        # cluster: ``RankSteps.lived_s``). Little's law on the request's time splits the sequences in flight.
        decoding_s = per_request * steps.decode_round_s
        settled = min(per_rank * per_request * steps.round_s / (ttft + decoding_s), decode_cap)
        if abs(settled - decoding) <= 0.005 * decoding:
            decoding = settled
            break
        decoding = (decoding + settled) / 2
    tpot = steps.decode_round_s / gained
    rate = ranks * decoding / (per_request * steps.round_s)
    ttft = max(ttft, concurrency / rate - (out - 1) * tpot)
    return ServingPoint(concurrency, ttft, tpot, rate, ranks * decoding, chunk, out)


def _steps(pricer: StepPricer, decoding: float, chunk: float, share: float, rule: RankRule) -> RankSteps:
    """The steady steps of schedulers running ``decoding`` sequences each, a ``share`` of whose steps carry a
    prompt chunk of ``chunk`` tokens: one replica's, or its attention data-parallel ranks' stepping together
    (:func:`~.attention_dp.rank_steps`). A replica's prompt waits half a step for the one under way."""
    ranks = pricer.layout.adp
    if ranks > 1:
        return rank_steps(pricer, ranks, decoding, chunk, share, rule)
    mean = share * pricer.step_s(decoding, chunk) + (1 - share) * pricer.step_s(decoding, 0)
    return RankSteps(mean, pricer.chunk_pass_s(decoding, chunk), mean / 2)


def busy_share(in_flight: float) -> float:
    """The share of time an engine with ``in_flight`` requests in flight on average, arriving as a Poisson stream,
    is running a step: at least one request is in flight. Continuous batching serves every request in flight at
    once, an infinite-server queue, whose count in flight is Poisson of that mean for any service time (M/G/inf),
    so the share is ``1 - exp(-in_flight)``. A request arriving at an idle engine does not wait for a step.

    >>> round(busy_share(0.05), 4), round(busy_share(1.0), 3), busy_share(20.0) > 0.999
    (0.0488, 0.632, True)
    """
    return 1.0 - math.exp(-max(in_flight, 0.0))


def _ranks_steps(
    pricer: StepPricer, decoding: float, prompt: int, free: float, chunk: float, share: float, per_request: float,
    rule: RankRule, in_flight: float, open_arrivals: bool,
) -> tuple[RankSteps, float]:
    """Attention data-parallel ranks' steady steps and TTFT: each rank a scheduler of its own with ``decoding``
    sequences, its prompt chunks spread over the ranks' common steps by ``rule`` (:mod:`.attention_dp`);
    ``in_flight`` and ``open_arrivals`` as :func:`_replica_steps` has them, ``in_flight`` over every rank.

    A prompt waits for the round under way, queues for its rank's budget, then rides its chunks: full ones of
    ``free`` tokens and the rest, whose pass is still as long as the other ranks' chunks in it make it. A closed
    population's request sees its peers only, as on one scheduler: its decode rounds carry (C - 1) / C of the
    chunks, and it waits out the round just begun."""
    ranks = pricer.layout.adp
    peers = None if open_arrivals else max(in_flight - 1.0, 0.0)
    steps = rank_steps(pricer, ranks, decoding, chunk, share, rule, timed=peers is None, lifetime=round(per_request))
    full, rest = divmod(prompt, free)
    if full == 0:
        service = steps.chunk_out_s  # the whole prompt in one chunk, which the rank fills up to ``chunk``
    else:
        last = rank_chunk_pass_s(pricer, ranks, decoding, rest, chunk, steps.carrying) if rest >= 1 else 0.0
        service = full * steps.chunk_out_s + last
    seen, wait = steps.round_s, busy_share(in_flight) * steps.wait_s
    if peers is not None:
        # The same rounds, the chunks of the peers alone spread over them (untimed, as ``steps`` were).
        rounds = np.array(steps.rounds)
        seen = float(chunk_ranks(ranks, share * peers / (peers + 1), np.ones_like(rounds), rule) @ rounds)
        wait = seen * min(1.0, peers)
    # The rank's budget serves prompt tokens first come, first served, ``free`` a step: a prompt holds it for
    # ``prompt / free`` of a chunk's pass (the next prompt's first chunk rides with its short last one), busy as
    # often as Poisson prompts bring that work; a closed population's come a few a step, in the steps' share.
    per_prompt = prompt / free * steps.chunk_out_s
    busy = share if peers is not None else decoding / (per_request * steps.round_s) * per_prompt
    ttft = wait + queue_wait(busy, per_prompt) + service
    lived = steps.lived_s if peers is None else None
    return RankSteps(seen, steps.chunk_out_s, wait, steps.carrying, lived_s=lived), ttft


def _replica_steps(
    pricer: StepPricer, decoding: float, prompt: int, free: float, chunk: float, share: float, per_request: float,
    in_flight: float, open_arrivals: bool, prefill_first: bool = False,
) -> tuple[RankSteps, float]:
    """One scheduler's steady steps and TTFT (the module docstring's rule). ``per_request``: decode steps a request
    takes; ``in_flight``: the sequences in flight (``C``), a mean under open arrivals.

    Open arrivals see the time average: they meet the step under way half-way through, when one is under way
    (:func:`busy_share`; below one request in flight the engine is mostly idle), and queue for the budget.
    A closed population's request sees the steady state of its ``C - 1`` peers (the arrival theorem of closed
    queues): it follows a completion, at the end of a step, so it waits out the whole step just begun, unless it
    has no peer and finds the engine idle; and its decode steps carry the peers' prompt chunks, (C - 1) / C of
    them, not its own next prompt, which comes after it.

    ``prefill_first`` (SGLang): ``share`` prompt steps of ``chunk`` tokens and no decode run between two decode
    steps, and a prompt's chunks pass without decodes (the module docstring)."""
    peers = None if open_arrivals else max(in_flight - 1.0, 0.0)
    riders = 0.0 if prefill_first else decoding  # the decoding sequences a prompt step carries
    plain = pricer.step_s(decoding, 0)
    chunk_step = pricer.step_s(riders, chunk)
    others = 1.0 if peers is None else peers / (peers + 1)  # the share of the prompt work that is not its own
    if prefill_first:
        mean = plain + share * chunk_step
        seen = plain + share * others * chunk_step
    else:
        mean = share * chunk_step + (1 - share) * plain
        seen = share * others * chunk_step + (1 - share * others) * plain
    per_prompt = prompt / free * pricer.step_s(riders, free)
    rate = decoding / (per_request * mean)
    if peers is None:
        wait = queue_wait(rate * per_prompt, per_prompt) + busy_share(in_flight) * plain / 2
    else:
        wait = seen * min(1.0, peers)
    # The prompts that join its last chunk arrived from the others.
    ttft = wait + _prompt_passes_s(pricer, riders, prompt, free, chunk, rate * others, wait)
    lived = None
    if peers is None and prefill_first:
        lived = pricer.step_s(decoding + 1, 0) + share * chunk_step
    elif peers is None:
        # The steps an open arrival decodes in carry it besides the others, whose count stays Poisson of mean
        # ``decoding`` (M/G/inf, as in ``busy_share``): on average one sequence more than the steps' own mean, so
        # the mean step weighted by its decoders is the step at ``decoding + 1`` (E[D f(D)] = E[D] E[f(D + 1)] for a
        # Poisson D). It matters where each sequence's attention is a large part of the step: an 8k-token
        # context on a mostly idle engine.
        lived = share * pricer.step_s(decoding + 1, chunk) + (1 - share) * pricer.step_s(decoding + 1, 0)
    return RankSteps(seen, pricer.chunk_pass_s(riders, chunk), wait, lived_s=lived), ttft


def _prompt_passes_s(
    pricer: StepPricer, decoding: float, prompt: int, free: float, chunk: float, rate: float, wait: float
) -> float:
    """Until a prompt's first token, once it reaches the budget after ``wait``: its full chunks of ``free`` tokens,
    then the step of its last chunk. That step is filled up with the prompts that arrived (at ``rate``) while it
    waited and while its full chunks ran, as far as the budget has room, and carries at least the ``chunk`` of
    an average prefill step."""
    full, rest = divmod(prompt, free)
    before = full * pricer.chunk_pass_s(decoding, free)
    if rest < 1:
        return before
    behind = rate * (wait + before) * prompt
    last = rest + min(free - rest, behind)
    return before + pricer.chunk_pass_s(decoding, max(last, chunk) if full == 0 else last)


def static_point(pricer: StepPricer, concurrency: int, workload: Workload) -> ServingPoint:
    """Static batching: ``concurrency`` prompts prefilled (in rounds of ``prefill_batch``), then decoded."""
    per_round = min(workload.prefill_batch or concurrency, concurrency)
    rounds = math.ceil(concurrency / per_round)
    ttft = pricer.prefill_s(per_round)
    tpot = pricer.decode_step_s(concurrency) / pricer.tokens_per_step if workload.osl > 1 else 0.0
    rate = concurrency / (rounds * ttft + (workload.osl - 1) * tpot)
    return ServingPoint(concurrency, ttft, tpot, rate, float(concurrency), 0.0, workload.osl)


def serving_point(pricer: StepPricer, concurrency: float, workload: Workload) -> ServingPoint | None:
    """The steady state of the workload's batching mode at ``concurrency`` sequences per replica (a whole number
    of them under static batching)."""
    if workload.batching == "static":
        return static_point(pricer, math.ceil(concurrency), workload)
    return continuous_point(pricer, concurrency, workload)
