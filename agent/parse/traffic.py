"""Reading how requests arrive: "bursty traffic" (gamma arrivals, cv 3), "Poisson arrivals", and "64 concurrent
users" or "32 clients" (a closed loop of that many clients).

A count of concurrent users or clients is also the batch (:func:`~shardplan.agent.parse.readers._read_batch`
reads it after this reader, which leaves the phrase in place); it is recorded here as ``clients``, and becomes
the closed loop only when the message names no arrival process itself ("bursty traffic from 64 concurrent
users" is bursty, with 64 in flight).

>>> from shardplan.agent.parse.text import Findings, Scan
>>> found = Findings()
>>> read_arrival(Scan("bursty traffic, 64 concurrent users"), found)
>>> found.values
{'arrival': ['gamma:cv=3'], 'clients': [64]}
"""

from __future__ import annotations

import re

from shardplan.agent.parse.quantities import headcount, people_figure
from shardplan.agent.parse.text import _COUNT, _START, Findings, Scan, _add_positive, _count
from shardplan.limits import MAX_RATE, MIN_RATE, RATE_RANGE

__all__ = ["read_arrival", "read_rate", "read_price", "read_trace", "BURSTY"]

BURSTY = "gamma:cv=3"
"""The arrival process "bursty" reads as: gamma gaps with a coefficient of variation of 3."""

_CV = (
    r"(?:\s*[(,]?\s*(?:with\s+|at\s+)?(?:an?\s+)?(?:cv|coefficient\s+of\s+variation)\s*(?:of|=|:|is|≈|~|about|around)?"
    r"\s*(?:≈|~|about|around)?\s*"
    r"(?P<cv>\d+(?:\.\d+)?)\s*\)?)?"
)
"""A coefficient of variation of the gaps said right after the arrival words: "bursty (cv 4)", "gamma arrivals
with a cv of 2"; without it, bursty traffic reads as :data:`BURSTY`."""
_PROCESSES = (
    (BURSTY, re.compile(r"(?<![\w#])(?:(?:bursty|spiky|spikes|spiking)(?:\s+(?:traffic|arrivals?|load|requests))?"
                        r"|burst(?:s|ing)?\s+of\s+(?:traffic|requests|load)"
                        r"|(?:(?:traffic|requests|load)\s+(?:comes?\s+|arrives?\s+)?)?in\s+bursts"
                        r"|gamma(?:[\s-]+(?:distributed\s+)?(?:arrivals?|traffic|process|gaps))?)(?![a-z])" + _CV)),
    ("poisson", re.compile(r"(?<![\w#])poisson(?:\s+(?:arrivals?|traffic|process))?(?![a-z])")),
)
_HEADS = rf"(?:{_COUNT}|(?<![\w.#-])\d+(?:\.\d+)?k(?![a-z\d]))"
"""A count of people: "64", "two", or "1k" (a thousand: :func:`~shardplan.agent.parse.quantities.headcount`)."""
_CLIENTS = re.compile(
    rf"{_START}(?P<v>{_HEADS})\s+(?:(?:concurrent|simultaneous|parallel)\s+(?:users?|clients?)|clients?)(?![a-z])"
    rf"|{_START}(?P<v2>{_HEADS})\s+(?:users?|clients?|sessions?)\s+(?:\w+\s+)?(?:at\s+the\s+same\s+time|at\s+once"
    r"|simultaneously|concurrently|in\s+parallel)(?![a-z])"
    rf"|(?<![\w#])concurrency\s+(?:is\s+|of\s+|=\s*|:\s*)?(?P<v3>{_HEADS})\s+(?:users?|clients?)(?![a-z])"
    r"|(?<![\w#-])--(?:max-)?concurrency(?:[\s=]+|-range\s+)(?P<v4>\d+)(?![\w.:])"
)
"""Concurrent users or clients: "64 concurrent users", "32 clients", "200 users in parallel", or a benchmark client's
own flag ("genai-perf --concurrency 64", "bench_serving --max-concurrency 32"), whose clients each wait for an answer
before they send again."""
_DONE = r"(?:finishes|completes|returns|ends|is\s+(?:done|answered|served)|comes\s+back)"
_EARLIER = r"(?:(?:the|its|their)\s+)?(?:last|previous|prior)"
_ANSWERED = r"(?:one|request|reply|answer|response)"
_CLOSED_LOOP = re.compile(
    r"(?<![\w#])(?:(?:in\s+an?\s+)?closed[\s-]+loop"
    r"|(?:each|every)\s+(?:one\s+)?(?:user|client)?\s*(?:sends?|sending|submits?|submitting|issues?|issuing|fires?"
    r"|firing)\s+(?:its\s+|their\s+|a\s+|the\s+)?(?:next|new|another)\s+(?:request|query|prompt|call)\s+"
    r"(?:(?:right|immediately|just|straight)\s+)?(?:as\s+soon\s+as|when|once|after)\s+"
    rf"(?:(?:(?:the|its|their)\s+)?(?:(?:last|previous|prior)\s+)?(?:{_ANSWERED}\s+)?{_DONE}"
    rf"|{_EARLIER}\s+{_ANSWERED}"
    r"|(?:it|they|he|she)\s+(?:gets?|receives?|has|have|sees?)\s+(?:its|their|the|an?)\s+(?:answer|reply|response)))"
    r"(?![a-z])"
)
"""Words that say each client waits for its answer before it sends again (benchmark tools' concurrency mode): "each
sends a new request when the last one finishes", "each firing a new request right after the previous reply"."""
_USERS = re.compile(
    rf"{_START}(?P<v>{_HEADS})\s+(?:(?:concurrent|simultaneous|parallel|active)\s+)?(?:users?|clients?|callers?|sessions?)"
    r"(?![a-z])"
)


