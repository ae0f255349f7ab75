"""What a message asks for: a plan (the default), an explanation of the plan, why the plan does not use a technique,
or a comparison ("why not PP?", "explain the choice", "compare with H200"), and the technique it is about."""

from __future__ import annotations

import re

from shardplan.agent.parse.text import Intent, Scan, _matched_name, _named_alternatives

__all__ = ["read_intent"]


_TOPICS = {
    "adp": r"adp|dp[\s-]*attention|attention[\s-]*(?:dp|data[\s-]*parallel\w*)|data[\s-]*parallel(?:ism)?[\s-]+"
    r"(?:for\s+)?attention",
    "pp": r"pp|pipeline(?:[\s-]*parallel\w*|[\s-]*stages?)?",
    "tp": r"tp|tensor(?:[\s-]*parallel\w*)?",
    "ep": r"ep|experts?(?:[\s-]*parallel\w*)",
    "sp": r"sp|cp|sequence(?:[\s-]*parallel\w*)?|context[\s-]*parallel\w*",
    "dp": r"dp|data[\s-]*parallel\w*|replicas?|replication",
    "disagg": r"disaggregat\w*|pd[\s-]+disagg\w*|separate\s+prefill(?:\s+and\s+decode)?"
    r"|split\s+prefill\s+and\s+decode",
    "mb": r"mb|micro[\s-]*batch\w*",
}
_TOPIC = _named_alternatives(_TOPICS)
_WHY_NOT = re.compile(
    r"\b(?:(?:why|how\s+come)\s+(?:not|no|didn'?t\s+you|did\s+you\s+not|don'?t\s+you|aren'?t\s+you|isn'?t\s+it"
    r"|wasn'?t|you\s+didn'?t|you\s+did\s+not|not)"
    r"|what\s+about|how\s+about)\s+(?:just\s+)?(?:use\s+|using\s+|try\s+|trying\s+|pick\s+|choose\s+|more\s+|some\s+"
    rf"|any\s+|go\s+with\s+|run\s+|running\s+)?(?:{_TOPIC})(?![\w=])"
)
_WHY_NOT_FLAG = re.compile(
    r"\b(?:(?:why|how\s+come)\s+not|why\s+(?:won'?t|wouldn'?t|doesn'?t|can'?t|cannot|does\s+not|will\s+not)\s+"
    r"[^?.!]{0,60}?\b(?:accept|allow|take|run|work\s+with|support))\s+"
    rf"(?=--?(?:{_TOPIC}))"
)
"""A why-not about a layout given as flags ("why not --tp 2 --dp 4?", "why won't vllm accept --tensor-parallel-size
3?"): the flags stay for the settings reader, which reads the layout asked about."""
_WHY_THIS_NOT = re.compile(
    rf"\bwhy\s+(?:{_TOPIC})\s*[=:]?\s*\d+\s+(?:and|but)\s+not\s+\d+"
)
"""A degree questioned against another ("why TP=4 and not 8?"): why not the other."""
_EXPLAIN = re.compile(
    r"\bexplain\b|\bwhy\b(?!\s+not\b)|\bhow\s+come\b|\bwalk\s+me\s+through\b|\bhow\s+did\s+you\s+(?:arrive|get|pick|choose)"
    r"|\bwhat\s+does\s+.{1,60}?\s+(?:actually\s+)?(?:buy|give|get)\s+(?:us|me)\b"
)
_COMPARE = re.compile(
    r"\bcompare\b|\bvs\b\.?|\bversus\b|\bwhich\s+is\s+(?:better|faster|cheaper)\b|\bstack\s+up\s+against\b"
    r"|\bhow\s+does\s+(?:it|that|this)\s+compare\b"
)
_ANY_TOPIC = re.compile(rf"(?<![\w#])(?:{_TOPIC})(?![\w])")


def _topic(match: re.Match[str]) -> str:
    """The topic name of the named group that matched."""
    return _matched_name(match, _TOPICS)


def read_intent(scan: Scan) -> tuple[Intent, str | None]:
    """The intent and the technique it is about. A why-not without a technique ("why not 16 GPUs?") is a
    what-if, read as a plan. The why-not phrase is blanked so "why not disaggregate?" sets nothing."""
    for match in scan.take(_WHY_NOT):
        return "why_not", _topic(match)
    for match in scan.take(_WHY_THIS_NOT):
        return "why_not", _topic(match)
    for match in scan.take(_WHY_NOT_FLAG):
        topic = _ANY_TOPIC.search(scan.text, match.end())
        return "why_not", _topic(topic) if topic else None
    if _COMPARE.search(scan.text):
        topics = list(dict.fromkeys(_topic(m) for m in _ANY_TOPIC.finditer(scan.text)))
        return "compare", ",".join(topics) or None
    if _EXPLAIN.search(scan.text):
        topic = _ANY_TOPIC.search(scan.text)
        return "explain", _topic(topic) if topic else None
    return "plan", None
