"""The engine features a request turns on, in the words every surface prints them with (the terminal's and the
chat's request lines, the report's request panel)."""

from __future__ import annotations

from shardplan.contracts.speculation import Speculation, speculation_text
from shardplan.contracts.workload import Workload

__all__ = ["speculation_words", "feature_words"]


def speculation_words(spec: Speculation) -> str:
    """``spec`` as a person reads it.

    >>> from shardplan.contracts.speculation import parse_speculation
    >>> speculation_words(parse_speculation("mtp:1", 0.8))
    'speculative decoding mtp:1, 0.8 accepted per step (1.8 tokens per step)'
    """
    return (f"speculative decoding {speculation_text(spec)}, {spec.accepted:g} accepted per step "
            f"({spec.tokens_per_step:g} tokens per step)")


def feature_words(workload: Workload) -> str:
    """``, speculative decoding ..., prefix hit 50%`` for what ``workload`` turns on; empty when nothing.

    >>> feature_words(Workload(isl=2048, osl=256, prefix_hit=0.5))
    ', prefix hit 50% of prompt tokens'
    """
    parts = []
    if workload.speculation is not None:
        parts.append(speculation_words(workload.speculation))
    if workload.prefix_hit > 0:
        parts.append(f"prefix hit {workload.prefix_hit:.0%} of prompt tokens")
    return "".join(f", {part}" for part in parts)