_PER_UNIT = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "hr": 3600.0, "hour": 3600.0,
             "day": 86400.0}
_RATE_UNITS = "s|sec|second|min|minute|hr|hour|day"
_REQUEST_RATE = re.compile(
    r"(?<![\w.#+-])(?P<n>\d+(?:\.\d+)?[km]?)\s*(?:(?:qps|rps|(?P<rpm>rpm))(?![a-z])"
    rf"|(?:requests?|reqs?|queries|prompts|calls)\s*(?:/|per|an?|each)\s*(?P<unit>{_RATE_UNITS})(?![a-z]))"
    r"(?!\s*[=:]\s*\d)"
    rf"|(?<![\w#])(?:qps|rps|(?P<rpm2>rpm)|(?:requests?|reqs?|queries)\s*(?:/|per)\s*(?P<unit2>{_RATE_UNITS}))"
    r"\s*(?:=|:|of|is)\s*(?P<n2>\d+(?:\.\d+)?[km]?)(?![\w.])"
)
"""A rate, number first ("10 requests/s", "12 QPS") or after its unit and a sign ("requests/sec = 4", "qps: 12"); in
"osl=300 qps=25" the unit's figure is the one after its sign, so the 300 before it is left to the output length. A
figure right after a sign (a minus, a plus, an exponent's) is not read alone: "1e-9 rps" is not 9 requests/s, nor
"-5 rps" 5."""
_EVERY = re.compile(
    r"(?<![\w.#])(?P<n>\d+|an?|one)\s+(?:requests?|reqs?|queries|calls?)\s+every\s+(?P<gap>\d+(?:\.\d+)?)?\s*"
    r"(?P<unit>ms|milliseconds?|s|secs?|seconds?|min|minutes?)(?![a-z])"
)
"""A rate as a gap: "1 req every 100 ms", "a request every 2 seconds", "one query every minute"."""


_RESTATED = re.compile(
    r"\(\s*(?:i\.?\s*e\.?,?|that\s+is,?|or|=|~|≈)?\s*(?P<n>(?<![\d.])\d+(?:\.\d+)?[km]?)\s*(?:/|per|an?|each)\s*"
    rf"(?P<unit>{_RATE_UNITS})(?![a-z])\s*\)"
)
"""A rate said again another way in brackets, its noun left out: "10 requests/s (i.e. 600 per minute)"."""
_QUIET = r"(?:troughs?|lows?|off[\s-]*peak|quiet(?:est)?(?:\s+hours?)?|overnight|at\s+night|minimum|min)"
_QUIET_BEFORE = re.compile(rf"(?<![\w]){_QUIET}\s*(?:(?:of|at|around|about|near|is|are|~|≈|:|=)\s*){{0,2}}$")
_QUIET_AFTER = re.compile(rf"^\s*(?:(?:in\s+the|during|at)\s+)?{_QUIET}(?![\w])")
"""Words beside a rate that make it the quiet hours' ("troughs ~2 rps, peaks ~20 rps", "2 rps overnight"), which the
plan does not size for when the message also gives another."""


