"""One reader per field family: models, GPU types and counts, lengths, batch,
objective, disaggregation. Each reads a :class:`~shardplan.agent.parse.text.Scan` and records
what it found; the order in which :func:`~shardplan.agent.parse.request.parse_request` runs them matters.
Intents, targets, constraints, machines and number formats have their own modules beside this one."""

from __future__ import annotations

import re
from functools import lru_cache

from shardplan.agent.parse.machines import gpu_variant, read_uncatalogued_gpus
from shardplan.agent.parse.text import (
    _COUNT,
    _DUR,
    _LEN,
    _REJECTED,
    _START,
    Findings,
    Scan,
    _add_positive,
    _count,
    _squash,
)
from shardplan.contracts.common import Objective
from shardplan.errors import InputError
from shardplan.tools.catalogs.bundled import bundled_models
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.catalogs.model_names import alias_note
from shardplan.tools.catalogs.models import resolve_model_name
from shardplan.tools.planning.gpu_choice import ANY

# ---------------------------------------------------------------------------------------------------------
# Models


@lru_cache(maxsize=1)
def _model_patterns() -> list[tuple[re.Pattern[str], str]]:
    """One pattern per way of writing each bundled model, longest first.

    A model's short name is squashed ("Llama-3.1-70B" → "llama3170b") and the pattern lets spaces, dots,
    hyphens and underscores sit between any two characters, so "llama 3.1 70b", "Llama-3.1-70B" and
    "llama3.1-70b" all match. Extra spellings: without a release suffix ("Mixtral 8x7B"), without the
    active-parameter suffix ("Qwen3-235B"), and Llama without its version ("Llama 70B"). A spelling that
    two models share is dropped.
    """
    spellings: dict[str, set[str]] = {}
    for repo in bundled_models():
        short = repo.split("/", 1)[1]
        variants = {
            short,
            re.sub(r"(?i)-v\d+(\.\d+)+$", "", short),
            re.sub(r"(?i)-a\d+(\.\d+)?b$", "", short),
            re.sub(r"(?i)^(llama)-\d+(\.\d+)*-", r"\1-", short),
        }
        for variant in variants:
            spellings.setdefault(_squash(variant), set()).add(repo)
    patterns = []
    for squashed, repos in sorted(spellings.items(), key=lambda item: -len(item[0])):
        if len(repos) == 1:
            body = r"[\s._-]*".join(re.escape(char) for char in squashed)
            patterns.append((re.compile(rf"(?<![a-z0-9#])(?:(?<![\w-])[\w-]+/)?{body}(?![a-z0-9]|\.\d)"), repos.pop()))
    return patterns


_FAMILY = re.compile(
    r"(?<![\w#])(?:gpt|llama|qwen|mistral|mixtral|deepseek|gemma|claude|falcon|kimi|glm|grok|olmo|nemotron"
    r"|gemini)(?=[\s.\d-]|$)(?:[\s-]?[a-z.]*\d[\w.]*){0,2}(?![\w])"
)
"""A model family name and up to two version or size tokens after it: "gpt-5", "llama 3.3 70b"."""


_FAMILIES = r"llama|qwen3?|mixtral|gpt[\s-]?oss|deepseek"
_SIZE = r"\d+x\d+b?|\d+(?:\.\d+)?b"
_SIZE_AND_FAMILY = re.compile(
    rf"(?<![\w#])(?:(?P<size>{_SIZE})\s+(?P<fam>{_FAMILIES})|(?P<fam2>{_FAMILIES})[\s-]*(?P<size2>{_SIZE}))"
    r"(?:\s+(?:moe|dense|instruct|chat|base))?(?![\w])"
)
"""A family and a size in either order, without the version: "8B llama", "mixtral 8x22", "qwen 32b dense"."""


