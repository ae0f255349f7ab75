"""What the simulation knows about each request: its lengths, its progress, and the times it records.

One record, arrays indexed by request, shared by every worker a request passes through: the prefill pool,
the KV transfer and the decode worker of a split deployment write to the same entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardplan.tools.traffic.stream import RequestStream

__all__ = ["Requests"]


@dataclass
class Requests:
    """Per request (arrays of one length): lengths, progress on its current worker, and recorded times in
    seconds (NaN until they happen)."""

    isl: np.ndarray
    """Prompt tokens (int64)."""
    osl: np.ndarray
    """Output tokens (int64)."""
    arrival: np.ndarray
    """When it reached the deployment; a closed loop's requests get theirs when their client sends them."""
    scheduled: np.ndarray
    """When a step (or a prefill worker) first carried it: queue time is ``scheduled - arrival``."""
    first_token: np.ndarray
    """When its first output token was out (a split deployment's: once its KV cache reached a decode worker)."""
    finish: np.ndarray
    """When its last output token was out."""
    computed: np.ndarray
    """KV-cache tokens computed on the worker that holds it (int64; 0 again after a preemption)."""
    generated: np.ndarray
    """Output tokens produced so far (int64)."""
    preemptions: np.ndarray
    """Times it lost its KV cache to a preemption (int64)."""
    group: np.ndarray
    """Its prefix group (int64; -1: none)."""
    prefix: np.ndarray
    """Leading tokens of its prompt it shares with earlier requests of its group (int64; 0: none)."""
    keeps: np.ndarray
    """Tokens of its sequence its group's next requests reuse once it finishes (int64; 0: only its prefix)."""
    hit: np.ndarray
    """Prompt tokens a prefix cache held when it was first prefilled (int64; -1: not yet, or no prefix cache)."""

    @classmethod
    def from_stream(
        cls, stream: RequestStream, prefix: np.ndarray | None = None, keeps: np.ndarray | None = None
    ) -> Requests:
        """The requests of ``stream``, none started; arrival times as drawn (a closed loop's are set later); each
        sharing ``prefix`` tokens with its prefix group and leaving ``keeps`` to it (default none).

        >>> import numpy as np
        >>> s = RequestStream(np.zeros(2), np.array([8, 9]), np.array([2, 3]), np.full(2, -1))
        >>> Requests.from_stream(s).first_token.tolist()
        [nan, nan]
        """
        count = len(stream)
        return cls(
            isl=stream.isl.astype(np.int64),
            osl=stream.osl.astype(np.int64),
            arrival=stream.arrival_s.astype(np.float64),
            scheduled=np.full(count, np.nan),
            first_token=np.full(count, np.nan),
            finish=np.full(count, np.nan),
            computed=np.zeros(count, dtype=np.int64),
            generated=np.zeros(count, dtype=np.int64),
            preemptions=np.zeros(count, dtype=np.int64),
            group=stream.prefix_group.astype(np.int64),
            prefix=(prefix if prefix is not None else np.zeros(count)).astype(np.int64),
            keeps=(keeps if keeps is not None else np.zeros(count)).astype(np.int64),
            hit=np.full(count, -1, dtype=np.int64),
        )

    def __len__(self) -> int:
        return int(self.isl.shape[0])
