"""Disaggregated serving said as its two pools: "prefill on 8 GPUs, decode on the other 8".

Read as GPU counts, the two figures would be two totals (a contradiction, or one pool taken for the whole
deployment); they are one disaggregated deployment on their sum. The split itself is not kept: no constraint fixes
a pool's size, so the search chooses it, and the note says so.

>>> from shardplan.agent.parse.text import Findings, Scan
>>> found = Findings()
>>> read_pools(Scan("16 ####: prefill on 8 gpus, decode on the other 8, ttft p99 3s"), found)
>>> found.values
{'disaggregated': [True], 'gpus': [16]}
"""

from __future__ import annotations

import re

from shardplan.agent.parse.readers import _gpu_type_pattern
from shardplan.agent.parse.text import _COUNT, Findings, Scan, _count
from shardplan.text import counted

__all__ = ["read_pools"]

_VERB = r"(?:on|uses?|using|gets?|with|runs?\s+on|:)"
_GPUS = rf"[\s#×x-]*(?:{_gpu_type_pattern()}\s*)?(?:gpus?|cards?)?"
_POOLS = re.compile(
    rf"(?<![\w#])prefill(?:\s+(?:pool|workers?|phase|side))?\s+{_VERB}\s*(?P<p>{_COUNT}){_GPUS}\s*"
    rf"(?:,|;|and|while|with)?\s*(?:the\s+)?decode(?:\s+(?:pool|workers?|phase|side))?\s+{_VERB}\s*"
    rf"(?:the\s+)?(?:other|another|remaining|rest\s+of\s+the)?\s*(?P<d>{_COUNT}){_GPUS}(?![\w])"
)
"""Prefill's pool then decode's, each with its GPU count (a GPU type already read shows as "#")."""


def read_pools(scan: Scan, found: Findings) -> None:
    """Disaggregated serving on the sum of the two pools' GPUs, read before the GPU counts take the figures."""
    for match in scan.take(_POOLS):
        prefill, decode = _count(match.group("p")), _count(match.group("d"))
        if min(prefill, decode) < 1:
            continue
        words = match.group().strip()
        found.add("disaggregated", True, words)
        found.add("gpus", prefill + decode, words)
        found.notes.append(f"Read '{words}' as disaggregated serving on {counted(prefill + decode, 'GPU')}; how they "
                           f"split "
                           "between prefill and decode is the search's choice (a pool's size is not a constraint).")
