"""Reading constraints from plain language: "no pipeline parallelism", "TP must stay inside a node",
"PP across nodes", "use expert parallelism", "DP only", "tp<=8", "8 GPUs per replica", "on vLLM".

Each phrase becomes one constraint in the text form of
:mod:`shardplan.contracts.constraints` (``pp=1``, ``tp-in-node``, ``ep>=2`` ...), recorded under
the ``constraints`` field. Serving (colocated or disaggregated) stays with the disaggregation reader.
"""

from __future__ import annotations

import re

from shardplan.agent.parse.text import _COUNT, Findings, Scan, _count

__all__ = ["read_constraints", "ALL_GPUS"]

_DIM_WORDS = {
    "adp": r"adp|attention[\s-]*(?:dp|data[\s-]*parallel\w*)|dp[\s-]*attention"
    r"|data[\s-]*parallel\w*[\s-]+(?:for\s+)?attention",
    "pp": r"pp|pipelining|pipeline(?:[\s-]*parallel\w*|[\s-]*stages?|[\s-]*parallel)?",
    "tp": r"tp|tensor[\s-]*parallel\w*",
    "ep": r"ep|expert[\s-]*parallel\w*",
    "sp": r"sp|cp|sp/cp|(?:sequence|context)(?:/(?:sequence|context))?[\s-]*parallel\w*",
    "dp": r"dp|data[\s-]*parallel\w*",
    "mb": r"micro[\s-]*batch(?:es)?",
}
_DIM = "(?:" + "|".join(_DIM_WORDS.values()) + ")"
_NODE = r"(?:an?\s+|one\s+|the\s+|each\s+|a\s+single\s+|its\s+)?(?:node|server|machine|host|box)"

