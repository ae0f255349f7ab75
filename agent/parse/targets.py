"""Reading latency targets: TTFT and TPOT bounds in the forms people write them ("first token under 2 s",
"TPOT 20 ms", "under 30 ms per token", "50 tok/s per user", "2 s TTFT"), lower bounds checked, not kept."""

from __future__ import annotations

import re

from shardplan.agent.parse.text import _CMP, _DUR, _LOWER, _PER_TOKEN, Findings, Scan, _add_positive, _ms

__all__ = ["read_targets", "read_percentile"]


_TTFT_WORDS = (
    r"ttft|time[\s-]+to[\s-]+first[\s-]+token|first[\s-]+token(?:[\s-]+(?:latency|time))?"
    r"|prefill[\s-]+latency"
)
_TPOT_WORDS = (
    r"tpot|time[\s-]+per[\s-]+output[\s-]+token|inter[\s-]*token[\s-]+latency|itl"
    r"|token[\s-]+to[\s-]+token[\s-]+latency|per[\s-]+token[\s-]+latency|decode[\s-]+latency"
)
_FILLER = (
    r"(?:(?:is|of|at|in|be|to|should|must|needs?|has|have|stay|stays|remain|remains|kept|target|targets|slo"
    r"|latency|goal|time|budget|hard\s+limit|hard\s+cap|limit|cap|~|≈|about|around|roughly|strictly)\s*[:=]?\s*)*"
)
_NOT_PER_TOKEN = rf"(?!\s*(?:{_PER_TOKEN}|(?:tpot|itl)(?!\s*[:=]?\s*(?:{_CMP}\s*)?\d)))"
"""Not a per-token figure: "20 ms per token" and "20 ms TPOT" are; "1.5s TPOT 40ms" leaves 1.5 s to TTFT."""
# The bound may follow words an earlier reader took ("TTFT p90 of 1 s": the percentile), now blanked with "#".
_FIRST_BOUND = re.compile(rf"[\s:=,#]*{_FILLER}(?P<cmp>{_CMP})?\s*{_DUR}{_NOT_PER_TOKEN}")
_NEXT_BOUND = re.compile(rf"\s*,?\s*(?:and|but|yet)\s+(?P<cmp>{_CMP})\s*{_DUR}{_NOT_PER_TOKEN}")
_TARGET_KEYWORDS = {
    name: re.compile(rf"(?<![\w#])(?:{words})(?![a-z])")
    for name, words in (("ttft_ms", _TTFT_WORDS), ("tpot_ms", _TPOT_WORDS))
}
_TARGETS_BEFORE = {
    "ttft_ms": re.compile(rf"(?:(?P<cmp>{_CMP})\s*)?{_DUR}\s*(?:of\s+)?(?:{_TTFT_WORDS}|to\s+first\s+token)"),
    "tpot_ms": re.compile(rf"(?:(?P<cmp>{_CMP})\s*)?{_DUR}\s*(?:{_PER_TOKEN}|(?:of\s+)?(?:{_TPOT_WORDS})(?![a-z]))"),
}
"""Targets written number first: "2 s TTFT", "under 30 ms per token"."""
_RATE = re.compile(
    rf"(?:(?P<cmp>{_CMP}|min(?:imum)?(?:\s+of)?)\s*)?(?P<rate>(?<![\d.])\d+(?:\.\d+)?)\s*"
    r"(?:(?:output|generated|decode|decoded)\s+)?(?:(?:tokens?|toks?)\s*(?:/|per\s+)\s*"
    r"(?:s|sec|second)\b|tps(?![\w]))(?P<per>\s*(?:/|per|for\s+each|for|each)\s*(?:user|request|stream|sequence|session|client)"
    r"|\s+each(?![\w]))?"
)
_WHO = r"(?:users?|each\s+user|every\s+user|answers?|responses?|replies|streams?|clients?)"
_SEES = (r"(?:(?:should|must|will|need\s+to|needs\s+to|have\s+to|has\s+to)\s+)?"
         r"(?:need|needs|want|wants|expect|expects|see|sees|get|gets|stream|streams|receive|receives)")