def _by_family_and_size(family: str, size: str) -> str | None:
    """The one bundled model of ``family`` whose name has a part equal to ``size`` ("8x22" is "8x22B")."""
    family, size = _squash(family), _squash(size).removesuffix("b") + "b"
    hits = [repo for repo in bundled_models()
            if _squash(repo.split("/", 1)[1]).startswith(family)
            and size in (part.lower() for part in re.split(r"[-_]", repo.split("/", 1)[1]))]
    return hits[0] if len(hits) == 1 else None


_BARE_R1 = re.compile(r"(?<=\s)(?:(?:for|to|with|use|try|on|and|of)\s+(?:the\s+)?)r1(?![\w-])")
"""DeepSeek-R1 by its short name where a model is asked for ("same but for R1", "switch to R1")."""
_BARE_SIZE = re.compile(r"(?<![\w#.])(?:the\s+)?(?P<size>\d{1,4}(?:\.\d)?b)(?![\w])")
"""A model by its size alone, as a follow-up names a sibling of the thread's model: "switch to the 120b"."""


def sibling_model(repo: str, size: str) -> str | None:
    """The bundled model of ``repo``'s family of ``size`` ("openai/gpt-oss-20b", "120b" -> gpt-oss-120b); None when
    the family has none, or several.

    >>> sibling_model("openai/gpt-oss-20b", "120b"), sibling_model("meta-llama/Llama-3.1-70B", "8b")
    ('openai/gpt-oss-120b', 'meta-llama/Llama-3.1-8B')
    """
    name = repo.split("/", 1)[-1]
    family = "-".join(part for part in re.split(r"[-_]", name) if not re.fullmatch(r"[\d.x]+[bm]", part.lower()))
    return _by_family_and_size(family, size)


def _read_models(scan: Scan, found: Findings) -> None:
    """Bundled models by any spelling, the longest match winning; then unknown names with close suggestions."""
    hits = [(m.start(), m.end(), repo) for pattern, repo in _model_patterns() for m in pattern.finditer(scan.text)]
    taken: list[tuple[int, int, str]] = []
    for start, end, repo in sorted(hits, key=lambda hit: (hit[0] - hit[1], hit[0])):
        if all(end <= s or start >= e for s, e, _ in taken):
            taken.append((start, end, repo))
    for start, end, repo in sorted(taken):
        if not _drop_if_rejected(scan, start, end, repo, found):
            found.add("model", repo, scan.text[start:end])
        scan.blank(start, end)
    for match in scan.take(_SIZE_AND_FAMILY):
        family, size = match.group("fam") or match.group("fam2"), match.group("size") or match.group("size2")
        sized = _by_family_and_size(family, size)
        if sized is not None:
            found.add("model", sized, match.group())
            found.notes.append(f"Read '{match.group().strip()}' as {sized}.")
    for match in scan.take(_FAMILY):
        name = match.group().strip(" .-")
        try:
            repo = resolve_model_name(name)
        except InputError as exc:
            fix = exc.fix or ""  # names the model itself where it says it is not bundled
            found.notes.append(f"{fix}." if fix.startswith(f"'{name}'") else f"'{name}' is not a bundled model; {fix}.")
            continue
        found.add("model", repo, match.group())
        found.notes.append(alias_note(name) or f"Read '{name}' as {repo}.")
    for match in scan.take(_BARE_R1) if "model" not in found.values else []:
        found.add("model", "deepseek-ai/DeepSeek-V3", match.group())
        found.notes.append(alias_note("deepseek-r1") or "Read 'R1' as deepseek-ai/DeepSeek-V3.")
    for match in scan.take(_BARE_SIZE) if "model" not in found.values else []:
        found.add("model_size", match.group("size"), match.group())  # a sibling of the thread's model (_assemble)


def _drop_if_rejected(scan: Scan, start: int, end: int, value: str, found: Findings) -> bool:
    """Whether the value at ``text[start:end]`` is the one being replaced; if so blank it with its lead-in."""
    # Only the words just before the value can drop it; a bounded window keeps the reading linear.
    lead = _REJECTED.search(scan.text[max(0, start - 48) : start])
    if not lead:
        return False
    scan.blank(max(0, start - 48) + lead.start(), end)
    found.notes.append(f"Dropped {value}, which the request replaces.")
    return True


