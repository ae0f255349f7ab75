"""A bounded, in-memory keep of full tool results, so a client can read later what a compact result left out.

The MCP server puts the whole result of each call that has one (a plan with its critical paths, a cost
report, a search's every candidate) here and links it from the compact answer as
``shardplan://results/{id}``. The keep is bounded in entries (:data:`~shardplan.limits.MAX_STORED_RESULTS`)
and in characters (:data:`~shardplan.limits.MAX_STORED_RESULT_CHARS`); the least recently used results go
first, and a result larger than the whole bound is not kept. An id is a digest of the content, so the same
result asked twice is kept once.

>>> store = ResultStore(max_results=2, max_chars=100)
>>> first = store.put('{"a": 1}')
>>> store.get(first)
'{"a": 1}'
>>> _ = store.put('{"b": 2}'); _ = store.put('{"c": 3}')
>>> store.get(first) is None  # the oldest made room
True
>>> store.put("x" * 101) is None  # larger than the whole keep
True
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from shardplan.limits import MAX_STORED_RESULT_CHARS, MAX_STORED_RESULTS

__all__ = ["ResultStore", "RESULT_URI", "result_uri"]

RESULT_URI = "shardplan://results/{result_id}"
"""URI template of a kept result."""


def result_uri(result_id: str) -> str:
    """The URI a kept result is read at."""
    return RESULT_URI.format(result_id=result_id)


class ResultStore:
    """Full results by id, least recently used first out, bounded in count and in characters."""

    def __init__(self, max_results: int = MAX_STORED_RESULTS, max_chars: int = MAX_STORED_RESULT_CHARS) -> None:
        self.max_results = max_results
        self.max_chars = max_chars
        self._kept: OrderedDict[str, str] = OrderedDict()
        self._chars = 0

    def put(self, text: str) -> str | None:
        """Keep ``text`` (a JSON document); its id, or None when it alone exceeds the bound."""
        if len(text) > self.max_chars:
            return None
        result_id = hashlib.sha256(text.encode()).hexdigest()[:16]
        if result_id in self._kept:
            self._kept.move_to_end(result_id)
            return result_id
        self._kept[result_id] = text
        self._chars += len(text)
        while len(self._kept) > self.max_results or self._chars > self.max_chars:
            _, dropped = self._kept.popitem(last=False)
            self._chars -= len(dropped)
        return result_id

    def get(self, result_id: str) -> str | None:
        """The kept text of ``result_id``, or None when it was never kept or has made room for newer ones."""
        text = self._kept.get(result_id)
        if text is not None:
            self._kept.move_to_end(result_id)
        return text

    def __len__(self) -> int:
        return len(self._kept)