def _quiet(text: str, start: int, end: int) -> bool:
    """Whether the rate at ``text[start:end]`` is said of the quiet hours (words before it, back to the clause's start,
    or right after it)."""
    before = re.split(r"[,;.#(]", text[max(0, start - 40):start])[-1]
    return bool(_QUIET_BEFORE.search(before) or _QUIET_AFTER.match(text[end:end + 30]))


def read_rate(scan: Scan, found: Findings) -> None:
    """A request rate, in requests per second: "10 requests/s", "600 requests per minute", "12 QPS", "2M requests a
    day" (k a thousand, m a million). A rate outside what shardplan plans for is left out with a note naming the range.

    >>> found = Findings()
    >>> read_rate(Scan("at 600 requests per minute, bursty"), found)
    >>> found.values
    {'rate': [10.0]}
    >>> found = Findings()
    >>> read_rate(Scan("about 1.728m requests a day, peaks at 1.5k qps"), found)
    >>> found.values
    {'rate': [20.0, 1500.0]}
    >>> found = Findings()
    >>> read_rate(Scan("99999999999 rps"), found)
    >>> found.values, found.notes[0][:50]
    ({}, "Ignored '99999999999 rps': a rate runs from 1e-06 ")
    """
    for match in scan.take(_EVERY):
        count = 1.0 if match.group("n") in ("a", "an", "one") else float(match.group("n"))
        unit = match.group("unit")
        per_ms = 60000.0 if unit.startswith("min") else 1.0 if unit.startswith("m") else 1000.0
        gap_ms = float(match.group("gap") or 1) * per_ms
        if gap_ms > 0:
            _add_rate(found, count * 1000.0 / gap_ms, match.group())
        else:
            found.notes.append(f"Ignored '{match.group().strip()}': the gap between requests must be longer than 0.")
    rates = []
    for match in scan.take(_REQUEST_RATE):
        per_minute = match.group("rpm") or match.group("rpm2")
        unit = match.group("unit") or match.group("unit2") or ("min" if per_minute else None)
        per = _PER_UNIT[unit] if unit else 1.0
        rate = people_figure(match.group("n") or match.group("n2")) / per
        if rate > 0:
            rates.append((rate, match.group(), _quiet(scan.text, match.start(), match.end())))
    peaks = [rate for rate, _, trough in rates if not trough]
    for rate, phrase, trough in rates:
        if trough and peaks:
            found.notes.append(f"Read '{phrase.strip()}' as the quiet hours' rate: planning for the busiest, "
                               f"{max(peaks):g} requests/s.")
            continue
        _add_rate(found, rate, phrase)
    for match in scan.take(_RESTATED):  # the same rate again, or a second one the contradiction check names
        _add_rate(found, people_figure(match.group("n")) / _PER_UNIT[match.group("unit")], match.group())


def _add_rate(found: Findings, rate: float, phrase: str) -> None:
    """Record ``rate`` where it lies in the range the plan's request takes; otherwise a note naming the range."""
    if rate > 0 and not MIN_RATE <= rate <= MAX_RATE:
        found.notes.append(f"Ignored '{phrase.strip()}': a rate runs {RATE_RANGE}.")
        return
    _add_positive(found, "rate", rate, phrase)