# ---------------------------------------------------------------------------------------------------------
# GPU types and counts


@lru_cache(maxsize=1)
def _gpu_names() -> dict[str, str]:
    """Lowercase spellings of catalog GPUs mapped to their catalog names."""
    names = {name.lower(): name for name in gpu_catalog()}
    if "MI300X" in gpu_catalog():
        names["mi300"] = "MI300X"
    return names


def _gpu_type_pattern() -> str:
    """A catalog GPU with an optional variant (SXM, PCIe, NVL, 80GB) and an optional plural s."""
    names = "|".join(re.escape(n) for n in sorted(_gpu_names(), key=len, reverse=True))
    return rf"(?:{names})(?:[\s-]*(?:sxm\d?|pcie|nvl|hgx|\d+\s*gb))*s?(?![a-wyz0-9])"


def _gpu_name(text: str, catalog: set[str]) -> str:
    """The catalog entry one GPU mention means, its variant read."""
    base = next(n for key, n in sorted(_gpu_names().items(), key=lambda kv: -len(kv[0])) if text.startswith(key))
    return gpu_variant(base, text, catalog)


def _read_gpu_choice(scan: Scan, found: Findings) -> None:
    """A choice among GPU types, "H100 or H200", "on 8 H100 or H200", "H100 or L40S or A100": a fleet question,
    recorded as the comma list ``--gpu`` takes ("H100,H200"); each type is planned and the cheapest kept."""
    one = rf"(?:(?<![\w#])|(?<=\d[x×])){_gpu_type_pattern()}"
    catalog = set(gpu_catalog())
    count = rf"(?:{_START}(?P<n>{_COUNT})\s*[x×]?\s*)?"
    for match in scan.take(re.compile(rf"{count}{one}(?:\s*,\s*{one})*(?:\s*,?\s*(?:or|and/or)\s+{one})+")):
        names = list(dict.fromkeys(_gpu_name(m.group(), catalog) for m in re.finditer(one, match.group())))
        found.add("gpu", ",".join(names), match.group())
        if match.group("n"):  # "8 H100 or H200": the budget of whichever type is kept
            _add_positive(found, "gpus", _count(match.group("n")), match.group())
        found.notes.append(f"Read '{match.group().strip()}' as a choice of GPU types ({', '.join(names)}): each is "
                           "planned and the cheapest that meets the targets is kept.")


_ANY_GPU = re.compile(
    r"(?<![\w#])(?:any|whichever|whatever)\s+(?:gpu|gpu\s+types?|hardware|accelerators?)s?(?![\w])"
    r"(?:\s+(?:is|works|would\s+be|will\s+do)(?:\s+(?:fine|ok|okay|cheapest|best))?)?"
)
"""Every GPU type: "any GPU is fine", "whichever GPU is cheapest" (``--gpu any``)."""


def _read_gpu_types(scan: Scan, found: Findings) -> None:
    """GPU types named anywhere, variants read ("A100 40GB", "H100 PCIe", "8xH100"); a replaced one
    ("instead of H100") is dropped with its count. A choice among types ("H100 or H200") is read first, and "any
    GPU" is every priced type. GPUs the catalog lacks ("L4", "V100") are named in a note, with their counts."""
    for match in scan.take(_ANY_GPU):
        found.add("gpu", ANY, match.group())
        found.notes.append(f"Read '{match.group().strip()}' as every GPU type with a price: each is planned and the "
                           "cheapest that meets the targets is kept.")
    _read_gpu_choice(scan, found)
    catalog = set(gpu_catalog())
    for match in list(re.finditer(rf"(?:(?<![\w#])|(?<=\d[x×])){_gpu_type_pattern()}", scan.text)):
        base = next(
            n for key, n in sorted(_gpu_names().items(), key=lambda kv: -len(kv[0])) if match.group().startswith(key)
        )
        name = gpu_variant(base, match.group(), catalog)
        if _drop_if_rejected(scan, match.start(), match.end(), name, found):
            continue
        found.add("gpu", name, match.group())
        if name == base and re.search(r"pcie|nvl|\d+\s*gb", match.group()):
            full = gpu_catalog()[name].full_name
            found.notes.append(f"Read '{match.group().strip()}' as the catalog's {name} ({full}).")
    read_uncatalogued_gpus(scan, found, frozenset(catalog))


