"""One replica's scheduler, as vLLM v1 runs it: continuous batching with chunked prefill over KV-cache blocks.

Each step, in order:

* every running sequence asks for the tokens it has not computed yet (one for a decoding sequence, the rest of
  its prompt for one being prefilled) and gets them in admission order while the step's token budget
  (``max_num_batched_tokens``) lasts;
* the step's KV cache is allocated in blocks of ``block_tokens``; when the free blocks do not cover it, the
  most recently admitted sequences are preempted (recompute: each goes back to the front of the waiting queue
  and loses its KV cache) until they do, and that step admits no one;
* waiting requests are admitted first come, first served while the budget, ``max_num_seqs`` and the free
  blocks allow, each with a chunk of its prompt (:mod:`.admission`; a prefix cache's blocks spare a request the
  prefill of its group's prefix); blocks are counted as :mod:`.blocks` counts them;
* the step lasts ``step_s(decode tokens, prefill tokens)`` of the serving model's step pricer; a sequence
  whose tokens are all computed emits its next token at the end of it (its first one when its prompt's last
  chunk comes out of the pipeline: ``chunk_pass_s``).

SGLang's scheduler (``prefill_first``; vLLM's V0 engine without chunked prefill too) runs steps of one kind, prompts
first: while a prompt has tokens left or a waiting request can be admitted, a prefill step, otherwise a decode step
(:mod:`.grants` shares a step's budget either way). SGLang admits a request only when its prompt and output fit
beside a decaying share of the running set's remaining outputs (``reservation``, :mod:`.reservation`).

Under pipeline parallelism a prompt's first token may come out of the pipeline after the step that carried its last
chunk ends: its sequence sits out the steps until then (:mod:`.pipeline`), and a one-token request ends then.

Speculative decoding (``emit`` = A + 1, ``verify`` = K + 1): a decoding sequence takes ``verify`` tokens of the
step budget, and the step (priced by the pricer as a verify step and its drafting) leaves it ``emit`` tokens
longer on average (:mod:`.emission`), its KV cache with them (the rejected drafts' entries are dropped).

Per-request state lives in numpy arrays (:class:`~.state.Requests`) with local copies for the running set, and
a step does O(running) vectorised work. Steps that are pure decode with nothing to admit repeat identically
until a sequence finishes, the KV cache runs short or the next request may arrive: those are taken together.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from shardplan.tools.simulation.admission import COMPUTED, GENERATED, ID, KNOWN, OSL, ROWS, SHARED, Admitted, admit
from shardplan.tools.simulation.blocks import (
    blocks_for,
    decode_steps_that_fit,
    own_blocks,
    preempt_latest,
    release_pins,
    reserved_blocks,
    room,
)
from shardplan.tools.simulation.emission import Emission
from shardplan.tools.simulation.grants import StepKind, has_prompt_work, share_budget
from shardplan.tools.simulation.meter import StepMeter
from shardplan.tools.simulation.pipeline import FirstTokens
from shardplan.tools.simulation.prefix_cache import PrefixCache
from shardplan.tools.simulation.replica import StepCosts, StepPlan, StepPrices, repeats_before, waited
from shardplan.tools.simulation.reservation import CLIP_MAX_NEW_TOKENS, Reservation, request_blocks
from shardplan.tools.simulation.state import Requests

__all__ = ["Engine"]


@dataclass
class Engine(StepMeter):
    """One replica (or decode worker): its waiting queue, running set and KV-cache blocks, and what it measured
    (:class:`~.meter.StepMeter`).

    ``clock`` is when its next step starts. Times are seconds.
    """

    requests: Requests
    costs: StepCosts
    kv_blocks: int
    max_num_seqs: int
    max_batched_tokens: int
    block_tokens: int = 16
    record_steps: bool = False
    chunked_prefill: bool = True
    """A prompt may be split over steps to fill the token budget (vLLM, SGLang, TensorRT-LLM with chunked prefill).
    Without (TensorRT-LLM's default, no context chunking) a prompt enters a step only whole (:mod:`.admission`)."""
    prefix: PrefixCache | None = None
    """The prefix cache of this scheduler's KV cache; None: no prefix caching."""
    reserve_whole: bool = False
    """Admit a request only when the free blocks hold its whole prompt and output (TensorRT-LLM's default
    GUARANTEED_NO_EVICT policy), so nothing is ever preempted; otherwise its prompt's blocks suffice and the
    running set is preempted when decoding outgrows the cache (vLLM, SGLang)."""
    reservation: Reservation | None = None
    """SGLang's admission reservation (:mod:`.reservation`): a request is admitted only when its prompt and output
    (up to 4,096 tokens) fit beside what the running set holds and a decaying share of its remaining outputs; None:
    vLLM's admission on a prompt's blocks, or TensorRT-LLM's ``reserve_whole``."""
    prefill_first: bool = False
    """SGLang's steps (and vLLM V0's without chunked prefill): prompt chunks or decodes, never both, prompts first
    (module docstring); today's vLLM's and TensorRT-LLM's steps mix them."""
    emit: float = 1.0
    """Output tokens a decode step adds to each decoding sequence on average (A + 1 under speculative decoding)."""
    verify: int = 1
    """Step-budget tokens a decoding sequence takes (its last token and K drafts under speculative decoding)."""
    clock: float = 0.0
    waiting: deque[int] = field(default_factory=deque)
    _state: np.ndarray = field(default_factory=lambda: np.zeros((ROWS, 0), dtype=np.int64))
    """The running set in admission order, one column per sequence: rows ``ID``, ``COMPUTED`` (KV tokens),
    ``KNOWN`` (prompt plus output tokens so far), ``GENERATED``, ``OSL``, ``SHARED`` (blocks of its cached
    prefix, held by the prefix cache); written back when it leaves."""
    _used: int = 0
    """KV-cache blocks the running set holds of its own (shared prefix blocks are the prefix cache's)."""
    _prefilling: bool = False
    """Some running sequence still has prompt tokens to compute."""
    _nearest: int = 0
    """Fewest output tokens any running sequence has left."""
    _pipeline: FirstTokens = field(default_factory=FirstTokens)
    """First tokens still in the pipeline, which hold their sequences back (:mod:`.pipeline`)."""
    _price: StepPrices = field(init=False)
    _emission: Emission = field(init=False)
    """Tokens a decode step adds to a sequence, ``emit`` on average (:mod:`.emission`)."""

    def __post_init__(self) -> None:
        self._price = StepPrices(self.costs)
        self._emission = Emission(self.emit)

    @property
    def running(self) -> int:
        """Sequences in the running set."""
        return int(self._state.shape[1])

    @property
    def has_work(self) -> bool:
        return bool(self._state.shape[1] or self.waiting)

    def outstanding_at(self, now: float) -> int:
        """Requests routed here and not finished by ``now`` (those of a step still under way count)."""
        return self.running + len(self.waiting) + (self.last_finished if now < self.last_end else 0)

    def cached_tokens(self, group: int) -> int:
        """Tokens of prefix group ``group``'s prefix its prefix cache holds (0 without one)."""
        return self.prefix.held(group) if self.prefix is not None else 0

    def enqueue(self, rid: int, now: float) -> None:
        """Put request ``rid`` at the back of the waiting queue at time ``now``.

        A request that arrives during a step waits for the next one: its wait until then is counted here."""
        if not self.has_work:
            self.clock = max(self.clock, now)
            if self.reservation is not None:  # SGLang's scheduler idled: its ratio starts again
                self.reservation.reset()
        if self.clock > now:
            self.resident_s += self.clock - now
        self.waiting.append(rid)

    def step(self, horizon: float) -> np.ndarray:
        """Run the next step from ``clock`` (and the identical steps after it that start before ``horizon``);
        returns the ids of the requests that finished, at the new ``clock``.

        Raises:
            RuntimeError: a step with nothing to run (a request longer than the whole KV cache reached it).
        """
        plan = self.plan()
        if plan.until is not None:
            return plan.run(waited(plan.until, horizon, self.clock), 0.0, 1)
        duration, chunk_pass = self._price(plan.decode, plan.prefill)
        return plan.run(duration, chunk_pass, repeats_before(plan.most, duration, horizon, self.clock))

    def plan(self) -> StepPlan:
        """Compose the next step from ``clock``: grant the running sequences their tokens, preempt when the blocks
        run out, admit waiting requests. What it carries is then known; :attr:`StepPlan.run` runs it for as long as
        it is priced (an attention data-parallel replica prices its ranks' steps together).

        Raises:
            RuntimeError: a step with nothing to run (a request longer than the whole KV cache reached it).
        """
        count = self._state.shape[1]
        step = self._prefill_first(count) if self.prefill_first else self._mixed_first(count)
        if step is None:
            raise RuntimeError("an engine step with nothing to run: a request needs more KV cache than the worker has")
        return step

    def _mixed_first(self, count: int) -> StepPlan | None:
        """vLLM's and TensorRT-LLM's step: pure decode steps taken together while nothing else can run, else a step
        mixing the running set's tokens and the admitted prompts' chunks."""
        if self._prefilling or count * self.verify > self.max_batched_tokens or self._pipeline.latest > self.clock:
            return self._compose()
        grow = self._decode_growth()
        if grow is None:
            return self._compose()
        if count and (not self.waiting or count >= self.max_num_seqs):
            return self._decode(count, grow)
        return self._admitting(count, grow)

    def _prefill_first(self, count: int) -> StepPlan | None:
        """SGLang's step (:attr:`prefill_first`): a prefill step while a prompt has tokens left or a waiting request
        can be admitted (``get_next_batch_to_run``: "Run prefill first if possible"), else a decode step of every
        running sequence."""
        if self._prefilling or (self.waiting and count < self.max_num_seqs):
            prefill = self._compose("prefill")
            if prefill is not None:
                return prefill
        # A prompt its KV cache could not continue waits, out of the decode step (the fast path decodes them all).
        grow = self._decode_growth() if count and not self._prefilling and self._pipeline.latest <= self.clock else None
        if grow is None:
            return self._compose("decode")
        return self._decode(count, grow, waits=self.reservation is not None and bool(self.waiting)
                            and count < self.max_num_seqs)

    def _reservation_wait(self, most: int) -> int:
        """Of the next ``most`` decode steps, how many to take together before the waiting request SGLang's
        reservation holds back may fit (the ratio decays each step)."""
        assert self.reservation is not None
        head, state, size = self.waiting[0], self._state, self.block_tokens
        need = request_blocks(int(self.requests.isl[head]), int(self.requests.osl[head]), size)
        pinned = self.prefix.pinned if self.prefix is not None else 0
        return self.reservation.steps_to_admit(state[COMPUTED], state[GENERATED], state[OSL], self._used, need,
                                               self.kv_blocks - pinned, size, most, self.emit)

    def _decode_growth(self) -> int | None:
        """New blocks a pure decode step needs: every running sequence gains one token (up to ``emit`` under
        speculation), and those whose blocks are full take a new one; None when the free blocks lack them."""
        computed = self._state[COMPUTED]
        grow = int(np.count_nonzero(self._blocks(computed + self._emission.most) > self._blocks(computed)))
        return grow if self._used + grow <= self._room() else None

    def _decode(self, count: int, grow: int, waits: bool = False) -> StepPlan:
        """Pure decode steps: one token for every running sequence, nothing admitted; ``waits``: a request waits on
        SGLang's reservation, so they stop where it may fit."""
        nearest = self._nearest

        def run(duration: float, chunk_pass: float, repeats: int) -> np.ndarray:
            now, state = self.clock, self._state
            gained = self._emission.gained(repeats)
            if self.emit == 1:
                state[COMPUTED:GENERATED + 1] += gained
            else:  # no sequence gains more than its output has left (drafts past its end are dropped)
                state[COMPUTED:GENERATED + 1] += np.minimum(gained, state[OSL] - state[GENERATED])
            first = self._used + grow
            recount = repeats > 1 or self.emit != 1
            self._used = int(self._own(state[COMPUTED], state[SHARED]).sum()) if recount else first
            self._account(now, duration * repeats, repeats, count, count, 0, first)
            self._nearest -= gained
            if gained < nearest:
                return self._none()
            return self._finish(state[GENERATED] >= state[OSL])

        most = self._most_repeats(self._emission.steps_to(nearest))
        return StepPlan(count, 0, self._reservation_wait(most) if waits and most > 1 else most, run)

    def _admitting(self, count: int, grow: int) -> StepPlan | None:
        """Every running sequence decodes and waiting requests are admitted: when each admitted one computes all
        its known tokens (a whole prompt, or a decode token whose KV cache came over), every sequence emits."""
        admitted = self._admit(count * self.verify, self._used + grow, self.clock)
        if not admitted.chunks:
            # Blocked until a sequence finishes and frees blocks or a seat; nothing to run without one.
            return self._decode(count, grow) if count else None
        decode = count + admitted.ready
        if not admitted.whole:
            grant = np.concatenate([np.ones(count, dtype=np.int64), np.array(admitted.chunks, dtype=np.int64)])
            return self._run(grant, decode, admitted.blocks)
        prefill = sum(admitted.chunks) - admitted.ready

        def run(duration: float, chunk_pass: float, repeats: int) -> np.ndarray:
            now, state = self.clock, self._state
            # A decoding sequence gains ``emit`` tokens on average (their KV cache with them), at most what its output
            # has left, a prompt its first.
            gained = 1 if self.emit == 1 else np.minimum(
                np.where(state[GENERATED] > 0, self._emission.gained(1), 1), state[OSL] - state[GENERATED])
            state[COMPUTED] = state[KNOWN] + gained - 1
            state[KNOWN:GENERATED + 1] += gained
            first_token = self.requests.first_token
            for rid in admitted.firsts:
                first_token[rid] = now + chunk_pass
            if admitted.firsts:
                self._pipeline.sent(now + chunk_pass, now + duration)
            self._used = admitted.blocks if self.emit == 1 else int(self._own(state[COMPUTED], state[SHARED]).sum())
            self._account(now, duration, 1, state.shape[1], decode, prefill, admitted.blocks)
            self._nearest = int((state[OSL] - state[GENERATED]).min())
            return self._finish(state[GENERATED] >= state[OSL]) if self._nearest <= 0 else self._none()

        return StepPlan(decode, prefill, 1, run)

    def _compose(self, only: StepKind | None = None) -> StepPlan | None:
        """The general step: prompt chunks under way, the token budget shared in admission order (:mod:`.grants`),
        preemption when the blocks run out, admission; ``only``: SGLang's decode or prefill step. None when nothing
        can run (a prefill step with no prompt token, or a request needing more KV cache than the worker has)."""
        state = self._state
        # Sequences whose first token is still in the pipeline sit out the step.
        held = self._pipeline.held(state, self.requests.first_token, self.clock)
        _, decoding, grant = share_budget(state, held, self.verify, self.max_batched_tokens, only)
        # Its KV cache grows by the tokens it gains: up to ceil(A + 1) for a decoding sequence under speculation.
        most = self._emission.most
        grow = grant + (most - 1) * (decoding & (grant > 0)) if most > 1 else grant
        wanted = int(self._own(state[COMPUTED] + grow, state[SHARED]).sum())
        preempted = wanted > self._room()
        if preempted:
            if only == "prefill" and decoding.any():  # SGLang runs no chunk its KV cache cannot hold: decodes free it
                return None
            grant, wanted = self._preempt(grant, grow)
        # A step that preempted admits no one (vLLM v1), unless it preempted every sequence.
        if self.waiting and only != "decode" and (not preempted or self._state.shape[1] == 0):
            running = self._state
            decoding = (grant == 1) & (running[KNOWN] - running[COMPUTED] == 1) & (running[GENERATED] > 0)
            taken = int(grant.sum()) + (self.verify - 1) * int(np.count_nonzero(decoding))
            admitted = self._admit(taken, wanted, self.clock)
            if admitted.chunks:
                grant = np.concatenate([grant, np.array(admitted.chunks, dtype=np.int64)])
                wanted = admitted.blocks
        if not grant.size or not grant.any():
            # Sequences held in the pipeline wait for their first tokens; a prefill step with no prompt has none.
            waiting = only != "prefill" and self._pipeline.pending(self.clock) and self._state.shape[1]
            return self._wait() if waiting else None
        state = self._state
        need = state[KNOWN] - state[COMPUTED]
        decode = int(np.count_nonzero((need == 1) & (state[GENERATED] > 0) & (grant > 0)))
        return self._run(grant, decode, wanted)

    def _run(self, grant: np.ndarray, decode: int, wanted: int) -> StepPlan:
        """A step computing ``grant`` tokens of each running sequence (``decode`` of them decode tokens), holding
        ``wanted`` blocks."""
        tokens = int(grant.sum())

        def run(duration: float, chunk_pass: float, repeats: int) -> np.ndarray:
            now, state = self.clock, self._state
            emitted = state[KNOWN] - state[COMPUTED] == grant  # never a held sequence's: it needs 1 and gets 0
            gained = emitted.astype(np.int64)
            if self.emit != 1:
                # Decoding sequences gain ``emit`` tokens on average, at most what their output has left, and keep
                # the accepted drafts' KV entries.
                decoding = emitted & (state[GENERATED] > 0)
                if decoding.any():
                    gained[decoding] = np.minimum(self._emission.gained(1), (state[OSL] - state[GENERATED])[decoding])
            state[COMPUTED] += grant + gained - emitted
            state[KNOWN:GENERATED + 1] += gained
            first = emitted & (state[GENERATED] == 1)
            if first.any():
                self.requests.first_token[state[ID, first]] = now + chunk_pass
                self._pipeline.sent(now + chunk_pass, now + duration)
            self._used = wanted if self.emit == 1 else int(self._own(state[COMPUTED], state[SHARED]).sum())
            # SGLang's decoding sequences a prefill step left out have no prompt work.
            self._prefilling = has_prompt_work(state) if self.prefill_first else not emitted.all()
            self._account(now, duration, 1, state.shape[1], decode, tokens - decode, wanted)
            left = state[OSL] - state[GENERATED]
            self._nearest = int(left.min())
            return self._finish(left <= 0) if self._nearest <= 0 else self._none()

        return StepPlan(decode, tokens - decode, 1, run)

    def _none(self) -> np.ndarray:
        self.last_finished, self.last_end = 0, self.clock
        return _NONE

    def _wait(self) -> StepPlan:
        """Nothing to run until the first of the held sequences' first tokens is out: the scheduler waits for it
        (:attr:`StepPlan.until`), its running set holding its blocks."""
        state, first_token = self._state, self.requests.first_token
        until = float(first_token[state[ID, self._pipeline.held(state, first_token, self.clock)]].min())
        count, used = state.shape[1], self._used

        def run(duration: float, chunk_pass: float, repeats: int) -> np.ndarray:
            self._account(self.clock, duration * repeats, 0, count, 0, 0, used)
            return self._none()

        return StepPlan(0, 0, 1, run, until)

    def _account(
        self, now: float, elapsed: float, repeats: int, count: int, decode: int, prefill: int, first: int
    ) -> None:
        """Count ``repeats`` steps of ``count`` sequences (``decode`` decode and ``prefill`` prompt tokens each)
        lasting ``elapsed`` in all, and move the clock on; the blocks held grow from ``first`` (the first step's)
        to the running set's at the end."""
        cached = 0
        if self.prefix is not None:
            # An allocation takes the least recently used unpinned prefixes' blocks when the free ones run short.
            self.prefix.evict(self.kv_blocks - self._used)
            cached = self.prefix.blocks
        self.measure(now, elapsed, repeats, count, len(self.waiting), decode, prefill, (first, self._used, cached),
                     self.record_steps)
        if self.reservation is not None and decode and not prefill:
            self.reservation.decay(repeats)
        self.clock = now + elapsed

    def _finish(self, done: np.ndarray) -> np.ndarray:
        """Remove the sequences ``done`` marks, recording their finish (the clock, or when their only token leaves
        the pipeline); returns their ids."""
        state = self._state
        gone = state[:, np.flatnonzero(done)]
        finished = gone[ID]
        # A one-token request is counted here until its token is out.
        finish = np.maximum(self.requests.first_token[finished], self.clock)
        self.requests.finish[finished] = finish
        self.resident_s += float((finish - self.clock).sum())
        self.requests.generated[finished] = gone[GENERATED]
        self._used -= int(self._own(gone[COMPUTED], gone[SHARED]).sum())
        if self.prefix is not None:
            release_pins(self.prefix, self.requests, finished, gone[SHARED], finished=True)
        self._state = state = state.compress(~done, axis=1)
        self._nearest = int((state[OSL] - state[GENERATED]).min()) if state.shape[1] else 0
        self.last_finished, self.last_end = int(finished.size), self.clock
        return finished

    def _blocks(self, tokens: np.ndarray) -> np.ndarray:
        return blocks_for(tokens, self.block_tokens)

    def _own(self, tokens: np.ndarray, shared: np.ndarray) -> np.ndarray:
        return own_blocks(tokens, shared, self.block_tokens)

    def _room(self) -> int:
        return room(self.kv_blocks, self.prefix)

    def _most_repeats(self, nearest: int) -> int:
        """How many identical pure-decode steps may be taken at once: until the first sequence finishes
        (``nearest``) and as many as the free KV-cache blocks allow."""
        if nearest <= 1:
            return 1
        return decode_steps_that_fit(self._state[COMPUTED], nearest, self._room() - self._used, self.block_tokens,
                                     self.emit)

    def _preempt(self, grant: np.ndarray, grow: np.ndarray) -> tuple[np.ndarray, int]:
        """Preempt the most recently admitted sequences until the step's blocks fit, as vLLM v1 does (recompute:
        back to the front of the waiting queue, KV cache dropped); returns the step's grants and blocks. ``grow``:
        the KV tokens each sequence adds in the step."""
        state = self._state
        keep = preempt_latest(state, grow, self._room(), self.block_tokens, self.requests, self.waiting, self.prefix)
        self.preemptions += state.shape[1] - keep
        self._state = state = state[:, :keep]
        if self.reservation is not None:
            self.reservation.retracted(state[GENERATED], state[OSL])
        self._used = int(self._own(state[COMPUTED], state[SHARED]).sum())
        self._nearest = int((state[OSL] - state[GENERATED]).min()) if keep else 0
        return grant[:keep], int(self._own(state[COMPUTED] + grow[:keep], state[SHARED]).sum())

    def _admit(self, tokens: int, blocks: int, now: float) -> Admitted:
        """Admit waiting requests first come, first served while the token budget (``tokens`` of it taken),
        ``max_num_seqs`` and the free blocks (``blocks`` taken) allow (:func:`~.admission.admit`)."""
        state, size = self._state, self.block_tokens
        reserved, clip = None, None
        if self.reserve_whole:
            reserved = reserved_blocks(state[KNOWN], state[GENERATED], state[OSL], size)
        elif self.reservation is not None:
            reserved = blocks + self.reservation.held_back(state[GENERATED], state[OSL], size)
            clip = CLIP_MAX_NEW_TOKENS
        admitted = admit(self.requests, self.waiting, self.prefix, seats=self.max_num_seqs - state.shape[1],
                         budget=self.max_batched_tokens, tokens=tokens, blocks=blocks, kv_blocks=self.kv_blocks,
                         block_tokens=size, chunked=self.chunked_prefill, reserved=reserved, now=now,
                         reserve_clip=clip)
        if admitted.chunks:
            self._state = np.concatenate([state, admitted.columns], axis=1)
        return admitted


_NONE = np.zeros(0, dtype=np.int64)