_TRACE = re.compile(
    r"(?<![\w#])(?:the\s+)?(?:20\d\d[\s-]+)?azure(?:[\s-]+llm)?(?:[\s-]+inference)?[\s-]+(?P<kind>conv(?:ersations?|ersational)?|chat|"
    r"code|coding)(?:[\s-]+(?:\d{4}[\s-]+)?(?:trace|workload|traffic|dataset)s?)?(?![\w-])"
)
_KIND = r"(?:conv(?:ersations?|ersational)?|chat|code|coding)"
_TRACE_KIND_AFTER = re.compile(
    r"(?<![\w#])(?:the\s+)?(?:20\d\d[\s-]+)?azure(?:[\s-]+llm)?(?:[\s-]+inference)?(?:[\s-]+20\d\d)?[\s-]+"
    rf"(?:traces?|workloads?|datasets?)\s*[(,:]?\s*(?:the\s+)?(?P<kind>{_KIND})(?:\s+(?:one|trace|variant))?\s*\)?"
    r"(?![\w-])"
)
"""The bundled trace named with its kind after it: "the 2023 Azure LLM inference trace (coding one)"."""
_TRACE_SHORT = re.compile(rf"(?<![\w#-])(?:the\s+)?(?P<kind>{_KIND})\s+trace(?![\w-])")
"""A bundled trace by its kind alone: "try the code trace instead"."""
_TRACE_KINDS = {"conv": "azure-conv", "chat": "azure-conv", "code": "azure-code", "coding": "azure-code"}


_TRACE_FILE = re.compile(
    r"(?<![\w#])(?:traces?|workload|replay(?:ing|ed)?|request\s+logs?)(?![\w])(?:\s+[^\s,;#]+){0,4}?\s+"
    r"(?P<path>[\w~./-]*[\w-]\.(?:jsonl|csv|json))(?![\w.-])"
)
"""A trace file named beside the words for one: "replay our trace at ./traces/prod.jsonl", "workload: logs.csv"."""


def _as_written(found: Findings, lowered: str) -> str:
    """``lowered`` as the message wrote it (a path's case matters), where the message holds it."""
    match = re.search(re.escape(lowered), found.original, re.IGNORECASE)
    return match.group() if match else lowered


def read_trace(scan: Scan, found: Findings) -> None:
    """A bundled request trace named in words, whose lengths stand for the traffic's: "the Azure conversation trace",
    "azure-code", "Azure LLM inference code trace"; or a trace file named beside "trace", "workload" or "replay".

    >>> found = Findings()
    >>> read_trace(Scan("llama 70b on 8 h100, azure conversation trace at 3 rps"), found)
    >>> found.values
    {'trace': ['azure-conv']}
    """
    for match in list(_TRACE_FILE.finditer(scan.text)):
        path = _as_written(found, match.group("path"))
        scan.blank(match.start("path"), match.end("path"))
        found.add("trace", path, match.group())
        found.notes.append(f"Read '{path}' as the request trace to replay: its rows give the prompt and output "
                           "lengths.")
    for pattern in (_TRACE_KIND_AFTER, _TRACE, _TRACE_SHORT):
        for match in scan.take(pattern):
            kind = match.group("kind")
            found.add("trace", _TRACE_KINDS["conv" if kind.startswith("conv") else kind], match.group())
            if pattern is _TRACE_SHORT:
                found.notes.append(f"Read '{match.group().strip()}' as the bundled "
                                   f"{_TRACE_KINDS['conv' if kind.startswith('conv') else kind]} trace.")


_USER_BASE = re.compile(
    rf"{_START}(?P<v>{_HEADS})\s+(?:users?|customers?|people)\s+(?:in\s+)?(?:total|overall|altogether|all\s+told)(?![a-z])"
)
"""The users a service has, not those in flight at once: "1000 users total"."""
_ACTIVE = re.compile(
    rf"{_START}(?:about\s+|around\s+|~\s*)?(?P<v>{_HEADS})\s+(?:are\s+)?(?:active|online|concurrent|in\s+flight)\s+"
    r"(?:at\s+once|at\s+a\s+time|at\s+the\s+same\s+time|concurrently|simultaneously)(?![a-z])"
)
"""Those in flight at once: "about 50 active at once"."""


def _heads(text: str) -> int:
    """A count of people matched by ``_HEADS``: "64", "two", "1k" (a thousand)."""
    return headcount(text) if text.endswith("k") else _count(text)


