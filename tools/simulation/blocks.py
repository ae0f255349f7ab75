"""KV-cache block accounting of one scheduler's running set: the blocks sequences hold, the room a prefix cache
leaves them, the pins a finished or preempted sequence releases, and how many identical decode steps the free
blocks allow.

A sequence of ``n`` KV tokens holds ``ceil(n / block_tokens)`` blocks (vLLM's paged KV cache), less the blocks of
its shared prefix, which the prefix cache (:class:`~.prefix_cache.PrefixCache`) holds once for its group and
pins while a running sequence references them.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from shardplan.tools.simulation.admission import COMPUTED, GENERATED, ID, SHARED
from shardplan.tools.simulation.prefix_cache import PrefixCache
from shardplan.tools.simulation.state import Requests

__all__ = [
    "blocks_for", "own_blocks", "room", "release_pins", "reserved_blocks", "decode_steps_that_fit", "sequences_kept",
    "preempt_latest",
]


def blocks_for(tokens: np.ndarray, block_tokens: int) -> np.ndarray:
    """Blocks that sequences of ``tokens`` KV tokens fill.

    >>> blocks_for(np.array([0, 1, 16, 17]), 16).tolist()
    [0, 1, 1, 2]
    """
    return (tokens + (block_tokens - 1)) // block_tokens


def own_blocks(tokens: np.ndarray, shared: np.ndarray, block_tokens: int) -> np.ndarray:
    """Blocks sequences of ``tokens`` KV tokens hold of their own, beyond the ``shared`` blocks of their prefix.

    >>> own_blocks(np.array([40, 8]), np.array([2, 2]), 16).tolist()
    [1, 0]
    """
    return np.maximum(blocks_for(tokens, block_tokens) - shared, 0)


def room(kv_blocks: int, prefix: PrefixCache | None) -> int:
    """Blocks a running set may hold: the KV cache less the prefixes that running sequences pin (unpinned cached
    prefixes give way)."""
    return kv_blocks - (prefix.pinned if prefix is not None else 0)


def release_pins(prefix: PrefixCache, requests: Requests, ids: np.ndarray, shared: np.ndarray, finished: bool) -> None:
    """Release the prefix pins of the sequences ``ids`` (``shared`` blocks of their group's prefix each); a
    finished one leaves what its group reuses of its sequence cached."""
    for rid, pinned in zip(ids.tolist(), shared.tolist(), strict=True):
        group = int(requests.group[rid])
        if pinned:
            prefix.release(group)
        if finished and requests.keeps[rid]:
            prefix.extend(group, int(requests.keeps[rid]))


def reserved_blocks(known: np.ndarray, generated: np.ndarray, osl: np.ndarray, block_tokens: int) -> int:
    """Blocks sequences hold or will hold by their last token (prompt plus output), as TensorRT-LLM's
    GUARANTEED_NO_EVICT policy reserves them.

    >>> reserved_blocks(np.array([20]), np.array([4]), np.array([12]), 16)
    2
    """
    return int(blocks_for(known - generated + osl, block_tokens).sum())


def decode_steps_that_fit(computed: np.ndarray, steps: int, free: int, block_tokens: int, emit: float) -> int:
    """How many of the next ``steps`` identical decode steps (at least 1) the ``free`` blocks allow sequences of
    ``computed`` KV tokens, each gaining ``emit`` tokens a step on average (up to ``ceil(emit)``).

    >>> decode_steps_that_fit(np.array([16, 16]), 40, 2, 16, 1.0)  # one new block each, then full again
    16
    """
    if steps <= 1:
        return 1
    count, size = computed.size, block_tokens
    if emit != 1.0:
        # Under speculation a step adds up to ceil(emit) tokens a sequence: the most steps whose blocks fit.
        step, held = math.ceil(emit), blocks_for(computed, size)
        low, high = 1, steps
        while low < high:
            middle = (low + high + 1) // 2
            if int((blocks_for(computed + middle * step, size) - held).sum()) <= free:
                low = middle
            else:
                high = middle - 1
        return low
    if free >= count * -(-steps // size):
        return steps
    # Each sequence needs its next block at step ``first`` (1 when its blocks are full), then every ``size``
    # steps: the first ``free`` blocks needed are those at the earliest such steps.
    first = (size - computed % size) % size + 1
    rounds, rest = divmod(free, count)
    return max(1, min(steps, rounds * size + int(np.partition(first, rest)[rest]) - 1))


def sequences_kept(held: np.ndarray, extra: np.ndarray, free: int) -> int:
    """How many of the running sequences (in admission order) a step can keep when the blocks run short: keeping
    the first p needs the ``extra`` blocks of their grants and frees every block ``held`` by the others, on top of
    the ``free`` blocks (vLLM v1 preempts the most recently admitted first)."""
    needed = np.concatenate([[0], np.cumsum(extra)])
    freed = np.concatenate([np.cumsum(held[::-1])[::-1], [0]])
    return int(np.flatnonzero(needed <= free + freed)[-1])


def preempt_latest(
    state: np.ndarray, grow: np.ndarray, free: int, block_tokens: int, requests: Requests, waiting: deque[int],
    prefix: PrefixCache | None,
) -> int:
    """Preempt the most recently admitted sequences of the running set ``state`` (columns in admission order)
    until the step's blocks fit the ``free`` blocks a running set may hold, each sequence adding ``grow`` KV
    tokens in the step, as vLLM v1 does: recompute, each goes back to the front of ``waiting`` in its order, its
    KV cache and prefix pins dropped, its output so far kept. Returns how many sequences stay."""
    held = own_blocks(state[COMPUTED], state[SHARED], block_tokens)
    extra = own_blocks(state[COMPUTED] + grow, state[SHARED], block_tokens) - held
    keep = sequences_kept(held, extra, free - int(held.sum()))
    gone = state[:, keep:]
    if prefix is not None:
        release_pins(prefix, requests, gone[ID], gone[SHARED], finished=False)
    requests.computed[gone[ID]] = 0
    requests.generated[gone[ID]] = gone[GENERATED]
    requests.preemptions[gone[ID]] += 1
    waiting.extendleft(gone[ID, ::-1].tolist())
    return keep