_USER_RATE = re.compile(
    rf"(?<![\w#]){_WHO}\s+{_SEES}\s+(?:at\s+)?(?:(?:at\s+)?least\s+|a\s+minimum\s+of\s+)?"
    r"(?P<rate>(?<![\d.])\d+(?:\.\d+)?)\s*(?:tokens?|toks?)\s*(?:/|per\s+)\s*(?:s|sec|second)\b"
    r"(?!\s*(?:in\s+)?(?:aggregate|overall|total|combined|altogether|across|for\s+the\s+(?:fleet|cluster|deployment)))"
)
"""A per-user speed said of the users or their answers (not one said of them all, "in aggregate"): "users need 50
tok/s", "every user should see at least 40 tokens per second", "answers need to stream at 30 tokens/s"."""


_E2E_PERCENTILE = re.compile(
    r"(?<![\w#])(?:e2e|end[\s-]*to[\s-]*end)(?:\s+latency)?\s+(?:p(?:50|90|95|99)|(?:50|90|95|99)(?:th)?\s+percentile)"
    r"(?:\s*(?:<|<=|≤|under|below)\s*\d+(?:\.\d+)?\s*(?:ms|msecs?|s|secs?|seconds?))?"
)
"""A percentile of end-to-end latency ("e2e p99 < 20s"): no target shardplan plans for, so neither its percentile nor
its bound is read as the TTFT's or TPOT's."""
_PERCENTILE = re.compile(
    r"(?<![\w#])(?:p(?P<p>50|90|95|99)|(?P<q>50|90|95|99)(?:th)?[\s-]*(?:percentile|pct|%ile)|(?P<median>median))"
    r"(?![\w])"
    r"|(?<![\w#.])(?P<share>50|90|95|99)\s*%\s+of\s+(?:all\s+|the\s+)?(?:requests|users|queries|calls|responses)"
    r"(?![a-z])"
)
"""A percentile by name ("P99", "99th percentile", "median"), or as the share of requests a target must hold for
("95% of requests should see the first token within 400 ms")."""


_NOT_PERCENTILE = re.compile(
    r"(?<![\w#])(?:instead\s+of|rather\s+than|not)\s+(?:the\s+|at\s+(?:the\s+)?)?"
    r"(?:p(?:50|90|95|99)|(?:50|90|95|99)(?:th)?[\s-]*percentile|median)(?![\w])"
)
"""A percentile set aside ("the mean instead of p99"): not the one the targets bound."""
_MEAN = re.compile(
    r"(?<![\w#])(?:mean|average|avg)(?=\s+(?:ttft|tpot|itl|latenc|targets?|time[\s-]+(?:to|per)|first[\s-]+token"
    r"|instead|rather)(?![\w]))"
    r"|(?:(?<=\ds)|(?<=\d\ss)|(?<=\dms)|(?<=\d\sms))\s*\((?:mean|average|avg)\)"
)
"""The mean as what the targets bound ("mean TTFT under 1 s", "the mean instead of p99", "TTFT 1 s (mean)"); the metric
words stay for the target reader. "mean acceptance length" and "lognormal with mean 3k" are other readers' and not
matched here."""


_PERCENTILE_NAME = r"(?:p(?:50|90|95|99)|(?:50|90|95|99)(?:th)?[\s-]*(?:percentile|pct|%ile))"
_LENGTH_PERCENTILE = re.compile(
    rf"(?<![\w#])(?:the\s+)?{_PERCENTILE_NAME}\s+(?:prompt|input|output|request|context|completion)s?"
    r"(?:\s+(?:length|size)s?)?(?:\s+(?:is|are|of|at|hits?|reaches|goes\s+to)|\s*[=:])?\s*(?:~|≈|about|around)?\s*"
    r"(?:\d+(?:\.\d+)?[km]?(?![a-z\d])\s*(?:tokens?|toks?)?)?"
)
"""A percentile of the lengths ("the p99 prompt is 16k"): a spread of the traffic, not the percentile the targets bound,
and not a second prompt length."""
_OTHER_PERCENTILE = re.compile(
    rf"(?<![\w#]){_PERCENTILE_NAME}\s+(?:disk|storage|network|db|database|dns|cpu|memory|queue|api\s+gateway|gateway"
    r"|page\s+load|http)(?:\s+(?:latency|latencies|time|times|read|write|io))?(?![\w])"
)
"""A percentile of some other system's figure ("p99 disk latency"): not a target of the serving plan."""
_TAIL = re.compile(r"(?<![\w#])(?:at\s+the\s+tail|tail[\s-]+latenc(?:y|ies)|in\s+the\s+tail)(?![\w])")
"""The tail named without a figure ("keep tail latency in check"): read as P99, with a note."""