@lru_cache(maxsize=1)
def _count_patterns() -> dict[str, re.Pattern[str]]:
    """GPU-count phrases, tried in this order: whole clusters, then node shapes, then plain counts."""
    gpu_t = _gpu_type_pattern()
    node = r"(?:nodes?|servers?|machines?|hosts?|boxes|box)"
    per = rf"(?:{gpu_t}\s*)?(?:gpus?\s*)?"
    return {
        "cluster": re.compile(
            rf"{_START}(?P<nodes>{_COUNT})[\s-]+(?:{gpu_t}[\s-]+)?{node}\s*,?\s*(?:of|with|x|×|each\s+with|having|"
            rf"containing)\s+(?P<per>{_COUNT})\s*[x×]?\s*{per}(?:each|per\s+node|apiece)?"
        ),
        "shaped": re.compile(
            rf"{_START}(?P<nodes>{_COUNT})\s*[x×]\s*(?P<per>{_COUNT})\s*(?:{gpu_t}|gpus?)"
            rf"|{_START}(?P<nodes2>{_COUNT})\s+(?P<per2>{_COUNT})[\s-]*(?:[x×]\s*{gpu_t}|gpus?)[\s-]+"
            rf"(?:{gpu_t}\s+)?{node}"
        ),
        "per_node": re.compile(
            rf"{_START}(?P<per>{_COUNT})\s*{per}(?:per|a|each|/)\s*{node}"
            rf"|{node}\s+of\s+(?P<per2>{_COUNT})\s*{per}"
            rf"|(?<=nodes\s\()(?P<per7>{_COUNT})\s*(?:[x×]\s*)?(?:(?:{gpu_t})(?:\s*gpus?)?|gpus?)\s+(?:each|apiece)\)"
            rf"|(?<=total\s\()(?P<per8>{_COUNT})\s*(?:[x×]\s*)?(?:(?:{gpu_t})(?:\s*gpus?)?|gpus?)\s+(?:each|apiece)\)"
            rf"|(?<=nodes,\s)(?P<per3>{_COUNT})\s*(?:[x×]\s*)?(?:(?:{gpu_t})(?:\s*gpus?)?|gpus?)\s+(?:each|apiece)"
            r"(?![a-z])"
            rf"|(?<=nodes\s)(?:of|with)\s+(?P<per4>{_COUNT})\s*(?:{gpu_t}\s*)?gpus?\s+each(?![a-z])"
            rf"|(?<=nodes\s)(?P<per5>{_COUNT})\s*[x×]?\s*(?:{gpu_t}|gpus?)\s+(?:each|apiece|per\s+node)(?![a-z])"
            rf"|(?<![\w#])(?:each|every)\s+{node}\s+(?:has|have|having|with|contains?|holds?)\s+(?P<per6>{_COUNT})\s*"
            rf"(?:(?:{gpu_t})(?:\s*gpus?)?|gpus?(?:\s+{gpu_t})?)(?![a-z])"
        ),
        "nodes": re.compile(rf"{_START}(?P<nodes>{_COUNT})[\s-]+(?:{gpu_t}[\s-]+)?(?:gpus?[\s-]+)?{node}(?![a-z])"),
        "gpus": re.compile(
            rf"{_START}(?P<gpus>{_COUNT})[\s-]*(?:[x×*][\s-]*)?(?:{gpu_t}(?:[\s-]*gpus?)?|gpus?)"
            rf"(?![a-z])|(?<![\w#]){gpu_t}\s*[x×]\s*(?P<gpus2>{_COUNT})"
            rf"|(?<![\w#]){gpu_t}s?\s*\(\s*(?P<gpus3>{_COUNT})\s+(?:of\s+them|in\s+total|total)\s*\)"
            rf"|(?<![\w#])(?:(?:on|with|using|across)\s+|(?<=,\s))(?P<gpus4>{_COUNT})\s+of\s+them(?![\w])"
            r"(?!\s+(?:are|is|were|was|for|as|to|in|with|being|get|gets|do|does|have|has)\b)"
            rf"|(?<![\w#])(?:gpus?|{gpu_t})\s+(?:quantity|qty|count)\s*[:=]?\s*(?P<gpus5>{_COUNT})(?![\w])"
            rf"|{_START}(?P<gpus6>{_COUNT})\s+(?:numbers?|pcs|pieces|units)\s+(?:of\s+)?{gpu_t}"
        ),
    }


