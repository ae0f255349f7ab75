"""Admission from a scheduler's waiting queue: first come, first served while the step's token budget, the free
seats (``max_num_seqs``) and the KV-cache blocks allow, each request with a chunk of its prompt (the whole prompt
when the budget holds it).

A request admitted with nothing computed finds its prefix group's cached prefix (:class:`~.prefix_cache.
PrefixCache`) and computes only the rest of its prompt. Without chunked prefill (TensorRT-LLM's default, vLLM V0's
for MLA) a prompt enters a step only whole; one longer than the whole budget is split all the same, which only a
sequence recomputed after a preemption meets (a TensorRT-LLM run whose prompts can outgrow the budget runs chunked
prefill, as the engine must, and vLLM V0's prompts are checked against its budget before the run). Under
TensorRT-LLM's GUARANTEED_NO_EVICT a request is admitted only when the blocks of its whole prompt and output fit
beside what the running set reserves; under SGLang's reservation (:mod:`.reservation`), its prompt and its output
up to 4,096 tokens beside what the running set holds and holds back for its own outputs.
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

import numpy as np

from shardplan.tools.simulation.prefix_cache import PrefixCache
from shardplan.tools.simulation.state import Requests

__all__ = ["ID", "COMPUTED", "KNOWN", "GENERATED", "OSL", "SHARED", "ROWS", "Admitted", "admit"]

ID, COMPUTED, KNOWN, GENERATED, OSL, SHARED = range(6)
"""Rows of a scheduler's running set, one column per sequence: its id, KV tokens computed, prompt plus output
tokens so far, output tokens, output length, and blocks of its cached prefix (held by the prefix cache)."""
ROWS = 6


class Admitted(NamedTuple):
    """What one step admitted from the waiting queue."""

    chunks: list[int]
    """Tokens each admitted request computes in the step, in admission order."""
    blocks: int
    """Blocks the step holds with them."""
    ready: int
    """How many of them only decode (their KV cache came from a prefill worker)."""
    whole: bool
    """Every one of them computes all its known tokens in the step, so each emits a token."""
    firsts: list[int]
    """Those whose first output token this step emits."""
    nearest: int
    """Fewest output tokens any of them has left."""
    columns: np.ndarray
    """Their running-set columns (rows :data:`ID` to :data:`SHARED`), in admission order."""


def admit(
    requests: Requests,
    waiting: deque[int],
    cache: PrefixCache | None,
    *,
    seats: int,
    budget: int,
    tokens: int,
    blocks: int,
    kv_blocks: int,
    block_tokens: int,
    chunked: bool,
    reserved: int | None,
    now: float,
    reserve_clip: int | None = None,
) -> Admitted:
    """Admit requests from the front of ``waiting`` into a step that already carries ``tokens`` of its ``budget``
    and holds ``blocks`` of ``kv_blocks``, while ``seats`` are free; ``reserved``: the blocks the running set
    reserves to its last token (GUARANTEED_NO_EVICT), None to admit on the blocks of what a request computes;
    ``reserve_clip``: SGLang's reservation instead (:mod:`.reservation`): ``reserved`` is what the running set holds
    and holds back, a request must find its prompt and its output up to this many tokens free beyond it, and the
    blocks of what it computes free too.
    Admitted requests leave ``waiting``, pin their prefix in ``cache`` and get their scheduled time (``now``) and
    prefix hit recorded the first time."""
    req, size = requests, block_tokens
    pinned = cache.pinned if cache is not None else 0
    columns: list[tuple[int, int, int, int, int, int]] = []
    chunks: list[int] = []
    firsts: list[int] = []
    ready, whole, nearest = 0, True, 1 << 62
    while waiting and len(chunks) < seats and tokens < budget:
        rid = waiting[0]
        computed, generated = int(req.computed[rid]), int(req.generated[rid])
        known, osl = int(req.isl[rid]) + generated, int(req.osl[rid])
        group, prefix, shared, pins = int(req.group[rid]), int(req.prefix[rid]), 0, 0
        if cache is not None and prefix:
            if computed == 0:  # nothing of it here yet: the cached blocks of its prefix skip their prefill
                computed = cache.hit_tokens(group, prefix, int(req.isl[rid]))
            shared, pins = prefix // size, cache.growth(group, prefix)
        chunk = min(known - computed, budget - tokens)
        if not chunked and chunk < known - computed <= budget:
            break  # the prompt waits, first in line, for a step with room for all of it
        wanted = max(-(-(computed + chunk) // size) - shared, 0)
        if reserved is not None:
            output = osl if reserve_clip is None else min(osl, reserve_clip)
            whole_blocks = -(-(int(req.isl[rid]) + output) // size)
            free = kv_blocks if reserve_clip is None else kv_blocks - pinned - pins
            if reserved + whole_blocks > free or (reserve_clip is not None and blocks + wanted > free):
                break
            reserved += whole_blocks
        elif blocks + wanted > kv_blocks - pinned - pins:
            break
        waiting.popleft()
        if cache is not None and prefix:
            cache.acquire(group, prefix)
            pinned += pins
            if req.hit[rid] < 0:
                req.hit[rid] = computed
        columns.append((rid, computed, known, generated, osl, shared))
        chunks.append(chunk)
        if chunk < known - computed:
            whole = False
        elif generated == 0:
            firsts.append(rid)
        ready += known - computed == 1 and generated > 0
        nearest = min(nearest, osl - generated)
        tokens += chunk
        blocks += wanted
        if math.isnan(req.scheduled[rid]):
            req.scheduled[rid] = now
    added = np.array(columns, dtype=np.int64).T if columns else _NO_COLUMNS
    return Admitted(chunks, blocks, ready, whole, firsts, nearest, added)


_NO_COLUMNS = np.zeros((ROWS, 0), dtype=np.int64)