def read_percentile(scan: Scan, found: Findings) -> None:
    """The percentile the latency targets bound: "P99 TTFT under 2 s", "99th percentile", "median TTFT".

    One percentile applies to both targets; where a message names several, the highest (the strictest) is kept
    and a note says so.

    >>> found = Findings()
    >>> read_percentile(Scan("p99 ttft under 2 s and p90 tpot 50 ms"), found)
    >>> found.values["slo_percentile"], found.notes
    (['p99'], ['One percentile applies to both targets: P99, the highest of those named (P99, P90).'])
    """
    for match in scan.take(_E2E_PERCENTILE):
        found.notes.append(f"Read '{match.group().strip()}' as an end-to-end latency target, which shardplan does not "
                           "plan for (it plans TTFT and TPOT; the plan reports end-to-end latency).")
    for match in scan.take(_LENGTH_PERCENTILE):
        found.notes.append(f"Read '{match.group().strip()}' as a percentile of the lengths, not a latency target: give "
                           "the spread as a distribution (for example 'prompts lognormal with mean 2k and cv 1') to "
                           "draw lengths from it.")
    for match in scan.take(_OTHER_PERCENTILE):
        found.notes.append(f"Read '{match.group().strip()}' as another system's figure, not a target of this plan.")
    means = scan.take(_MEAN)  # before the set-aside percentile is blanked: "the mean instead of p99"
    for match in scan.take(_NOT_PERCENTILE):
        found.notes.append(f"Read '{match.group().strip()}' as not the percentile the targets bound.")
    matches = means + scan.take(_PERCENTILE)
    named = ["mean" if m.re is _MEAN else f"p{m.group('p') or m.group('q') or m.group('share') or '50'}"
             for m in matches]
    tails = scan.take(_TAIL)
    if tails and not named:
        found.add("slo_percentile", "p99", tails[0].group())
        found.notes.append(f"Read '{tails[0].group().strip()}' as P99; name another percentile (P90, P95) if you mean "
                           "one.")
    if not named:
        return
    kept = max(named, key=lambda name: 0 if name == "mean" else int(name[1:]))
    found.add("slo_percentile", kept, matches[named.index(kept)].group())
    if len(set(named)) > 1:
        listed = ", ".join("the mean" if n == "mean" else n.upper() for n in dict.fromkeys(named))
        found.notes.append(f"One percentile applies to both targets: {kept.upper()}, the highest of those named "
                           f"({listed}).")


_TARGET_RANGE = re.compile(
    rf"(?<![\w#])(?:(?P<ttft>{_TTFT_WORDS})|(?P<tpot>{_TPOT_WORDS}))(?![a-z])"
    r"(?:\s+(?:had|has|have|to|must|should|land|be|stay|in|within|between|at|of|p50|p90|p95|p99|:))*\s*"
    r"(?P<a>\d+(?:\.\d+)?)\s*(?:ms|s)?\s*(?:-|–|to|and)\s*(?P<b>\d+(?:\.\d+)?)\s*"
    r"(?P<unit>ms|msecs?|milliseconds?|s|secs?|seconds?)(?![a-z])"
)
"""A target given as a range ("TPOT 20-30ms", "TPOT had to land in 20–25 ms"): the upper end bounds it."""
_WISH = re.compile(
    r"(?<![\w#])(?:ideally|preferably|aim(?:ing)?\s+for|would\s+like|nice\s+to\s+have)\s+(?:(?:ttft|tpot|itl)\s+)?"
    r"(?:(?:around|about|~|<|<=|≤|under|below)\s*)?\d+(?:\.\d+)?\s*(?:ms|msecs?|s|secs?|seconds?)(?![a-z])"
    r"|(?<![\w#])(?:preferably|ideally)\s+(?:sub[\s-]*second|under\s+1\s+s)"
)
"""A soft wish beside a target ("TTFT ideally < 500ms, hard limit 1s"): noted, the hard bound being the target."""