def _group(match: re.Match[str], *names: str) -> str | None:
    """The first of ``names`` that took part in the match."""
    groups = match.groupdict()
    return next((groups[n] for n in names if groups.get(n) is not None), None)


def _read_gpu_counts(scan: Scan, found: Findings) -> None:
    """Total GPUs, nodes and GPUs per node: "two nodes of 8 H200", "2x8 H100", "8 GPUs per node",
    "4 nodes", "8x H100", "a single A100", "16 GPUs", "H200s (four of them)"."""
    patterns = _count_patterns()
    for kind in ("cluster", "shaped", "per_node", "nodes", "gpus"):
        for match in scan.take(patterns[kind]):
            nodes = _group(match, "nodes", "nodes2") if kind in ("cluster", "shaped", "nodes") else None
            per = (_group(match, "per", "per2", "per3", "per4", "per5", "per6", "per7", "per8")
                   if kind in ("cluster", "shaped", "per_node") else None)
            gpus = _group(match, "gpus", "gpus2", "gpus3", "gpus4", "gpus5", "gpus6") if kind == "gpus" else None
            for name, text in (("nodes", nodes), ("gpus_per_node", per), ("gpus", gpus)):
                if text is not None:
                    _add_positive(found, name, _count(text), match.group())


# ---------------------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------------------
# Objective, formats, disaggregation

_OBJECTIVES: tuple[tuple[Objective, re.Pattern[str]], ...] = (
    (
        "goodput",
        re.compile(
            r"goodput|(?:max(?:imi[sz]e|imum)?|highest|best|most|more)\s+throughput\s+(?:under|within|while\s+meeting|"
            r"subject\s+to|meeting|that\s+meets?|given)\s+(?:the\s+|these\s+|those\s+|our\s+|my\s+|its\s+)?"
            r"(?:slos?|slas?|targets?|constraints?|latency\s+targets?|goals?|limits?)"
        ),
    ),
    (
        "throughput",
        re.compile(
            r"(?:max(?:imi[sz]e|imum)?|highest|best|most|more|high)\s+throughput|optimi[sz]e\s+(?:for\s+)?throughput"
            r"|throughput[\s-]+(?:optimi[sz]ed|oriented|first)|cheapest|lowest\s+cost|cost[\s-]+(?:efficient|effective)"
            r"|cost\s+per\s+token|tokens?\s+per\s+dollar|most\s+tokens|offline\s+batch|cheaper|max(?:imum)?\s+tps"
            r"|as\s+many\s+tokens?\s+(?:per\s+(?:second|sec|s)|/\s*s)\s+as\s+(?:possible|we\s+can)"
            r"|(?<![\w#])throughput(?![\w])"
        ),
    ),
    (
        "latency",
        re.compile(
            r"(?:lowest|minimi[sz]e|min(?:imum)?|low|best|least)[\s-]+latency|optimi[sz]e\s+(?:for\s+)?latency"
            r"|latency[\s-]+(?:optimi[sz]ed|oriented|first|sensitive|critical)|fastest|as\s+fast\s+as\s+possible"
            r"|latency\s+(?:matters|counts)\s+(?:the\s+)?most|latency\s+is\s+(?:the\s+|our\s+)?(?:top\s+|first\s+)?"
            r"priority|(?:care|cares)\s+(?:the\s+)?most\s+about\s+latency"
        ),
    ),
)


