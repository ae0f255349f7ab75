"""One worker's prefix cache: the KV blocks of shared prompt prefixes, by prefix group, evicted least recently used.

vLLM's automatic prefix caching keeps the full blocks of every computed prompt under a hash of their tokens; a new
request whose leading blocks hash alike reuses them and computes only the rest (at least its last token). Blocks
that running sequences reference are pinned; a freed block stays cached in the free queue until an allocation
needs room, which takes the least recently used first. The simulator does not see tokens, so it keys the cache by
prefix group: each request names its group and how many leading tokens of its prompt it shares with the group
(:mod:`.prefixes`), and a group's cached prefix is the longest any of its requests has brought in. A group is
evicted whole, least recently used first, and only when no running sequence references it.

Blocks are counted once per group here; a sequence's own blocks (beyond its shared prefix) are the engine's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["PrefixCache"]


@dataclass
class PrefixCache:
    """The cached prefix blocks of one scheduler's KV cache (a replica's, an attention rank's, a worker's)."""

    block_tokens: int
    _resident: OrderedDict[int, int] = field(default_factory=OrderedDict)
    """Blocks cached per group, least recently used first."""
    _refs: dict[int, int] = field(default_factory=dict)
    """Running sequences referencing each group's blocks."""
    _pinned: int = 0
    """Blocks of the groups some running sequence references."""
    evictions: int = 0
    """Groups evicted to make room."""

    @property
    def blocks(self) -> int:
        """Blocks the cached prefixes hold."""
        return sum(self._resident.values())

    @property
    def pinned(self) -> int:
        """Blocks no allocation may take: those of prefixes that running sequences reference."""
        return self._pinned

    def held(self, group: int) -> int:
        """Tokens of ``group``'s prefix cached here (whole blocks).

        >>> cache = PrefixCache(16)
        >>> cache.acquire(3, 40), cache.held(3), cache.held(4)
        (2, 32, 0)
        """
        return self._resident.get(group, 0) * self.block_tokens

    def hit_tokens(self, group: int, prefix: int, prompt: int) -> int:
        """Tokens of a prompt of ``prompt`` tokens sharing ``prefix`` leading tokens with ``group`` that the cache
        holds: whole blocks of the prefix, at most the prompt less one token (recomputed for its logits)."""
        if group < 0 or prefix <= 0:
            return 0
        blocks = min(self._resident.get(group, 0), prefix // self.block_tokens, (prompt - 1) // self.block_tokens)
        return max(blocks, 0) * self.block_tokens

    def growth(self, group: int, prefix: int) -> int:
        """Blocks that pinning ``group`` for a sequence sharing ``prefix`` tokens adds to :attr:`pinned`: the
        group's cached blocks when nothing references them yet, and the blocks its prefix adds."""
        if group < 0 or prefix < self.block_tokens:
            return 0
        cached = self._resident.get(group, 0)
        grown = max(prefix // self.block_tokens, cached)
        return grown - (cached if self._refs.get(group, 0) else 0)

    def acquire(self, group: int, prefix: int) -> int:
        """A sequence sharing ``prefix`` tokens with ``group`` starts: the group's prefix grows to its whole blocks
        (the sequence computes what is missing), becomes the most recently used and is pinned; returns the blocks
        the sequence shares (0 without a group)."""
        shared = prefix // self.block_tokens if group >= 0 else 0
        if shared <= 0:
            return 0
        self._pinned += self.growth(group, prefix)
        self._resident[group] = max(self._resident.get(group, 0), shared)
        self._resident.move_to_end(group)
        self._refs[group] = self._refs.get(group, 0) + 1
        return shared

    def warm(self, prefixes: Iterable[tuple[int, int]], room: int) -> None:
        """Hold ``prefixes`` ((group, tokens), least recently used first) before any sequence runs, as an earlier
        run on the same engine leaves them, and as many of them as ``room`` blocks hold (the most recent kept).
        Nothing is pinned.

        >>> cache = PrefixCache(16)
        >>> cache.warm([(0, 100), (1, 40), (2, 64)], room=7)
        >>> cache.held(0), cache.held(1), cache.held(2)
        (0, 32, 64)
        """
        for group, tokens in prefixes:
            blocks = tokens // self.block_tokens
            if group >= 0 and blocks > 0:
                self._resident[group] = max(self._resident.get(group, 0), blocks)
                self._resident.move_to_end(group)
        self.evict(room)
        self.evictions = 0  # what did not fit was left out before the run, not evicted during it

    def release(self, group: int) -> None:
        """A sequence of ``group`` that :meth:`acquire` pinned finished or was preempted: its prefix stays cached,
        unpinned once no running sequence references it."""
        refs = self._refs.get(group, 0) - 1
        if refs > 0:
            self._refs[group] = refs
            return
        self._refs.pop(group, None)
        self._pinned -= self._resident.get(group, 0)

    def extend(self, group: int, tokens: int) -> None:
        """A finished sequence of ``group`` leaves its first ``tokens`` cached for the group's next requests (a
        conversation's next turn reuses the last turn's prompt and answer): the group's prefix grows to them."""
        blocks = tokens // self.block_tokens
        if group < 0 or blocks <= self._resident.get(group, 0):
            return
        if self._refs.get(group, 0):
            self._pinned += blocks - self._resident.get(group, 0)
        self._resident[group] = blocks
        self._resident.move_to_end(group)

    def evict(self, room: int) -> None:
        """Evict unpinned prefixes, least recently used first, until the cached blocks fit in ``room``.

        >>> cache = PrefixCache(16)
        >>> _ = cache.acquire(1, 64), cache.acquire(2, 64)
        >>> cache.release(1)
        >>> cache.evict(5)
        >>> cache.held(1), cache.held(2), cache.evictions
        (0, 64, 1)
        """
        total = self.blocks
        if total <= room:
            return
        for group in list(self._resident):
            if total <= room:
                break
            if self._refs.get(group, 0):
                continue
            total -= self._resident.pop(group)
            self.evictions += 1