def read_arrival(scan: Scan, found: Findings) -> None:
    """Arrival processes named in words (taken from the text), and counts of concurrent users or clients (left
    for the batch reader); a user base ("1000 users total") is not the concurrency, those active at once are."""
    for match in scan.take(_USER_BASE):
        found.notes.append(f"Read '{match.group().strip()}' as the users the service has, not those in flight at once.")
    for match in scan.take(_ACTIVE):
        heads = match.group("v")
        active = _heads(heads)
        if active > 0:
            found.add("batch", active, match.group())
    arrivals = [(_with_cv(process, match, found), match.group()) for process, pattern in _PROCESSES
                for match in scan.take(pattern)]
    if any(arrival.startswith("gamma:") and arrival != BURSTY for arrival, _ in arrivals):
        # "bursty (gamma arrivals, cv 2.5)": the figure said is the burstiness, not a second process
        arrivals = [(arrival, words) for arrival, words in arrivals if arrival != BURSTY]
    for arrival, words in arrivals:
        found.add("arrival", arrival, words)
    closed = scan.take(_CLOSED_LOOP)
    for match in (_USERS if closed else _CLIENTS).finditer(scan.text):
        heads = next(v for v in (match.groupdict().get(g) for g in ("v", "v2", "v3", "v4")) if v)
        clients = _heads(heads)
        if clients > 0:
            found.add("clients", clients, match.group())
    if closed and "clients" not in found.values:
        found.notes.append(f"'{closed[0].group().strip()}' says a closed loop; say how many users or clients to "
                           "simulate it (for example '64 users').")
    if closed and found.values.get("arrival"):
        named = found.values["arrival"][0]
        found.contradictions.append(f"The request gives both {named} arrivals and a closed loop; say which one you "
                                    "mean.")


def _with_cv(process: str, match: re.Match[str], found: Findings) -> str:
    """The process with the coefficient of variation written after it, where one is (and within the contract's
    bounds: a gap's cv above 0 and at most 50)."""
    cv = match.groupdict().get("cv")
    if cv is None:
        if match.group().lstrip().lower().startswith("gamma"):
            found.notes.append(f"Read '{match.group().strip()}' with the cv bursty traffic reads as ({process}); say "
                               "'cv N' for another.")
        return process
    if not 0 < float(cv) <= 50:
        found.notes.append(f"Ignored the cv in '{match.group().strip()}': the gaps' coefficient of variation is above "
                           f"0 and at most 50; read as {process}.")
        return process
    return f"gamma:cv={float(cv):g}"


_PRICE = re.compile(
    r"(?<![\w#])(?:\$|usd\s*)\s*(?P<usd>\d+(?:\.\d+)?)\s*(?:usd\s*)?(?:/|per|an?|each)\s*(?:gpu[\s-]*)?(?:h|hr|hour)"
    r"(?![a-z])(?:\s*(?:per|/|a|each)\s*gpu(?![a-z]))?"
)


_PER_NODE = re.compile(r"\s*(?:for|per)\s+(?:an?\s+|one\s+|each\s+|the\s+)?(?P<n>\d+)\s*[x×]\s*[a-z0-9-]+\s+"
                       r"(?:node|box|server|machine)(?![a-z])")
"""A price said of a whole node of N GPUs, right after the price."""


def read_price(scan: Scan, found: Findings) -> None:
    """The price of a GPU-hour in US dollars: "$2.5/h", "$3.60 per GPU-hour", "at $2.5/h per GPU". The GPU it is
    for is read by the GPU reader ("at $2.5/h for H100" names H100).

    >>> found = Findings()
    >>> read_price(Scan("at $3.60 per gpu-hour"), found)
    >>> found.values
    {'gpu_price': [3.6]}
    """
    for match in scan.take(_PRICE):
        usd = float(match.group("usd"))
        node = _PER_NODE.match(scan.text[match.end():])
        if node and usd > 0:  # "$23.60/hr for an 8x H100 node": the node's price, shared by its GPUs
            gpus = int(node.group("n"))
            found.add("gpu_price", round(usd / gpus, 6), match.group() + node.group())
            found.notes.append(f"Read '{(match.group() + node.group()).strip()}' as a node's price: "
                               f"${usd / gpus:.4g} per GPU-hour over its {gpus} GPUs.")
        elif usd > 0:
            found.add("gpu_price", usd, match.group())