_EXPLICIT = re.compile(
    r"(?<![\w#])(?:(?P<phase>prefill|decode)\s*[:.]\s*)?(?P<dim>dp|pp|adp|sp|tp|ep|mb)\s*(?P<op><=|>=|==|=|<|>|≤|≥)\s*"
    r"(?P<value>\d{1,5}|off)(?![\w.])"
)
"""``tp<=8``, ``pp=1``, ``decode:tp=8``, ``sp=off``."""
_DEGREE_WORDS = rf"(?<![\w#])(?:{_DIM})(?![a-z=])[\s-]*(?:of\s+|degree\s+|size\s+)?"
_PHASE_DEGREE = re.compile(rf"{_DEGREE_WORDS}(?P<value>{_COUNT})(?![\w.])")
"""One degree of a phase clause: "tp 8", "EP of 4"."""
_ONE_DEGREE = rf"{_DEGREE_WORDS}(?:{_COUNT})(?![\w.])"
_PHASE_CLAUSE = re.compile(
    rf"(?<![\w#])(?P<phase>prefill|decode)(?:\s+(?:pool|workers?|phase|side))?\s*(?:with\s+|uses?\s+|on\s+|:|-)?\s*"
    rf"(?P<body>{_ONE_DEGREE}(?:\s*(?:,\s*|and\s+|\+\s*)?{_ONE_DEGREE})*)"
)
"""Degrees said for one phase: "prefill tp 8", "decode adp 8 ep 8", "decode with TP 4 and EP 8"."""
_OFF = re.compile(
    rf"(?<![\w#])(?:no|without|avoid(?:ing)?|disable[ds]?|don'?t\s+use|do\s+not\s+use|never\s+use|not\s+using|skip"
    r"|forget(?:\s+about)?|drop|lose)"
    rf"\s+(?:any\s+)?(?P<d>{_DIM})(?![\w=])"
    rf"|(?<![\w#])(?P<d2>{_DIM})\s+(?:off|disabled|is\s+not\s+allowed|not\s+allowed|is\s+off)(?![\w])"
)
"""A dimension turned off: "no pipeline parallelism", "without PP", "TP off"."""
_ON = re.compile(
    rf"(?:(?<![\w#])(?:use|using|with|enable|need|needs|want|must\s+use|requires?|and|plus)\s+|\+\s*)(?:some\s+)?"
    rf"(?P<d>{_DIM})(?![\w=])(?:\s+(?:for|in|during|on)\s+(?:the\s+)?(?P<phase>prefill|decode)(?![\w]))?"
    rf"|(?<![\w#])(?P<d2>{_DIM})\s+(?:for|in|during)\s+(?:the\s+)?(?P<phase2>prefill|decode)(?![\w])"
    rf"|(?<![\w#])(?P<d3>{_DIM})(?![\w=])(?=\s*[+&]\s*(?:{_DIM})(?![\w=]))"
)
"""A dimension required: "use expert parallelism", "with EP", "DP attention + EP" (both: the first by the "+"),
"use context parallel for prefill" (that phase only)."""
_ALL = re.compile(
    rf"(?<![\w#])(?:(?P<d>{_DIM})|(?P<experts>experts?)(?:\s+(?:are\s+)?(?:spread|sharded|split|distributed))?)"
    rf"\s+(?:across|over|on|spanning|spans?|covering)\s+(?:all|every|the\s+whole)"
    rf"(?:\s+(?:of\s+)?(?:the\s+)?(?P<n>{_COUNT}))?\s+(?:gpus?|devices|ranks)(?![\w])"
)
"""A degree as wide as the deployment: "EP across all GPUs" (ep=all, made the GPU count once it is known), "expert
parallel across all 8 GPUs"."""
ALL_GPUS = "all"
"""The value a degree "across all GPUs" takes until the GPU count is settled."""
_WIDE_EP = re.compile(rf"(?<![\w#])(?:wide|large[\s-]*scale|full)[\s-]+(?:{_DIM_WORDS['ep']})(?![\w=])")
"""Expert parallelism over every GPU, as DeepSeek-style deployments name it: "wide EP", "large-scale EP"."""
_NO_MORE = r"no\s+(?:more|larger|bigger|greater|higher)\s+than"
_SIZED_BEFORE = re.compile(
    rf"(?<![\w#])(?P<cap>(?:at\s+most|up\s+to|max(?:imum)?(?:\s+of)?|{_NO_MORE})\s+)?(?P<value>(?<![\d.])\d{{1,4}})"
    rf"[\s-]*(?:way\s+)?(?P<d>{_DIM})(?![\w=])"
)
"""A degree written number first: "8-way TP", "no more than 2 pipeline stages", "2 pipeline stages"."""
_SIZED = re.compile(
    rf"(?<![\w#])(?P<cap>at\s+most\s+|up\s+to\s+|max(?:imum)?\s+|no\s+more\s+than\s+"
    rf"|(?:(?:don'?t|do\s+not|never|not\s+to)\s+go\s+)?(?:above|beyond|over)\s+)?(?P<d>{_DIM})"
    rf"(?:(?:[\s-]*(?:degree|size|of|=|:|up\s+to|at\s+most|<=|capped\s+at|{_NO_MORE}))+\s*|[\s-]+|(?=\d))"
    rf"(?P<value>{_COUNT})(?![\w.])"
)
"""A sized dimension: "TP 8", "TP of 4", "tp8", "at most TP 4", "TP up to 8", "TP capped at 4". A word's letters are
not a count: "span" is not "sp" and "an" (one)."""
_WITHIN = re.compile(
    rf"(?<![\w#])(?P<what>{_DIM_WORDS['tp']}|{_DIM_WORDS['ep']}|experts?(?:\s+groups?)?)"
    rf"(?:\s+(?:groups?|must|should|has\s+to|needs?\s+to|to|always|only|stays?|stay|kept|keep|be|remain|within))*"
    rf"[\s-]*(?:inside|within|in|on|intra)[\s-]*{_NODE}s?(?![\w])"
    rf"|(?:keep|keeping)\s+(?P<what2>{_DIM_WORDS['tp']}|{_DIM_WORDS['ep']})\s+(?:inside|within|intra)[\s-]*{_NODE}"
    rf"|(?P<what3>{_DIM_WORDS['tp']}|{_DIM_WORDS['ep']})\s+intra[\s-]*node"
    rf"|(?<=nodes\s)and\s+(?P<what4>{_DIM_WORDS['tp']})\s+(?:within|inside)(?![\w])"
)
"""Groups kept inside a node: "TP must stay inside a node", "TP within the node", "keep EP intra-node"."""
_NOT_ACROSS = re.compile(
    rf"(?<![\w#])(?:no|without|never)\s+(?P<what>{_DIM_WORDS['tp']}|{_DIM_WORDS['ep']})\s+"
    r"(?:across|between|over|spanning)\s+(?:the\s+|multiple\s+|several\s+)?nodes?(?![\w])"
    rf"|(?<![\w#])(?P<what2>{_DIM_WORDS['tp']}|{_DIM_WORDS['ep']})(?:\s+groups?)?\s+"
    r"(?:(?:must|should|may|can|does|do|will)(?:\s+not|n'?t)|mustnt|shouldnt|cannot|doesnt|dont|wont|never|not)\s+"
    r"(?:cross|span|leave|straddle|go\s+across|be\s+split\s+across)\s+(?:the\s+|multiple\s+|several\s+)?nodes?"
    r"(?![\w])"
)
"""A group kept off the network, said as a negation: "no TP across nodes", "TP must not span nodes", "EP shouldn't
cross nodes" (read before "no TP", which turns the dimension off)."""
_DROP_CONSTRAINTS = re.compile(
    r"(?<![\w#])(?:drop|remove|clear|forget|lose|lift|relax)\s+(?:all\s+)?(?:the\s+|my\s+|our\s+|any\s+)?"
    rf"(?:(?P<d>{_DIM})\s+(?:parallel\w*\s+)?(?:constraints?|limits?|restrictions?|bounds?|caps?)"
    r"|(?:parallel\w*\s+|layout\s+)?(?:constraints?|restrictions?))(?![\w])"
)
"""An edit that lifts earlier constraints: "remove the tp constraint", "drop all the parallelism constraints"."""
_XPYD = re.compile(
    r"(?<![\w#])(?P<p>\d{1,3})\s*p\s*(?P<d>\d{1,3})\s*d(?![\w])"
    rf"|(?<![\w#])(?P<p2>{_COUNT})\s+prefill(?:\s+(?:workers?|instances?|engines?))?\s+(?:and|\+|,)\s+"
    rf"(?P<d2>{_COUNT})\s+decode\s+(?:workers?|instances?|engines?)(?![\w])"
)
"""Split pools in the xPyD notation of Dynamo and SGLang: "2P1D" is two prefill workers and one decode worker."""
_SIZED_WITHIN = re.compile(
    rf"(?<![\w#])(?P<dim>tp|ep)\s*[=:]\s*(?P<v>\d+)[\s-]+(?:inside|within|in|intra)[\s-]*{_NODE}s?(?![\w])"
)
"""A degree and its place at once: "ep=8 within a node" is ep=8 and ep-in-node (read before the bare "ep=8", whose
leftover "within a node" was read as a node count)."""
_SIZED_ACROSS = re.compile(
    r"(?<![\w#])pp\s*[=:]\s*(?P<v>\d+)[\s-]+(?:across|between|over)[\s-]+(?:the\s+)?nodes(?![\w])"
)
""""pp=2 across nodes": pp=2 and pipeline boundaries on node boundaries."""
_POW2 = re.compile(r"(?<![\w#])(?:powers?[\s-]+of[\s-]+(?:two|2)|pow2)(?![\w])")
_ACROSS = re.compile(
    rf"(?<![\w#])(?:{_DIM_WORDS['pp']})(?:\s+(?:only|must\s+go|goes|go|runs?|spans?|split|is))*[\s-]+"
    r"(?:across|between|over)[\s-]+(?:the\s+)?(?:nodes|boxes|servers|machines|hosts)"
    rf"|(?<![\w#])(?:{_DIM_WORDS['pp']})\s+(?:inter[\s-]*node|across[\s-]*nodes)"
)
"""Pipeline stages only between nodes: "PP across nodes", "pipeline between nodes"."""
_ONLY = re.compile(
    rf"(?<![\w#])(?:(?P<d>{_DIM})\s+only|(?:only|pure|just)\s+(?P<d2>{_DIM}))(?![\w])"
    r"|(?<![\w#])(?:only\s+|just\s+)?(?:independent\s+)?replicas\s+only"
)
"""One dimension alone: "DP only", "TP only", "pure data parallelism"."""
_REPLICA = re.compile(
    rf"(?<![\w#])(?P<v>{_COUNT})\s*gpus?\s+(?:per|a|each|for\s+each|for\s+one)\s+(?:model\s+)?(?:replica|instance|copy)"
    r"|(?<![\w#])(?:one|a|1)\s+(?:model\s+)?(?:replica|instance|copy)\s+(?:per|a|each|on\s+each|for\s+each)\s+"
    r"(?:gpu|card|device)(?![\w])"
    rf"|(?:replicas?|instances?|copies)\s+of\s+(?P<v2>{_COUNT})\s*gpus?"
    rf"|(?:each|every|one)\s+(?:model\s+)?(?:replica|instance)\s+(?:(?:should|must|will|can|would)\s+)?"
    rf"(?:on|uses?|spans?|of|gets?|takes?)\s+(?P<v3>{_COUNT})\s*gpus?"
)
"""GPUs of one replica: "8 GPUs per replica", "replicas of 4 GPUs", "each replica on 8 GPUs"."""
_REPLICAS = re.compile(
    rf"(?<![\w#.])(?P<v>{_COUNT})\s+(?:(?:model|serving|engine)\s+)?(?=(?P<word>replicas?)(?![\w])"
    r"(?!\s+(?:per|a|each|on\s+each|for\s+each)\s+(?:gpu|card|device|node|server|box|host|machine)))"
)
"""How many replicas: "2 replicas", "two model replicas" (data parallelism; only the count is taken, so that "2 replicas
of 4 GPUs" still gives the replica's GPUs). "Instances" and "copies" are left alone: they name machines as often."""
_ENGINE = re.compile(
    r"(?<![\w#])(?:vllm|sglang|trt[\s-]*llm|tensorrt[\s-]*llm|tensorrt)(?![\w-])"
)
_ENGINE_NAMES = {"vllm": "vllm", "sglang": "sglang"}


