"""Reading prefix reuse from plain language: "70% of the prompt is a shared system prompt", "prefix cache hit rate
50%" (``prefix_hit``, the share of prompt tokens found in the cache), "a 2k-token system prompt shared by all
requests" (``prefix_tokens``, which becomes a share of the prompt once its length is settled), "1k shared system
prompt + ~1k-token user messages" (both the prompt and its prefix), and "no prefix caching" (a hit of 0).

Every value read is echoed in a note with the words it came from.

>>> from shardplan.agent.parse.text import Findings, Scan
>>> found = Findings()
>>> read_prefix(Scan("70% of the prompt is a shared system prompt"), found)
>>> found.values
{'prefix_hit': [0.7]}
"""

from __future__ import annotations

import re

from shardplan.agent.parse.text import _ABOUT, _LEN, Findings, Scan, _number, _tokens

__all__ = ["read_prefix"]

_PREFIX_OFF = re.compile(
    r"(?<![\w#])(?:no|without|disable[ds]?|turn\s+off)\s+(?:the\s+)?(?:prefix[\s-]+(?:caching|cache|reuse)"
    r"|shared\s+(?:system[\s-]+)?(?:prompt|prefix)|radix\s+cache|(?:prefix[\s-]+)?cache[\s-]+hits?)(?![\w])"
    r"|(?<![\w#])(?:prefix[\s-]+(?:caching|cache)|radix\s+cache|apc)\s+(?:(?:is|was|stays)\s+)?(?:off|disabled)(?![\w])"
)
_SHARE = r"(?<![\d.])(?P<p>\d+(?:\.\d+)?)\s*%"
"""A percentage, read from its first digit only (which keeps the reading linear in a run of digits)."""
_HITS = r"(?:cache\s+hits?|prefix\s+(?:reuse|hits?)|shared\s+prefix)"
_SHARED = r"(?:shared|common|cached|reused|repeated|identical|the\s+same)"
_FRACTIONS = {"half": 0.5, "a third": 1 / 3, "one third": 1 / 3, "two thirds": 2 / 3, "a quarter": 0.25,
              "one quarter": 0.25, "three quarters": 0.75}
