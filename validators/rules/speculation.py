"""Speculative decoding (10-decode-constraints.md): a verify pass over K + 1 positions per sequence, then the
drafter's K passes in a chain, all inside the one decode step (DEC-1 and DEC-5 close it over the drafter too)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from shardplan.text import counted
from shardplan.validators.derived import attention_shapes
from shardplan.validators.index import DagIndex
from shardplan.validators.registry import Finding, rule, sample

__all__ = ["rule_verify_then_draft_chain"]


def _draft_pass(ix: DagIndex, i: int) -> int | None:
    value = ix.attr(i, "draft_pass")
    return value if isinstance(value, int) else None


@rule("SPEC-1")
def rule_verify_then_draft_chain(ix: DagIndex) -> Iterator[Finding]:
    """The verify pass carries K + 1 positions, then K draft passes per microbatch, each reading the token sampled
    just before it; no draft pass without speculation."""
    spec = ix.meta.workload.speculation
    drafted = [i for i in range(len(ix)) if ix.phase[i] == "decode" and _draft_pass(ix, i) is not None]
    if spec is None:
        if drafted:
            yield Finding(
                message=f"{len(drafted)} decode nodes belong to a draft pass, but the workload does not speculate: "
                f"{sample([ix.ids[i] for i in drafted])}",
                fix="remove the draft passes, or record the speculation (method, K, acceptance) in the workload",
                nodes=[ix.ids[i] for i in drafted],
            )
        return
    shapes = attention_shapes(ix)
    narrow = [
        ix.ids[i]
        for i in ix.of_kind("attention")
        if ix.phase[i] == "decode" and _draft_pass(ix, i) is None and shapes[i].get("q_len", 1) != spec.verify_tokens
    ]
    if narrow:
        yield Finding(
            message=f"{len(narrow)} attention nodes of the verify pass do not carry the K + 1 = {spec.verify_tokens} "
            f"positions per sequence the step checks: {sample(narrow)}",
            fix=f"verify each sequence's last token and its {counted(spec.draft_tokens, 'draft')}: "
                f"q_len={spec.verify_tokens}",
            nodes=narrow,
        )
    # Per microbatch: the samplers of the verify pass (None) and of each draft pass, and each pass's embeddings.
    samplers: dict[tuple[int, int | None], set[int]] = defaultdict(set)
    for i in ix.of_kind("sampler"):
        if ix.phase[i] == "decode":
            samplers[(ix.mb[i], _draft_pass(ix, i))].add(i)
    missing, unchained = [], []
    for mb in ix.microbatches.get("decode", []):
        for index in range(spec.draft_tokens):
            if not samplers.get((mb, index)):
                missing.append(f"mb{mb}/draft{index}")
    for i in ix.of_kind("embedding"):
        drafting = _draft_pass(ix, i)
        if ix.phase[i] != "decode" or drafting is None:
            continue
        before = samplers.get((ix.mb[i], drafting - 1 if drafting else None), set())
        if not before & set(ix.pred(i)):
            unchained.append(ix.ids[i])
    if missing:
        yield Finding(
            message=f"{len(missing)} of the drafter's {spec.draft_tokens} passes per decode microbatch are missing "
            f"(or sample nothing): {sample(missing)}",
            fix=f"draw {spec.draft_tokens} draft passes per microbatch after the verify pass, each ending in a sampler",
        )
    if unchained:
        yield Finding(
            message=f"{len(unchained)} draft passes do not start from the token sampled just before them (the "
            f"verify pass's sampler for the first, the previous pass's otherwise): {sample(unchained)}",
            fix="feed each draft pass's embedding from the sampler before it: the passes form a chain",
            nodes=unchained,
        )