def _dim(match: re.Match[str]) -> str:
    """The dimension a match names, from its ``d`` or ``d2`` group ("pipeline parallelism" → ``pp``)."""
    text = match.group("d") or match.groupdict().get("d2") or match.groupdict().get("d3") or ""
    return next(name for name, words in _DIM_WORDS.items() if re.fullmatch(words, text))


def read_constraints(scan: Scan, found: Findings) -> None:
    """Constraints said in words or in SPEC form, recorded under ``constraints`` in their text form."""
    for match in scan.take(_DROP_CONSTRAINTS):
        found.add("constraint_drops", _dim(match) if match.group("d") else "all", match.group())
    for match in scan.take(_XPYD):
        prefill = int(match.group("p")) if match.group("p") else _count(match.group("p2"))
        decode = int(match.group("d")) if match.group("d") else _count(match.group("d2"))
        if prefill < 1 or decode < 1:
            found.notes.append(f"Ignored '{match.group()}': split pools need at least one worker of each kind.")
            continue
        for text in (f"prefill:dp={prefill}", f"decode:dp={decode}"):
            found.add("constraints", text, match.group())
        found.add("disaggregated", True, match.group())
        found.notes.append(f"Read '{match.group()}' as split pools of {prefill} prefill and {decode} decode "
                           f"{'worker' if decode == 1 else 'workers'}.")
    for match in scan.take(_NOT_ACROSS):
        what = match.group("what") or match.group("what2")
        found.add("constraints", "tp-in-node" if what.startswith("t") else "ep-in-node", match.group())
    for match in scan.take(_SIZED_WITHIN):
        value = int(match.group("v"))
        if value >= 1:
            found.add("constraints", f"{match.group('dim')}={value}", match.group())
        found.add("constraints", f"{match.group('dim')}-in-node", match.group())
    for match in scan.take(_SIZED_ACROSS):
        if int(match.group("v")) >= 1:
            found.add("constraints", f"pp={int(match.group('v'))}", match.group())
        found.add("constraints", "pp-across-nodes", match.group())
    for match in scan.take(_EXPLICIT):
        op = {"==": "=", "≤": "<=", "≥": ">="}.get(match.group("op"), match.group("op"))
        raw = match.group("value")
        value = 1 if raw == "off" else int(raw)
        if op == "<":
            op, value = "<=", value - 1
        elif op == ">":
            op, value = ">=", value + 1
        where = f"{match.group('phase')}:" if match.group("phase") else ""
        if value >= 1:
            found.add("constraints", f"{where}{match.group('dim')}{op}{value}", match.group())
        else:
            found.notes.append(f"Ignored '{match.group()}': a degree is 1 or more.")
    for match in scan.take(_PHASE_CLAUSE):
        for degree in _PHASE_DEGREE.finditer(match.group("body")):
            value = _count(degree.group("value"))
            dim = next(name for name, words in _DIM_WORDS.items()
                       if re.match(rf"(?:{words})(?![a-z])", degree.group(), re.I))
            if value >= 1:
                found.add("constraints", f"{match.group('phase')}:{dim}={value}", match.group())
    for match in scan.take(_SIZED_BEFORE):
        value = int(match.group("value"))
        if value >= 1:
            found.add("constraints", f"{_dim(match)}{'<=' if match.group('cap') else '='}{value}", match.group())
    for match in scan.take(_WIDE_EP):
        found.add("constraints", f"ep={ALL_GPUS}", match.group())
        found.notes.append(f"Read '{match.group().strip()}' as expert parallelism across all the GPUs (ep = the GPU "
                           "count).")
    for match in scan.take(_ALL):
        width = str(_count(match.group("n"))) if match.group("n") else ALL_GPUS
        found.add("constraints", f"{'ep' if match.group('experts') else _dim(match)}={width}", match.group())
    for match in scan.take(_OFF):
        found.add("constraints", f"{_dim(match)}=1", match.group())
    for match in scan.take(_WITHIN):
        what = next((match.group(g) for g in ("what", "what2", "what3", "what4") if match.group(g)), "")
        found.add("constraints", "tp-in-node" if what.startswith("t") else "ep-in-node", match.group())
    for match in scan.take(_ACROSS):
        found.add("constraints", "pp-across-nodes", match.group())
    for match in scan.take(_POW2):
        found.add("constraints", "pow2", match.group())
    for match in scan.take(_ONLY):
        dim = _dim(match) if match.group("d") or match.group("d2") else "dp"
        texts = {"dp": ["gpus-per-replica=1"], "tp": ["pp=1", "dp=1", "ep=1", "sp=1", "adp=1"],
                 "pp": ["tp=1", "dp=1", "sp=1", "adp=1"], "ep": ["pp=1", "dp=1"]}.get(dim, [])
        for text in texts:
            found.add("constraints", text, match.group())
        found.notes.append(f"Read '{match.group().strip()}' as {', '.join(texts) or 'no constraint'}.")
    for match in scan.take(_REPLICAS):
        value = _count(match.group("v"))
        if value >= 1:
            found.add("constraints", f"dp={value}", match.group() + match.group("word"))
    for match in scan.take(_REPLICA):
        counted_gpus = match.group("v") or match.group("v2") or match.group("v3")
        value = _count(counted_gpus) if counted_gpus else 1  # "one replica per GPU"
        if value >= 1:
            found.add("constraints", f"gpus-per-replica={value}", match.group())
    for match in scan.take(_SIZED):
        value = _count(match.group("value"))
        if value >= 1:
            capped = match.group("cap") or re.search(rf"up\s+to|at\s+most|<=|capped|{_NO_MORE}", match.group())
            found.add("constraints", f"{_dim(match)}{'<=' if capped else '='}{value}", match.group())
    for match in scan.take(_ON):
        said_phase = match.group("phase") or match.group("phase2")
        phase = f"{said_phase}:" if said_phase else ""
        found.add("constraints", f"{phase}{_dim(match)}>=2", match.group())
    for match in scan.take(_ENGINE):
        name = re.sub(r"[\s-]", "", match.group())
        found.add("constraints", f"engine={_ENGINE_NAMES.get(name, 'trtllm')}", match.group())