"""Shares said in words ("half of every prompt is a shared system prompt")."""
_WORD_SHARE = r"(?<![\w])(?P<w>half|(?:a|one)\s+third|two\s+thirds|(?:a|one)\s+quarter|three\s+quarters)"
_PREFIX_SHARE = re.compile(
    rf"(?:{_SHARE}|{_WORD_SHARE})\s+(?:of\s+)?(?:the\s+|each\s+|every\s+|a\s+)?(?:prompts?|input|context|tokens?)\s+"
    rf"(?:(?:is|are|was|were|gets?|got)\s+)?"
    rf"(?:a\s+|the\s+)?{_SHARED}(?:[\s-]+(?:system[\s-]+prompt|prefix|preamble))?"
    rf"|(?<![\w#])(?:(?:(?:prefix|prompt)[\s-]*)?cache|apc|automatic[\s-]+prefix[\s-]+caching)[\s-]+hit"
    rf"(?:[\s-]+(?:rate|ratio))?s?\s*(?:of|=|:|is)?\s*{_ABOUT}(?:(?P<p2>\d+(?:\.\d+)?)"
    rf"\s*(?P<pct2>%)?)(?![\w.])"
    rf"|(?<![\w#])prefix[\s-]+(?:hit|reuse)(?:[\s-]+rate)?\s*(?:of|=|:|is)?\s*{_ABOUT}(?P<p3>\d+(?:\.\d+)?)\s*(?P<pct3>%)?"
    rf"(?![\w.])"
    rf"|{_SHARE.replace('(?P<p>', '(?P<p4>')}\s+(?:prefix[\s-]+)?{_HITS}"
    rf"|{_SHARE.replace('(?P<p>', '(?P<p5>')}\s+of\s+(?:(?:the\s+|all\s+)?(?:prompt|input|context)?[\s-]*tokens?"
    rf"|which|them|those|it)\s+"
    rf"(?:(?:hit|are\s+(?:already\s+)?(?:found\s+|served\s+)?(?:in|from)|come\s+from)\s+(?:the\s+|a\s+)?"
    r"(?:prefix[\s-]+|kv[\s-]+)?cache"
    rf"|(?:are|were)\s+(?:prefix[\s-]+|kv[\s-]+)?cache[\s-]+hits)"
)
_PREFIX_NOUN = r"(?:system[\s-]+prompt|prefix|preamble|instructions|instruction[\s-]+block)"
_PREFIX_PLUS = re.compile(
    rf"(?P<a>{_LEN})[\s-]*(?:tokens?|toks?)?[\s-]+(?:{_SHARED}[\s-]+)?{_PREFIX_NOUN}\s*(?:\+|plus|and)\s*{_ABOUT}"
    rf"(?P<b>{_LEN})[\s-]*(?:tokens?|toks?)?[\s-]+(?:of\s+)?(?:(?:user|unique|per[\s-]+request|own)\s+)?"
    r"(?:messages?|quer(?:y|ies)|questions?|inputs?|turns?|content|text|documents?|docs?)(?![a-z])"
)
"""A prompt said as its shared prefix plus its own part ("1k shared system prompt + ~1k-token user messages"): the
prompt is both, the prefix the first."""
_PREFIX_TOKENS = re.compile(
    rf"(?P<v>{_LEN})[\s-]*(?:tokens?|tok)?[\s-]+(?:{_SHARED}[\s-]+)?{_PREFIX_NOUN}"
    rf"(?:[\s,]*(?:that\s+is\s+|is\s+|which\s+is\s+)?(?:shared|common|the\s+same|reused)"
    rf"(?:\s+(?:by|across|among|between|for)\s+(?:all|every|each)\s+(?:requests?|prompts?|users?|calls?))?"
    rf"|(?=\s*(?:$|[,.;])))"
    rf"|(?:shared|common)\s+(?:system[\s-]+prompt|prefix)\s+of\s+(?P<v2>{_LEN})\s*(?:tokens?)?"
    rf"|(?:the\s+)?first\s+(?P<v3>{_LEN})\s*(?:tokens?\s+)?(?:are|is)\s+(?:a\s+|the\s+)?{_SHARED}[\s-]+"
    rf"(?:system[\s-]+prompt|prefix|preamble|instructions|template)"
    rf"|(?P<v4>{_LEN})\s+of\s+(?:those|these|the|its|each|every)\s+(?:{_LEN}\s+)?(?:prompt\s+)?tokens?\s+(?:is|are)\s+"
    rf"(?:a\s+|the\s+)?{_SHARED}[\s-]+(?:system[\s-]+prompt|prefix|preamble|instructions|template)"
)


def read_prefix(scan: Scan, found: Findings) -> None:
    """Prefix reuse, taken from the text (see the module's docstring)."""
    for match in scan.take(_PREFIX_OFF):
        found.add("prefix_hit", 0.0, match.group())
        found.notes.append(f"Read '{match.group().strip()}' as no prompt tokens found in a prefix cache.")
    for match in scan.take(_PREFIX_SHARE):
        if match.group("w") is not None:
            share = _FRACTIONS[" ".join(match.group("w").lower().split())]
        else:
            text = _number(match, "p", "p2", "p3", "p4", "p5")
            percent = any(match.group(g) is not None for g in ("p", "p4", "p5")) or any(
                match.groupdict().get(g) for g in ("pct2", "pct3"))
            share = round(float(text) / 100, 6) if percent or float(text) > 1 else float(text)
        if not 0 <= share < 1:
            found.notes.append(f"Ignored '{match.group().strip()}': a prefix hit is a share of the prompt below 1 (a "
                               "request still computes its own last token).")
            continue
        found.add("prefix_hit", share, match.group())
        found.notes.append(f"Read '{match.group().strip()}' as a prefix-cache hit of {share:.0%} of prompt tokens.")
    for match in scan.take(_PREFIX_PLUS):
        prefix, own = _tokens(match.group("a")), _tokens(match.group("b"))
        if prefix > 0 and own > 0:
            found.add("prefix_tokens", prefix, match.group())
            found.add("isl", prefix + own, match.group())
            found.notes.append(f"Read '{match.group().strip()}' as {prefix + own}-token prompts whose first {prefix} "
                               "tokens every prompt shares.")
    for match in scan.take(_PREFIX_TOKENS):
        tokens = _tokens(_number(match, "v", "v2", "v3", "v4"))
        if tokens > 0:
            found.add("prefix_tokens", tokens, match.group())
            found.notes.append(f"Read '{match.group().strip()}' as a {tokens}-token prefix every prompt shares.")
