"""Price one engine step of a replica as a function of its decode tokens, prefill tokens and context.

A continuous-batching step carries one token for each running sequence plus a chunk of prompt tokens.
It reads the weights once and runs every projection on all its tokens together, so it is *not* a decode
step plus a separate prefill (that would count the weight reads and the launch overheads twice). The
step is split into what scales with the tokens it carries and what scales with the attention context:

    step(D, P) = linear(D + P) + decode_attention(D) + prefill_attention(P)

* ``linear(n)``: a decode step of ``n`` sequences at a one-token context less its attention kernels,
  priced by the real builder and scheduler (:func:`shardplan.tools.cost.fast.phase_times`): weight
  reads, projections, MoE, collectives, launch overheads, all for ``n`` tokens. The attention kernels
  are left out because a prompt token does not run a decode attention kernel: a measured generation
  kernel over a thousand one-token sequences costs several milliseconds that a chunk never pays;
* ``decode_attention(D)``: what ``D`` sequences at the workload's mean decode context add on top
  (their attention, reading their KV cache), a decode step less its linear work;
* ``prefill_attention(P)``: the causal attention of a chunk of ``P`` prompt tokens, the share ``P / isl``
  of a whole prompt's attention kernels (under attention DP, the prefill of one prompt per group, the
  groups attending side by side).

Prefix caching (``prefix_hit`` h): a prompt's prefill computes only its uncached rest, ``(1 - h) isl`` tokens
(:attr:`~shardplan.contracts.workload.Workload.prefill_tokens`), so chunks and token budgets count those; each of
them still attends to the whole prompt before it. The prefill samples are built with the cached prefix (the DAG's
prefill attention then covers the uncached queries over every key, the whole prompt's causal work less the
prefix's: ``1 - h^2`` of it), and a chunk's attention is its share of that sample's, ``P / ((1 - h) isl)``.

Pipeline parallelism: engines keep ``pp`` batches in flight (vLLM's virtual engines), one per stage, so
in steady state a replica runs ``pp`` lanes whose steps pass through every stage without pipeline
fill. A lane's pass is priced on the layout with one microbatch (its stages one after another); each
stage serves every lane once per round, so a round lasts the mean of the lanes' passes, the one carrying
the prompt chunk included. Static batching keeps the layout's own microbatches (a GPipe-style fill).

Speculative decoding (``speculation``): a step of ``D`` running sequences is a verify step, carrying ``D (K + 1)``
tokens through the linear work and ``K + 1`` queries per sequence through attention (one read of each cache:
``verify_attention``), followed by the drafting of the next step's tokens (:mod:`.drafting`):

    step(D, P) = linear(D (K + 1) + P) + verify_attention(D) + prefill_attention(P) + draft(D, P)

Each sequence then gains ``A + 1`` tokens a step on average, so TPOT is the step over ``A + 1``
(:meth:`StepPricer.tpot_s`): every consumer (steady state, attention DP, split pools, simulator) takes the step from
here and divides by :attr:`StepPricer.tokens_per_step`.

Token counts are sampled at powers of two and interpolated linearly between them, memoised, so a search
pays for a few dozen sampled shapes per layout. Powers of four are too coarse: a dense step is convex
in the tokens (flat while weight reads dominate, then growing with the work), but an MoE step is concave
while the batch still reaches new experts, and a chord over 64..256 sequences put Qwen3-235B's decode
step at 128 sequences 10% below its sampled value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from shardplan.contracts.common import ServingEngine
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.speculation import Speculation
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.drafters import drafter_for, drafter_layout
from shardplan.tools.cost.fast import PhaseTimes, gemm_time_s, phase_times
from shardplan.tools.cost.pricing import Backend
from shardplan.tools.serving.drafting import DraftPricer

__all__ = ["StepPricer", "interpolate_power_grid", "forget_samples"]

_SHARED: dict[tuple[str, str, str, str, str, int, int, str, int, float], PhaseTimes] = {}
"""Sampled shapes shared by every pricer of the process: the search, the agent's checks and the final plan
price the same layouts. Keyed by model, cluster, layout, engine, backend, lengths, kind and token count."""
_SHARED_LIMIT = 200_000


def forget_samples() -> None:
    """Drop every shared sampled shape (benchmarks time a search from scratch)."""
    _SHARED.clear()


def interpolate_power_grid(sample: dict[int, float], n: float, base: int = 2) -> float:
    """Linear interpolation of ``sample`` (keys: powers of ``base`` from 1) at ``n`` tokens.

    >>> interpolate_power_grid({1: 1.0, 2: 2.0, 4: 2.0}, 3)
    2.0
    >>> interpolate_power_grid({1: 1.0, 4: 4.0}, 2.5, base=4)
    2.5
    """
    if n <= 1:
        return sample[1]
    low = base ** int(math.floor(math.log(n, base) + 1e-9))
    if low == n:
        return sample[low]
    high = low * base
    share = (n - low) / (high - low)
    return sample[low] + share * (sample[high] - sample[low])


@dataclass
class StepPricer:
    """Step times in seconds of one replica laid out as ``layout`` (``dp`` is ignored: one replica)."""

    model: ModelSpec
    cluster: Cluster
    layout: PhaseStrategy
    isl: int
    osl: int
    engine: ServingEngine = "vllm"
    """Engine whose measured tables (and collectives) price the steps."""
    backend: Backend = "auto"
    """``auto``: measured tables where they cover a node, the roofline elsewhere; ``roofline``: the roofline."""
    base: int = 2
    """Sampled token counts are the powers of ``base``."""
    speculation: Speculation | None = None
    """Speculative decoding: each decode step verifies K drafts per sequence and drafts the next K."""
    fuse_width: int = 0
    """For a drafter network's own pricer: the input width of its fusing projection (0: none)."""
    qkv_input: int = 0
    """For a drafter network's own pricer: its QKV projections' input width where it is not ``hidden_size`` (an
    EAGLE-3 head's layer reads embedding and hidden state, ``2 h``); 0: the residual stream's."""
    drafting: bool = False
    """Whether this prices a drafter network (its passes), not a target that drafts."""
    prefix_hit: float = 0.0
    """Share of each prompt found in the prefix cache: prefill computes only the rest (the module docstring)."""
    _samples: dict[tuple[str, int], PhaseTimes] = field(default_factory=dict, repr=False)
    _own: dict[tuple[float, float], float] = field(default_factory=dict, repr=False)
    _curves: dict[tuple[str, float], float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.layout = self.layout.model_copy(update={"dp": 1})
        self._lane = self.layout.model_copy(update={"mb": 1})
        self._prefill_tokens = Workload(isl=self.isl, osl=self.osl, prefix_hit=self.prefix_hit).prefill_tokens
        self._key = (
            self.model.model_dump_json(),
            self.cluster.model_dump_json(),
            self.layout.to_spec(),
            self.engine,
            self.backend,
        )
        self.draft: DraftPricer | None = None
        if self.speculation is not None and not self.drafting:
            drafter = drafter_for(self.model, self.speculation)
            network = StepPricer(
                drafter.network, self.cluster, drafter_layout(self.layout, drafter), self.isl, self.osl,
                engine=self.engine, backend=self.backend, base=self.base, speculation=self.speculation,
                fuse_width=drafter.fuse_width, drafting=True,
                qkv_input=drafter.qkv_input if drafter.qkv_input != drafter.network.hidden_size else 0,
            )
            self.draft = DraftPricer(drafter, network)

    @classmethod
    def for_workload(
        cls, model: ModelSpec, cluster: Cluster, layout: PhaseStrategy, workload: Workload, backend: Backend = "auto"
    ) -> StepPricer:
        """A pricer at the workload's lengths, under its engine, with its speculative decoding.

        Raises:
            InputError: the speculation's drafter does not exist for ``model`` (:func:`drafter_for`).
        """
        return cls(model, cluster, layout, workload.isl, workload.osl, engine=workload.engine, backend=backend,
                   speculation=workload.speculation, prefix_hit=workload.prefix_hit)

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a decode step emits per sequence on average: 1, or the accepted drafts plus 1."""
        return self.speculation.tokens_per_step if self.speculation and not self.drafting else 1.0

    @property
    def verify_tokens(self) -> int:
        """Step-budget tokens a decoding sequence takes per step: 1, or its last token and K drafts."""
        return self.speculation.verify_tokens if self.speculation and not self.drafting else 1

    @property
    def lanes(self) -> int:
        """Batches a replica keeps in flight under continuous batching: one per pipeline stage."""
        return self.layout.pp

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens a prompt's prefill computes: those the prefix cache does not hold."""
        return self._prefill_tokens

    @property
    def context(self) -> int:
        """Mean attention context of a decoding sequence: the prompt plus half the output."""
        return self.isl + self.osl // 2

    def _times(self, kind: str, n: int) -> PhaseTimes:
        """A sampled shape: ``linear``/``decode``/``prefill`` on one lane, ``static_*`` on the whole layout."""
        key = (kind, n)
        if key not in self._samples:
            # A verify shape carries K + 1 positions per sequence (the builder's decode step under speculation);
            # a prefill shape computes only the prompt tokens behind the cached prefix.
            verifying = kind == "verify" or kind == "static_decode" and self.draft is not None
            spec = self.speculation if verifying else None
            hit = self.prefix_hit if kind.endswith("prefill") else 0.0
            label = f"{kind}/{spec.verify_tokens if spec else 1}/{self.qkv_input}"
            shared = (*self._key, self.isl, self.osl, label, n, hit)
            if shared not in _SHARED:
                layout = self.layout if kind.startswith("static_") else self._lane
                phase = "prefill" if kind.endswith("prefill") else "decode"
                length = {"linear": 1, "decode": self.context, "static_decode": self.context,
                          "verify": self.context}.get(kind, self.isl)
                shape = Workload(isl=length, osl=1, batch=n, engine=self.engine, speculation=spec, prefix_hit=hit)
                if len(_SHARED) >= _SHARED_LIMIT:
                    _SHARED.clear()
                _SHARED[shared] = phase_times(self.model, self.cluster, phase, layout, shape, self.backend,
                                              self.qkv_input or None)
            self._samples[key] = _SHARED[shared]
        return self._samples[key]

    def _sample(self, kind: str, n: int) -> float:
        """A sampled shape's time; ``linear`` without its attention kernels; ``experts`` the MoE layers'
        section that every attention group joins, from the ``linear`` sample."""
        if kind == "experts":
            return self._times("linear", n).moe_s
        if kind == "fuse":
            return gemm_time_s(self.model, self.cluster, self._lane, n, self.model.hidden_size, self.fuse_width,
                               Workload(isl=1, osl=1, batch=n, engine=self.engine), self.backend)
        times = self._times(kind, n)
        return times.total_s - times.attention_s if kind == "linear" else times.total_s

    def decode_sample_s(self, sequences: int) -> float:
        """One lane's pure decode step of ``sequences`` sequences at the mean context per output token: a single
        sampled shape (a verify step and its drafting under speculation), the search's cheap probe."""
        if self.draft is None:
            return self._sample("decode", max(1, sequences))
        step = self._sample("verify", max(1, sequences)) + self.draft.draft_s(max(1, sequences))
        return step / self.tokens_per_step

    def _curve(self, kind: str, n: float) -> float:
        # A search reads the same few points of a curve hundreds of thousands of times: interpolate each once.
        key = (kind, n)
        found = self._curves.get(key)
        if found is None:
            low = self.base ** int(math.floor(math.log(max(n, 1), self.base) + 1e-9))
            points = {low} if low == n else {low, low * self.base}
            found = interpolate_power_grid({1: 0.0} | {k: self._sample(kind, k) for k in points}, n, self.base)
            self._curves[key] = found
        return found

    def linear_s(self, tokens: float) -> float:
        """Weight reads, projections, experts and collectives of a step carrying ``tokens`` tokens."""
        return self._curve("linear", tokens)

    def fuse_s(self, tokens: float) -> float:
        """A drafter's projection fusing the token embedding with the target's hidden state, for ``tokens`` tokens
        (0 without one)."""
        if self.fuse_width <= 0 or tokens <= 0:
            return 0.0
        return self._curve("fuse", tokens)

    def verify_attention_s(self, sequences: float) -> float:
        """What ``sequences`` sequences add to a verify step by attending with their K + 1 positions to their
        context: a sampled verify step less its linear work on ``sequences x (K + 1)`` tokens."""
        if sequences <= 0 or self.speculation is None:
            return self.decode_attention_s(sequences)
        tokens = sequences * self.speculation.verify_tokens
        # Never below the plain decode attention of the same sequences: the same caches are read, by more queries.
        # (Measured tables can dip where the folded head count sits between measured points: Llama-3.1-8B's verify
        # of 64 sequences at 2 positions came out 2% under its plain step; on an H200 it costs 1.00 to 1.13x.)
        return max(self._curve("verify", sequences) - self._curve("linear", tokens), self.decode_attention_s(sequences))

    def verify_linear_s(self, sequences: float, prefill_tokens: float = 0.0) -> float:
        """The linear work of a verify step: ``sequences`` sequences carrying their K + 1 positions each, and a prompt
        chunk. Never under the same step without the drafts' positions: it reads the same weights for more rows, but
        measured tables dip between neighbouring row counts (Llama-3.1-8B with FP8 weights on an H200 under vLLM's:
        3.95 ms of linear work at 32 tokens, 3.60 at 64), which priced a verify step up to 4% under its plain step."""
        return max(self.linear_s(sequences * self.verify_tokens + prefill_tokens),
                   self.linear_s(sequences + prefill_tokens))

    def tpot_s(self, decode_tokens: float, prefill_tokens: float = 0.0) -> float:
        """Time per output token of a round carrying ``decode_tokens`` running sequences and a prompt chunk: the
        round itself, or under speculation the round over the ``A + 1`` tokens each sequence gains in it."""
        return self.step_s(decode_tokens, prefill_tokens) / self.tokens_per_step

    def decode_attention_s(self, sequences: float) -> float:
        """What ``sequences`` decoding sequences add to a step by attending to their context."""
        if sequences <= 0:
            return 0.0
        return max(0.0, self._curve("decode", sequences) - self._curve("linear", sequences))

    def prefill_attention_s(self, tokens: float) -> float:
        """Causal attention of ``tokens`` prompt tokens, as their share of a whole prompt's attention kernels (of its
        uncached rest's, behind a cached prefix).

        The builder gives every attention data-parallel group at least one sequence, so the smallest prefill it
        prices is one prompt per group, the groups attending side by side: its attention is one prompt's."""
        if tokens <= 0:
            return 0.0
        return self._times("prefill", self.layout.adp).attention_s * tokens / self.prefill_tokens

    def step_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        """One continuous-batching round of the replica: ``decode_tokens`` running sequences spread over its
        lanes and a prompt chunk riding in one of them (the time until every running sequence has its next
        token). Each stage serves every lane once per round, so a round lasts the mean of the lanes' passes:
        the chunk's heavy pass is not smoothed over the light ones."""
        heavy = self.chunk_pass_s(decode_tokens, prefill_tokens)
        if self.lanes == 1:
            return heavy
        return (heavy + (self.lanes - 1) * self.chunk_pass_s(decode_tokens, 0)) / self.lanes

    def chunk_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        """One lane's pass through every stage, carrying its share of the decode tokens and the whole prompt
        chunk (how long the chunk takes to come out)."""
        decode = decode_tokens / self.lanes
        if self.draft is not None:
            return (
                self.verify_linear_s(decode, prefill_tokens)
                + self.verify_attention_s(decode)
                + self.prefill_attention_s(prefill_tokens)
                + self.draft.draft_s(decode, prefill_tokens)
            )
        return (
            self.linear_s(decode + prefill_tokens)
            + self.decode_attention_s(decode)
            + self.prefill_attention_s(prefill_tokens)
        )

    def experts_s(self, tokens: float) -> float:
        """The part of :meth:`linear_s` that the MoE layers' dispatch, experts and combine take for ``tokens``
        tokens over all the attention groups: where attention data-parallel ranks meet (0 without MoE)."""
        return self._curve("experts", tokens)

    def rank_pass_s(self, decode_tokens: float, prefill_tokens: float) -> float:
        """One attention data-parallel rank's own part of a lane's pass: the rank carries ``decode_tokens`` running
        sequences (its share of them in this lane) and a prompt chunk of ``prefill_tokens``, and attends to them,
        projects them and runs its dense layers on them, alone; the MoE section of its layers is left out
        (:meth:`experts_s` prices it on every rank's tokens together).

        The samples spread ``n`` tokens evenly over the ``adp`` groups, so a rank's own part at ``t`` tokens is the
        sampled step at ``adp x t`` tokens less its MoE section; attention data-parallel groups attend side by
        side, so the decode attention of ``adp x d`` sequences is that of ``d`` on one rank, and a chunk's
        attention is already priced on one group (:meth:`prefill_attention_s`). With ``adp = 1`` this and
        :meth:`experts_s` add up to :meth:`chunk_pass_s`."""
        key = (decode_tokens, prefill_tokens)
        found = self._own.get(key)
        if found is None:
            groups = self.layout.adp
            decode = decode_tokens / self.lanes
            tokens = groups * (decode * self.verify_tokens + prefill_tokens)
            # Under speculation the rank also drafts, every rank at this load (the drafter's MoE section, if it has
            # one, counted here whole: its share of the step is not split between the ranks' own parts and the
            # experts they share).
            drafting = self.draft.draft_s(groups * decode, groups * prefill_tokens) if self.draft is not None else 0.0
            found = self._own[key] = (
                self.linear_s(tokens)
                - self.experts_s(tokens)
                + self.verify_attention_s(groups * decode)
                + self.prefill_attention_s(prefill_tokens)
                + drafting
            )
        return found

    def decode_step_s(self, sequences: int) -> float:
        """A static-batching decode step of ``sequences`` sequences on the layout (its microbatches); under
        speculation a verify step and the drafting after it."""
        step = self._sample("static_decode", max(1, sequences))
        return step + self.draft.draft_s(max(1, sequences)) if self.draft is not None else step

    def prefill_s(self, prompts: int) -> float:
        """A static-batching prefill of ``prompts`` whole prompts together on the layout, and the drafter's pass
        over them under speculation."""
        prefill = self._sample("static_prefill", max(1, prompts))
        if self.draft is not None:
            prefill += self.draft.prefill_s(max(1, prompts), max(1, prompts) * self.isl)
        return prefill
