"""What speculative decoding did in the chosen deployment: its step against a plain one at the same layout and batch.

The plan's request records the speculation (method, K drafts, A accepted); its cost report says what that bought
(:class:`~shardplan.contracts.feature_effects.SpeculationEffect`), and the explanation says it in a sentence.
"""

from __future__ import annotations

import math

from shardplan.contracts.feature_effects import SpeculationEffect
from shardplan.contracts.hardware import Cluster
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.plan import PricedDeployment
from shardplan.contracts.speculation import speculation_text
from shardplan.contracts.workload import Workload
from shardplan.text import counted
from shardplan.tools.catalogs.drafters import drafter_for
from shardplan.tools.cost.memory import GB, drafter_bytes_per_gpu
from shardplan.tools.serving.steady import serving_point
from shardplan.tools.serving.steps import StepPricer

__all__ = ["speculation_effect", "speculation_sentence"]

_HOW = {
    "mtp": "the model's MTP layer(s), a block of its own kind after a fusing projection, sharing its embedding and "
    "LM head (engines reuse the layers in turn when K exceeds them)",
    "eagle": "an EAGLE-3 head (one decoder layer reading the token's embedding beside a hidden state, its fc fusing "
    "three of the target's hidden states on the first pass, its own LM head over a draft vocabulary, the target's "
    "embedding)",
    "draft": "the draft model's own decode passes on the target's tensor-parallel GPUs",
}


def speculation_effect(
    model: ModelSpec, cluster: Cluster, option: PricedDeployment, workload: Workload
) -> SpeculationEffect | None:
    """The chosen deployment's speculative step and the same deployment and batch without speculation (None when
    the workload does not speculate)."""
    spec = workload.speculation
    if spec is None:
        return None
    layout = option.strategy.decode.model_copy(update={"dp": 1})
    running = option.running_cap or option.worker_concurrency
    plain_workload = workload.model_copy(update={"speculation": None})
    drafting = StepPricer.for_workload(model, cluster, layout, workload)
    plain = StepPricer.for_workload(model, cluster, layout, plain_workload)
    assert drafting.draft is not None
    step_s, plain_s = drafting.step_s(running, 0), plain.step_s(running, 0)
    if option.strategy.disaggregated or workload.batching == "static":
        tpot_without = plain.tpot_s(running) if workload.batching == "continuous" else plain.decode_step_s(running)
    else:
        point = serving_point(plain, running, plain_workload)
        tpot_without = point.tpot_s if point is not None else plain_s
    weights, kv_per_sequence = drafter_bytes_per_gpu(model, layout, workload, workload.isl + workload.osl)
    per_gpu_sequences = math.ceil(running / layout.adp)
    verify = spec.verify_tokens
    alone = drafting.step_s(layout.adp, 0) / plain.step_s(layout.adp, 0)
    head = drafter_for(model, spec).head
    return SpeculationEffect(
        tokens_per_step=spec.tokens_per_step,
        verify_tokens=verify,
        step_ms=step_s * 1e3,
        draft_ms=drafting.draft.draft_s(running / drafting.lanes) * 1e3,
        step_without_ms=plain_s * 1e3,
        tpot_without_ms=tpot_without * 1e3,
        draft_memory_gb=(weights + per_gpu_sequences * kv_per_sequence) / GB,
        notes=[
            f"{speculation_text(spec)} with {spec.accepted:g} accepted drafts per step (the request's measured "
            f"acceptance): each step emits {spec.tokens_per_step:g} tokens per sequence, so TPOT is the step over "
            f"{spec.tokens_per_step:g} and a request decodes in (osl - 1) / {spec.tokens_per_step:g} steps",
            f"the verify pass carries {verify} positions per sequence through the target's linear work "
            f"({verify} x {counted(running, 'token')} at {counted(running, 'sequence')}) and attends with them over "
            f"one read of each "
            "sequence's KV cache (the decode kernels fold the positions into the query heads)",
            f"drafting: {spec.draft_tokens} pass(es) of {_HOW[spec.method]}; the first over the verified positions "
            "and any prompt chunk, the others over one token per sequence",
            *([head.describe()] if head is not None else []),
            f"a speculative step costs {step_s / plain_s:.2f}x a plain one at this batch and {alone:.2f}x at one "
            "sequence per attention group: small steps are bound by reading the weights whatever tokens they carry, "
            "larger ones pay for every extra position in compute, so the gain shrinks as the batch grows",
            f"priced at {counted(running, 'sequence')} per "
            f"{'decode worker' if option.strategy.disaggregated else 'replica'} of "
            f"{layout.to_spec()}, the chosen deployment's load, against a plain decode step of the same layout and "
            "batch",
        ],
    )


def speculation_sentence(effect: SpeculationEffect) -> str:
    """The explanation's sentence on what speculation bought, and why its gain is what it is at this batch."""
    ratio = effect.step_ms / effect.step_without_ms if effect.step_without_ms > 0 else 0.0
    tpot = effect.step_ms / effect.tokens_per_step
    gain = effect.tpot_without_ms / tpot if tpot > 0 else 0.0
    text = (
        f"Speculative decoding verifies {effect.verify_tokens} positions per sequence a step and emits "
        f"{effect.tokens_per_step:g} tokens: a decode step takes {effect.step_ms:.2f} ms ({effect.draft_ms:.2f} ms "
        f"of it drafting) against {effect.step_without_ms:.2f} ms for a plain step of the same batch, so it costs "
        f"{ratio:.2f}x a plain step and buys {gain:.2f}x on TPOT (plain TPOT {effect.tpot_without_ms:.2f} ms)"
    )
    # The verify pass's extra positions are nearly free while a step is bound by reading the weights; once the
    # batch makes it bound by compute, each costs its share, and the step's cost over a plain one says which.
    verify = effect.step_ms - effect.draft_ms
    extra = (verify / effect.step_without_ms - 1) / (effect.verify_tokens - 1) if effect.step_without_ms > 0 else 0.0
    if extra < 0.1:
        text += (
            f"; each extra verified position costs {extra:.1%} of a plain step: at this batch the step is still bound "
            "by reading the weights, so the extra positions ride almost free"
        )
    else:
        text += (
            f"; each extra verified position costs {extra:.0%} of a plain step at this batch, where the step grows "
            "with the tokens it carries, so the gain is smaller than at small batches and shrinks as the batch grows"
        )
    return text + "."
