"""The step of a replica whose attention runs data-parallel (``adp`` ranks), as engines run it and as it is priced.

vLLM and SGLang run each attention data-parallel rank of an MoE model as a scheduler of its own: its waiting
queue, its running set, its share of the KV cache and a token budget (``max_num_batched_tokens``) of its own,
so each rank takes its own prompts, chunk by chunk, when they reach it. The MoE layers join the ranks every
step: a rank attends to its own sequences and runs its projections on its own tokens, then the dispatch waits
for every rank, the experts run on all their tokens together and the combine hands each its own back (a rank
with nothing to do runs an empty batch to take part). So a step lasts as long as the slowest rank's own part
plus the MoE section on the union of the ranks' tokens (:func:`synced_round_s`).

In steady state every rank runs ``d`` sequences and takes a prompt chunk of ``c`` tokens in a share ``f`` of
its steps; what a rule has to say is how many ranks carry a chunk in the same step (:func:`chunk_ranks`). From
that distribution come the mean step (TPOT), the pass that a chunk rides in (size-biased: a chunk is more
likely to be in a step with many chunks) and the wait of an arriving prompt for the step under way (the
residual of a renewal process, ``E[T^2] / 2 E[T]``: arrivals land in long steps more often), in
:func:`rank_steps`. One rank (``adp = 1``) is the plain replica step of :class:`~.steps.StepPricer`.

The rule, chosen by simulation (``independent``). The ranks' schedulers are independent, but the step couples
them in time: a step that carries one rank's chunk lasts longer for every rank, more prompts arrive during it,
and the router (vLLM's, to the least loaded rank) hands them to different ranks, which all take their chunk in
the next step. So the ranks carrying a chunk in a step are the prompts that arrived during the step before,
one rank each: a Markov chain over ``n`` whose next state is Poisson with a mean proportional to the duration
of the step with ``n`` chunks, capped at ``adp``, its scale set so that ``E[n] = adp f`` (every needed chunk is
carried once). Two rules it is set against, both available here for the comparison:

* ``binomial``: each rank chunks in a step with probability ``f`` regardless of the others, ``n`` binomial.
  Right at light load; at heavy load it spreads the chunks over too many steps, so it overprices TPOT (by 20%
  on DeepSeek-V3 at attention-DP 8 and 32 sequences a rank) and underprices a chunk's step, and with it TTFT
  (by 27% on Mixtral-8x7B).
* ``lockstep``: AIConfigurator's pricing, every rank carrying a chunk in the same steps (``n`` is 0 or
  ``adp``). It puts the chunks' work in as few steps as there can be, so its TPOT is low (by up to 56% at
  attention-DP 8) and its TTFT high (a chunk waits for every other rank's in its step).

The coupling is one of time: Poisson prompts arrive in proportion to how long a step lasts. A closed population's
prompts follow completions, which come a few a step however long the step, so for it the rule runs with steps
of one length (``timed=False`` in :func:`rank_steps`): a long step does not gather more chunks for the next.
Without that, a closed loop's chunks of 8k-token prompts were gathered into steps they never share, and TTFT
came out 1.7 to 2.8 times the simulated one.

Under Poisson arrivals a request's TPOT is the mean round weighted by the sequences decoding in it, not the
rounds' mean: the chain's long rounds come in runs, and the decoders pile up in them (:func:`decoders_round_s`).

Over 48 cases (four MoE models, attention-DP 2, 4 and 8, 2 to 32 sequences a rank, Poisson arrivals of 2k-token
prompts) the chosen rule is within 1.5% of the simulated mean TTFT and 1.9% of TPOT on average, 14% and 7% at
worst; of 8k-token prompts, 3.9% and 6.7%, 9% and 19% at worst; closed loops, within 1.9% and 1.2%.
``benchmarks/bench_adp_ranks.py`` sets the three beside the simulator (:mod:`shardplan.tools.simulation.ranks`,
whose rank schedulers step together and are priced by :func:`synced_round_s`); the figures are in the README's
simulator section.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

__all__ = [
    "RankPrices", "RankRule", "RankSteps", "synced_round_s", "chunk_ranks", "decoders_round_s", "rank_steps",
    "rank_chunk_pass_s",
]

RankRule = Literal["independent", "binomial", "lockstep"]
"""How many attention data-parallel ranks carry a prompt chunk in the same step (the module's docstring)."""


class RankPrices(Protocol):
    """What the rule needs of :class:`~.steps.StepPricer`: its lanes, a rank's own pass and the MoE section."""

    @property
    def lanes(self) -> int:
        """Batches a replica keeps in flight: one per pipeline stage."""

    def rank_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float: ...

    def experts_s(self, tokens: float) -> float: ...


@dataclass(frozen=True)
class RankSteps:
    """The steps of a replica's ranks in steady state, in seconds."""

    round_s: float
    """The mean step (round): every running sequence gets a token a round, so this is TPOT."""
    chunk_out_s: float
    """The mean pass a prompt chunk rides in, until it comes out."""
    wait_s: float
    """The mean wait of a prompt arriving at a random time for the round under way to end."""
    carrying: tuple[float, ...] = ()
    """The probabilities that 0 to ``adp`` ranks carry a prompt chunk in a round (:func:`chunk_ranks`)."""
    rounds: tuple[float, ...] = ()
    """The round with 0 to ``adp`` ranks carrying a chunk, in seconds."""
    lived_s: float | None = None
    """The mean round a decoding sequence lives through (:func:`decoders_round_s`), where it differs from
    ``round_s``: a request's TPOT. None: the same as ``round_s``."""

    @property
    def decode_round_s(self) -> float:
        """The mean round of a request's decode: what its TPOT is made of (``lived_s``, else ``round_s``)."""
        return self.round_s if self.lived_s is None else self.lived_s


def synced_round_s(prices: RankPrices, loads: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """One round of a replica whose attention data-parallel rank ``i`` carries ``loads[i]`` = (running sequences,
    prompt tokens), and the pass of the lane that carries the prompt chunks, in seconds.

    A lane's pass lasts as long as its slowest rank's own part plus the MoE section on every rank's tokens; the
    ranks' chunks ride in the same lane (each rank keeps its virtual engines in step with the others'), and a
    round is the mean of the lanes' passes, as :meth:`~.steps.StepPricer.step_s` has it. A rank with nothing to
    run, ``(0, 0)``, still takes part.
    """
    lanes = prices.lanes
    heavy = max(prices.rank_pass_s(d, p) for d, p in loads) + prices.experts_s(sum(d / lanes + p for d, p in loads))
    if lanes == 1 or not any(p for _, p in loads):
        return heavy, heavy
    light = max(prices.rank_pass_s(d, 0) for d, _ in loads) + prices.experts_s(sum(d for d, _ in loads) / lanes)
    return (heavy + (lanes - 1) * light) / lanes, heavy


def _binomial(trials: int, share: float) -> np.ndarray:
    """Probabilities of 0 to ``trials`` successes in ``trials`` independent tries of probability ``share``."""
    return np.array([math.comb(trials, k) * share**k * (1 - share) ** (trials - k) for k in range(trials + 1)])


def _capped_poisson(means: np.ndarray, cap: int) -> np.ndarray:
    """Row ``i``: the probabilities of 0 to ``cap`` events of a Poisson count of mean ``means[i]``, the counts
    above ``cap`` put at ``cap``."""
    k = np.arange(cap)
    log_fact = np.array([math.lgamma(x + 1) for x in k])
    with np.errstate(divide="ignore"):
        logs = k[None, :] * np.log(means[:, None]) - means[:, None] - log_fact[None, :]
    below = np.where(means[:, None] > 0, np.exp(logs), (k[None, :] == 0).astype(float))
    return np.concatenate([below, np.clip(1 - below.sum(axis=1), 0.0, 1.0)[:, None]], axis=1)


def _stationary(transitions: np.ndarray) -> np.ndarray:
    """The stationary distribution of a Markov chain whose row ``i`` gives the next state's probabilities."""
    size = len(transitions)
    system = transitions.T - np.eye(size)
    system[-1, :] = 1.0
    target = np.zeros(size)
    target[-1] = 1.0
    found = np.clip(np.linalg.solve(system, target), 0.0, None)
    return found / found.sum()


def chunk_ranks(
    ranks: int, share: float, rounds: Sequence[float] | np.ndarray, rule: RankRule = "independent"
) -> np.ndarray:
    """The distribution of how many of ``ranks`` ranks carry a prompt chunk in a step, when each carries one in a
    ``share`` of its steps and a step with ``n`` of them lasts ``rounds[n]``: under ``rule`` (module docstring).

    >>> [round(float(p), 3) for p in chunk_ranks(2, 0.5, [1.0, 1.0, 1.0], "binomial")]
    [0.25, 0.5, 0.25]
    >>> [round(float(p), 3) for p in chunk_ranks(2, 0.5, [1.0, 1.0, 1.0], "lockstep")]
    [0.5, 0.0, 0.5]
    >>> coupled = chunk_ranks(4, 0.25, [1.0, 3.0, 5.0, 7.0, 9.0])
    >>> round(float(coupled @ range(5)), 6), bool(coupled[0] > chunk_ranks(4, 0.25, [1.0] * 5, "binomial")[0])
    (1.0, True)
    """
    share = min(max(share, 0.0), 1.0)
    if rule == "lockstep":
        found = np.zeros(ranks + 1)
        found[0], found[ranks] = 1 - share, share
        return found
    if rule == "binomial" or share in (0.0, 1.0):
        return _binomial(ranks, share)
    return _coupled_chain(ranks, share, rounds)[0]


def _coupled_chain(ranks: int, share: float, rounds: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``independent`` rule's Markov chain over the ranks carrying a chunk in a step (module docstring): its
    stationary distribution and its transition matrix (row ``n``: the next step's, after a step with ``n``)."""
    durations = np.asarray(rounds, dtype=float)
    wanted = ranks * share
    states = np.arange(ranks + 1)

    def chain(scale: float) -> np.ndarray:
        return _capped_poisson(scale * durations, ranks)

    def spread(scale: float) -> tuple[np.ndarray, float]:
        found = _stationary(chain(scale))
        return found, float(found @ states) - wanted

    # The chunks carried grow with the arrival rate (``scale``, prompts per second): find the rate at which every
    # needed chunk is carried, by regula falsi (Illinois) between a rate that carries too few and one too many.
    low, high = 0.0, wanted / float(durations[0])
    low_gap, (found, high_gap) = -wanted, spread(high)
    scale = high
    while high_gap < 0:
        low, low_gap = high, high_gap
        high *= 2
        (found, high_gap), scale = spread(high), high
    side = 0
    for _ in range(100):
        if abs(high_gap) <= 1e-9 * wanted:
            break
        middle = high - high_gap * (high - low) / (high_gap - low_gap)
        (found, gap), scale = spread(middle), middle
        if gap > 0:
            high, high_gap = middle, gap
            low_gap, side = (low_gap / 2, 1) if side == 1 else (low_gap, 1)
        else:
            low, low_gap = middle, gap
            high_gap, side = (high_gap / 2, -1) if side == -1 else (high_gap, -1)
        if abs(gap) <= 1e-9 * wanted:
            break
    return found, chain(scale)


def decoders_round_s(
    stationary: np.ndarray, transitions: np.ndarray, rounds: np.ndarray, lifetime: int
) -> float:
    """The mean round weighted by the sequences decoding in it, when the rounds follow a Markov chain (``rounds[n]``
    in state ``n``) and a sequence decodes for ``lifetime`` rounds: the mean round of a request's decode.

    Open arrivals come in proportion to time, so the sequences decoding in a round are the arrivals over the
    ``lifetime`` rounds before it, in number proportional to how long those rounds lasted; where long rounds follow
    long rounds (the chain: a long round gathers the prompts that make the next one long), a round after long ones
    is itself likely long and carries more decoders. With ``T`` the rounds' lengths and ``gamma(k)`` their
    autocovariance at lag ``k``, ``E[D T] / E[D] = E[T] + sum_{k=1..L} gamma(k) / (L E[T])``. The step mean
    (``E[T]``) underprices TPOT without it: by 16% on Mixtral-8x7B at attention-DP 8 with 8k-token prompts, where
    the simulated rounds' autocorrelation is 0.78, 0.62 and 0.50 at lags 1 to 3 and the chain's 0.78, 0.61, 0.47
    (``benchmarks/bench_adp_ranks.py --isl 8192``). A chain without memory (rounds independent) gives ``E[T]``.

    >>> chain = np.array([[0.9, 0.1], [0.5, 0.5]]); still = np.array([5 / 6, 1 / 6])
    >>> round(decoders_round_s(still, chain, np.array([1.0, 1.0]), 10), 6)
    1.0
    >>> decoders_round_s(still, chain, np.array([1.0, 5.0]), 10) > float(still @ [1.0, 5.0])
    True
    """
    mean = float(stationary @ rounds)
    if lifetime < 1 or mean <= 0:
        return mean
    centred = rounds - mean
    # The lags' sum of P^k x for k = 1..L, with P's stationary part taken out (it maps the centred rounds to 0):
    # A (I - A^L) (I - A)^-1 x, A = P - 1 pi, whose powers vanish as the chain forgets.
    drift = transitions - np.outer(np.ones(len(stationary)), stationary)
    identity = np.eye(len(stationary))
    lags = drift @ (identity - np.linalg.matrix_power(drift, lifetime)) @ np.linalg.solve(identity - drift, centred)
    return mean + float(stationary @ (centred * lags)) / (lifetime * mean)


def _size_biased(carrying: np.ndarray, chunk_passes: Sequence[float] | np.ndarray) -> float:
    """The mean of ``chunk_passes[n - 1]``, the pass of a chunk riding with ``n - 1`` others, over the steps weighted
    by the chunks they carry: a chunk is more likely to be in a step with many chunks."""
    weights = carrying[1:] * np.arange(1, len(carrying))
    passes = np.asarray(chunk_passes, dtype=float)
    return float(weights @ passes / weights.sum()) if weights.sum() > 0 else float(passes[0])


def rank_chunk_pass_s(
    prices: RankPrices, ranks: int, decode: float, own: float, others: float, carrying: Sequence[float] | np.ndarray
) -> float:
    """The mean pass that a rank's prompt chunk of ``own`` tokens rides in, the other ranks carrying chunks of
    ``others`` tokens as often as ``carrying`` (:func:`chunk_ranks`) has it. A prompt longer than a rank's budget
    ends in a short chunk, whose pass is still as long as the other ranks' chunks make it."""
    passes = [
        synced_round_s(prices, [(decode, own)] + [(decode, others)] * (n - 1) + [(decode, 0.0)] * (ranks - n))[1]
        for n in range(1, ranks + 1)
    ]
    return _size_biased(np.asarray(carrying, dtype=float), passes)


def rank_steps(
    prices: RankPrices, ranks: int, decode: float, chunk: float, share: float, rule: RankRule = "independent",
    timed: bool = True, lifetime: int = 0,
) -> RankSteps:
    """The steady steps of ``ranks`` attention data-parallel ranks, each running ``decode`` sequences and taking a
    prompt chunk of ``chunk`` tokens in a ``share`` of its steps, the chunks spread over the steps by ``rule``.

    ``timed``: prompts arrive in time, so a long step gathers more of them for the next (open arrivals). A closed
    population's prompts follow completions instead, which come a few a step whatever the step lasts: the chunks
    of a step then do not grow with the step before (``independent`` with steps of one length).

    ``lifetime``: the rounds a request decodes for; given (with ``timed`` and the ``independent`` rule), the steps
    also carry the mean round its decode lives through (:func:`decoders_round_s`)."""
    passes = [
        synced_round_s(prices, [(decode, chunk)] * carrying + [(decode, 0.0)] * (ranks - carrying))
        for carrying in range(ranks + 1)
    ]
    rounds = np.array([round_s for round_s, _ in passes])
    lived = None
    if timed and rule == "independent" and lifetime >= 1 and 0.0 < share < 1.0:
        spread, transitions = _coupled_chain(ranks, share, rounds)
        lived = decoders_round_s(spread, transitions, rounds, lifetime)
    else:
        spread = chunk_ranks(ranks, share, rounds if timed else np.ones_like(rounds), rule)
    mean = float(spread @ rounds)
    out = _size_biased(spread, [chunk_pass for _, chunk_pass in passes[1:]])
    return RankSteps(mean, out, float(spread @ rounds**2) / (2 * mean), tuple(float(p) for p in spread),
                     tuple(float(r) for r in rounds), lived)