def _read_objective(scan: Scan, found: Findings) -> None:
    """The objective: "max throughput under the SLO" (goodput), "highest throughput", "cheapest per token"
    (throughput), "lowest latency", "fastest" (latency)."""
    for objective, pattern in _OBJECTIVES:
        for match in scan.take(pattern):
            found.add("objective", objective, match.group())


_DISAGG_NO = re.compile(
    r"(?:no|not|without|non)[\s-]+(?:pd[\s-]+|p/d[\s-]+)?disaggregat\w*|co[\s-]?located|colocat\w*"
    r"|(?<!dis)aggregated\s+serving|same\s+gpus?\s+for\s+prefill\s+and\s+decode"
)
_DISAGG_YES = re.compile(
    r"disaggregat\w*|(?<![\w#/])disagg(?![\w])"
    r"|(?:separate|split|dedicated|different|distinct)\s+(?:gpus\s+for\s+)?prefill\s+and\s+decode"
    r"|prefill\s+and\s+decode\s+(?:on|in)\s+(?:separate|different|distinct|dedicated)|p/?d\s+disagg\w*"
    r"|(?:an?|one|its\s+own)\s+prefill\s+pool\s+and\s+(?:an?|one|its\s+own)\s+decode\s+pool"
)


_CONTEXT_WINDOW = re.compile(
    rf"(?<![\w#])(?:(?P<n>{_LEN})[\s-]*(?:tokens?[\s-]+)?(?:of\s+)?context[\s-]+"
    r"(?:window|limit|length\s+limit|support)"
    rf"|(?:model\s+)?(?:supports?|handles?|has|with)\s+(?:up\s+to\s+|a\s+)?(?P<n2>{_LEN})[\s-]*(?:tokens?[\s-]+)?"
    r"(?:of\s+)?context(?![\w])(?=\s+(?:but|though|although|yet|while|;|,|-|—)))"
)
"""The model's context window, which bounds the prompt but is not its length: "a 32k context window", "the model
supports 128k context but our prompts are ~3k"."""


_PROMPT_WORD = re.compile(r"(?<![\w#])(?:prompts?|inputs?|isl|in)(?![\w])")


def _read_context_window(scan: Scan, found: Findings) -> None:
    """A context window said beside the prompt length: noted, not read as the prompt length. Without another prompt
    length in the message the window is the prompt length people mean ("24k context window, 1k completions")."""
    if not _PROMPT_WORD.search(scan.text):
        return
    for match in scan.take(_CONTEXT_WINDOW):
        found.notes.append(f"Read '{match.group().strip()}' as the model's context window, not the prompt length.")


def _read_disaggregation(scan: Scan, found: Findings) -> None:
    """Disaggregated serving: "disaggregated", "separate prefill and decode", "PD disaggregation"; and its
    negation ("colocated", "without disaggregation")."""
    for value, pattern in ((False, _DISAGG_NO), (True, _DISAGG_YES)):
        for match in scan.take(pattern):
            found.add("disaggregated", value, match.group())


def _note_leftovers(scan: Scan, found: Findings) -> None:
    """Durations and lengths no reader claimed, so the user learns they were not used."""
    for match in re.finditer(rf"(?<![\w#]){_DUR}", scan.text):
        found.notes.append(f"'{match.group()}' was not used: say whether it bounds TTFT or TPOT.")
    for match in re.finditer(r"(?<![\w#])\d+(?:\.\d+)?k(?![\w])", scan.text):
        found.notes.append(f"'{match.group()}' was not used: say whether it is the prompt or the output length.")
    for match in re.finditer(r"(?<![\w#.])\d+(?:\.\d+)?(?![\w.]|\.\d)", scan.text):
        found.notes.append(f"'{match.group()}' was not used: say what it counts.")
