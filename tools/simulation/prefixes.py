"""Which requests share a prompt prefix, and how long it is: what a simulated prefix cache can find.

The simulator does not see tokens, so each request carries a prefix group and the leading tokens of its prompt
that it shares with the group's earlier requests. They come, first found first:

1. a trace's prefix-token column (``prefix_tokens``, ``cached_tokens``, ``prefix_len``): those tokens, within
   the request's prefix group (one group for the whole trace when it names none);
2. a trace's prefix groups with the request's ``prefix_hit`` H: the first ``H x isl`` tokens of every prompt of a
   group are the group's prefix (a system prompt or document per group);
3. a trace's prefix groups alone: a conversation, each turn's prompt repeating the last turn's prompt and answer
   (as chat sessions do): a request shares its group's previous request's prompt and output when its own prompt
   is longer, and leaves its own to the next turn;
4. ``prefix_hit`` H alone: one prefix shared by every request, its first ``H x isl`` tokens.

Without any of them there is no prefix caching.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.tools.traffic.stream import RequestStream

__all__ = ["SharedPrefixes", "shared_prefixes"]


@dataclass(frozen=True)
class SharedPrefixes:
    """Per request: its prefix group, the prompt tokens it shares with the group, and the tokens of its sequence it
    leaves to the group's next requests (0: only its prefix); and the rule that set them, in words."""

    group: np.ndarray
    prefix: np.ndarray
    keeps: np.ndarray
    rule: str


def shared_prefixes(stream: RequestStream, hit: float) -> SharedPrefixes | None:
    """The prefixes the requests of ``stream`` share (module docstring), at the request's hit rate ``hit``; None
    when nothing is shared.

    >>> s = RequestStream(np.zeros(3), np.array([100, 200, 50]), np.array([10, 10, 10]), np.full(3, -1))
    >>> shared_prefixes(s, 0.5).prefix.tolist()
    [50, 100, 25]
    >>> talk = RequestStream(np.zeros(3), np.array([100, 150, 90]), np.array([20, 20, 20]), np.array([0, 0, 0]))
    >>> shared_prefixes(talk, 0.0).prefix.tolist()
    [0, 120, 0]
    """
    isl = stream.isl.astype(np.int64)
    groups = stream.prefix_group.astype(np.int64)
    grouped = bool((groups >= 0).any())
    zeros = np.zeros(len(stream), dtype=np.int64)
    if stream.prefix_tokens is not None:
        group = groups if grouped else np.zeros_like(groups)
        prefix = np.minimum(stream.prefix_tokens.astype(np.int64), isl)
        return SharedPrefixes(group, np.where(group >= 0, prefix, 0), zeros,
                              "the trace's prefix tokens, shared within each prefix group")
    if hit > 0:
        prefix = np.rint(hit * isl).astype(np.int64)
        if grouped:
            return SharedPrefixes(groups, np.where(groups >= 0, prefix, 0), zeros,
                                  f"the first {hit:.0%} of each prompt shared within its prefix group")
        return SharedPrefixes(np.zeros_like(groups), prefix, zeros,
                              f"one prefix shared by every request: the first {hit:.0%} of each prompt")
    if not grouped:
        return None
    prefix = zeros.copy()
    last: dict[int, int] = {}
    seen = (isl + stream.osl.astype(np.int64)).tolist()
    for index, group in enumerate(groups.tolist()):
        if group < 0:
            continue
        before = last.get(group)
        if before is not None and before < isl[index]:
            prefix[index] = before
        last[group] = seen[index]
    keeps = np.where(groups >= 0, isl + stream.osl.astype(np.int64), 0)
    return SharedPrefixes(groups, prefix, keeps,
                          "conversations: each request of a prefix group repeats its previous request's prompt and "
                          "output when its own prompt is longer")