def read_targets(scan: Scan, found: Findings) -> None:
    """TTFT and TPOT targets, in ms: "first token under 2 s", "TPOT 20 ms", "under 30 ms per token",
    "at least 50 tokens/s per user" (TPOT 1000/50 = 20 ms), "2 s TTFT", "TPOT 20-30ms" (the upper end); a wish beside
    the target ("ideally < 500ms") is noted, not read."""
    for match in scan.take(_WISH):
        found.notes.append(f"Read '{match.group().strip()}' as a wish, not the target.")
    for match in scan.take(_TARGET_RANGE):
        name = "ttft_ms" if match.group("ttft") else "tpot_ms"
        upper = _ms(match.group("b"), match.group("unit"))
        found.add(name, upper, match.group())
        found.notes.append(f"Read '{match.group().strip()}' as a target of {upper:g} ms, the range's upper end.")
    for name, keyword in _TARGET_KEYWORDS.items():
        _read_bounds_after(scan, found, name, keyword)
    for name, pattern in _TARGETS_BEFORE.items():
        for match in scan.take(pattern):
            _file_bounds(found, name, [(match.group("cmp"), _ms(match.group(2), match.group(3)))], match.group())
    for match in scan.take(_USER_RATE):
        rate = float(match.group("rate"))
        if rate > 0:
            found.add("tpot_ms", round(1000.0 / rate, 3), match.group())
    for match in scan.take(_RATE):
        rate = float(match.group("rate"))
        if match.group("per") and rate > 0:
            found.add("tpot_ms", round(1000.0 / rate, 3), match.group())
        elif not match.group("per"):
            found.notes.append(
                f"'{match.group().strip()}' reads as aggregate throughput, which is not a target; "
                "say 'per user' for a per-user speed."
            )


def _read_bounds_after(scan: Scan, found: Findings, name: str, keyword: re.Pattern[str]) -> None:
    """Bounds that follow a keyword, chained with "and": "TTFT under 1 s and over 2 s"."""
    for key in list(keyword.finditer(scan.text)):
        if "#" in scan.text[key.start() : key.end()]:
            continue
        bounds: list[tuple[str | None, float]] = []
        match = _FIRST_BOUND.match(scan.text, key.end())
        end = key.end()
        while match:
            bounds.append((match.group("cmp"), _ms(match.group(2), match.group(3))))
            end = match.end()
            match = _NEXT_BOUND.match(scan.text, end)
        if bounds:
            words = scan.text[key.start() : end]
            scan.blank(key.start(), end)
            _file_bounds(found, name, bounds, words)


def _file_bounds(found: Findings, name: str, bounds: list[tuple[str | None, float]], words: str) -> None:
    """File the bounds said of one target: an upper bound (or a bare figure) is the target; a lower bound is
    only checked against the upper ones, since a target cannot be a floor."""
    is_lower = [bool(cmp and re.fullmatch(_LOWER, cmp)) for cmp, _ in bounds]
    lowers = [ms for (_, ms), low in zip(bounds, is_lower, strict=True) if low]
    uppers = [ms for (_, ms), low in zip(bounds, is_lower, strict=True) if not low]
    for ms in uppers:
        _add_positive(found, name, ms, words)
    label = name[:4].upper()
    if uppers and lowers and max(lowers) >= min(uppers):
        found.contradictions.append(
            f"{label} must be under {min(uppers):g} ms and over {max(lowers):g} ms; both cannot hold."
        )
    elif lowers:
        found.notes.append(f"Ignored a lower bound on {label} ({max(lowers):g} ms): only upper bounds are targets.")
