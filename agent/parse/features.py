"""Reading speculative decoding and prefix reuse from plain language.

Speculative decoding: the drafter ("MTP", "EAGLE-3", "draft model llama-3.1-8b"), the draft tokens per step ("3
draft tokens", "mtp 1 draft", "4 tokens" right after a draft model) and the acceptance, which is never assumed:

* "2 accepted tokens", "2.5 accepted": the mean accepted drafts per step (``spec_accept``), as written;
* "accept length 2.6", "acceptance length 2.6": vLLM's and SGLang's mean acceptance length, which counts the token
  the verify step adds itself, so 1.6 drafts are accepted (the note says so);
* "acceptance 0.8", "acceptance rate 80%": the share of draft tokens accepted (vLLM's draft acceptance rate), so
  rate x K drafts per step; read once the draft tokens are known.

Prefix reuse is read by :mod:`~shardplan.agent.parse.prefix`; this module settles both into the workload.

Every value read is echoed in a note with the words it came from. The reader runs before the model reader, so the
draft model's name is not read as the model to plan.

>>> from shardplan.agent.parse.text import Findings, Scan
>>> found = Findings()
>>> read_features(Scan("eagle-3 with 3 draft tokens, accept length 2.6"), found)
>>> found.values
{'spec_method': ['eagle'], 'spec_tokens': [3], 'spec_accept': [1.6]}
"""

from __future__ import annotations

import re
from typing import Any

from shardplan.agent.parse.prefix import read_prefix
from shardplan.agent.parse.text import _ABOUT, Findings, Scan, _count, _number
from shardplan.contracts.speculation import MAX_DRAFT_TOKENS, parse_speculation
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.text import counted
from shardplan.tools.catalogs.drafters import mtp_layers, no_mtp_layers
from shardplan.tools.catalogs.models import load_model, resolve_model_name

__all__ = [
    "FEATURE_SETTINGS", "read_features", "parsed_features", "settle_features", "missing_features", "workload_features",
]


FEATURE_SETTINGS = ("spec_method", "spec_tokens", "spec_accept", "prefix_hit", "prefix_tokens")
"""The fields this reader sets, which a follow-up inherits."""


def _num(name: str) -> str:
    """A decimal number in a group of its own name (one pattern may hold several)."""
    return rf"(?<![\w.])(?P<{name}>\d+(?:\.\d+)?)"


_SPEC_WORDS = (r"(?:speculative[\s-]+decoding|speculation|spec(?:ulative)?[\s-]+decod(?:e|ing)|mtp"
               r"|eagle(?:[\s-]*[123])?|draft\s+model)")
_SPEC_OFF = re.compile(
    rf"(?<![\w#])(?:no|without|disable[ds]?|turn\s+off|switch\s+off|drop|remove|lose)\s+(?:the\s+)?{_SPEC_WORDS}"
    r"(?![\w])"
    rf"|(?<![\w#])(?:turn|switch|set)\s+(?:the\s+)?{_SPEC_WORDS}\s+off(?![\w])"
    rf"|(?<![\w#]){_SPEC_WORDS}\s+(?:(?:is|was|stays)\s+)?(?:off|disabled)(?![\w])"
)
_MTP = re.compile(r"(?<![\w#])(?:mtp|multi[\s-]*token[\s-]*prediction|nextn)(?![a-z])")
_EAGLE = re.compile(r"(?<![\w#])eagle(?:[\s-]*[123])?(?![\w])")
_WORD = r"[a-z0-9/~.][\w./-]*"
_DRAFT_MODEL = re.compile(
    rf"(?<![\w#])(?:draft(?:er)?[\s-]+model|drafter|draft(?=\s*[=:]))\s*(?:is\s+|of\s+|=\s*|:\s*)?"
    r"(?!(?:with|and|that|which|for|to|in|on|at|proposing)\b)"
    rf"(?P<after>{_WORD}(?:\s+{_WORD}){{0,3}})"
    rf"|(?<![\w#./~-])(?P<before>{_WORD}(?:\s+{_WORD}){{0,3}})\s+(?:as\s+(?:the\s+|a\s+)?draft(?:[\s-]+model)?"
    r"|drafting\s+for|(?:as\s+)?(?:the\s+)?drafter\s+for)(?![a-z])"
)
"""A draft model named after "draft model", or before "as the draft model" or "drafting for" (the model drafted for
follows, and is the one to plan); up to four words, of which the longest run that names a bundled model is taken."""
_TOKENS_PER_STEP = re.compile(
    r"(?<![\w#.])(?P<k>\d+)\s+(?:draft(?:ed)?\s+|speculative\s+|proposed\s+)?tokens?\s+(?:per|a|each)\s+"
    r"(?:step|iteration|round)(?![a-z])"
)
"""Draft tokens said per step ("4 tokens per step"), read only beside a drafter this message names."""
_TOKENS = re.compile(
    rf"{_num('k')}\s*(?:spec(?:ulative)?\s+|draft(?:ed)?\s+|lookahead\s+)tokens?(?![a-z])"
    r"|(?<![\w#.])(?P<k2>\d+|one|two|three|four|five|six|seven|eight)\s+drafts?(?![a-z])"
    r"|(?<![\w#])(?:k\s*[=:]|(?:num[\s_-]*speculative[\s_-]*tokens|draft[\s_-]*tokens|speculative[\s_-]*tokens)"
    r"\s*[=:]?)\s*"
    r"(?P<k3>\d+)(?![\w.])"
    r"|(?<![\w#.])(?P<k4>\d+)[\s-]*(?:draft[\s-]*)?tokens?[\s-]+(?=#)"
    r"|(?<![\w#])(?:proposing|proposes|propose|drafting|guessing)\s+(?P<k5>\d+)\s+(?:draft\s+)?tokens?(?![a-z])"
)
"""Draft tokens per step: "3 draft tokens", "4 spec tokens", "two drafts", "k=3", "num_speculative_tokens: 3",
"proposing 5 tokens", or a count right before the drafter the readers above took (blanked with "#" by then): "2-token
MTP"."""
_TOKENS_AFTER_DRAFTER = re.compile(
    r"^(?:[\s,]*(?:with\s+)?(?P<k>\d+)\s*tokens?(?![a-z])|\s*[:=]\s*(?P<k2>\d+)(?![\w.])"
    r"|\s+(?P<k3>\d+)(?=\s*(?:[,;]|$|(?:with|and|drafts?)(?![a-z])))|\s+(?:(?:with|of)\s+)?depth\s*[:=]?\s*(?P<k4>\d+)"
    r"(?![\w.]))"
)
"""The count right after a drafter's name: "draft model llama-3.1-8b, 4 tokens", "mtp 2 tokens", "mtp:3", "mtp 3
with 1.8 accepted" (a bare number only where a clause ends or goes on: "MTP 2 accepted" is an acceptance)."""
_LENGTH = re.compile(
    rf"(?<![\w#])(?:mean\s+|average\s+)?accept(?:ance|ed)?[\s-]+len(?:gth)?\s*"
    rf"(?:of|=|:|is|was|were|be|at|becomes?|goes\s+to|rises\s+to|falls\s+to|drops\s+to)?\s*{_ABOUT}{_num('n')}"
    r"(?!\w|\.\d)"
    rf"|{_num('n2')}\s+(?:mean\s+|average\s+)?accept(?:ance|ed)?[\s-]+len(?:gth)?(?![\w])"
    rf"|(?<![\w#])(?:τ|tau)\s*(?:=|:|≈|~|of|is)\s*{_ABOUT}{_num('n3')}(?!\w|\.\d)"
)
"""An acceptance length: "accept length 2.6", "acceptance length ~2.8", "2.6 mean acceptance length", or the EAGLE
papers' tau ("τ = 3.1"), each counting the token the verify step adds itself."""
_RATE = re.compile(
    rf"(?<![\w#])accept(?:ance)?(?:[\s-]+rate)?\s*(?:of|=|:|is)?\s*{_ABOUT}{_num('n')}\s*(?:(?P<pct>%)|(?![\w.%]))"
    rf"|{_num('n2')}\s*(?P<pct2>%)\s+(?:acceptance|accept(?:ed)?)(?:[\s-]+rate)?(?![a-z])"
    rf"|{_num('n3')}\s+(?:draft\s+)?accept(?:ance)?[\s-]+rate(?![a-z])"
)
_ACCEPTED = re.compile(
    rf"{_num('n')}\s*(?:tokens?\s+|drafts?\s+|draft\s+tokens?\s+"
    r"|of\s+(?:them|those|these|the\s+(?:draft(?:ed)?\s+|proposed\s+|speculative\s+)?(?:tokens|drafts))\s+"
    r"(?:are\s+|get\s+|gets\s+|is\s+)?)?"
    r"accepted(?:\s+(?:draft\s+)?(?:tokens?|drafts?))?(?:\s+on\s+average)?"
    rf"(?:\s+(?:per|a|each)\s+step)?(?![a-z])"
    rf"|(?<![\w#])accepts?\s+{_num('n2')}(?![\w.%])"
)
def _draft_model(words: str, before: bool) -> tuple[str, str]:
    """The draft model in ``words`` (the bundled id of the longest run of words that names one, nearest the marker
    first) and the words it came from; a name no bundled model matches is kept as written (a path or hub id)."""
    parts = words.split()
    runs = ([" ".join(parts[i:]) for i in range(len(parts))] if before
            else [" ".join(parts[:i]) for i in range(len(parts), 0, -1)])
    for run in runs:
        try:
            return resolve_model_name(run), run
        except InputError:
            continue
    name = parts[-1] if before else parts[0]
    return name, name


def _tokens_after(scan: Scan, end: int, found: Findings) -> None:
    """A draft-token count written right after the drafter ("mtp 2 tokens", "draft model X, 4 tokens")."""
    after = _TOKENS_AFTER_DRAFTER.match(scan.text[end:])
    if after:
        k = int(after.group("k") or after.group("k2") or after.group("k3") or after.group("k4"))
        scan.blank(end, end + after.end())
        if not 1 <= k <= MAX_DRAFT_TOKENS:
            found.notes.append(f"Ignored '{after.group().strip(' ,')}' after the drafter: draft tokens are a whole "
                               f"number from 1 to {MAX_DRAFT_TOKENS}.")
            return
        found.add("spec_tokens", k, after.group().strip(" ,"))
        found.notes.append(f"Read '{after.group().strip(' ,')}' after the drafter as {counted(k, 'draft token')} per "
                           f"step.")


def _read_speculation(scan: Scan, found: Findings) -> None:
    offs = scan.take(_SPEC_OFF)
    _read_drafters(scan, found)
    for match in offs:
        if found.comparing and found.values.get("spec_method"):
            # "compare EAGLE-3 against no speculation": the plan is the drafter's; its answer gives the effect
            drafter = found.values["spec_method"][0]
            found.notes.append(f"Comparing with '{match.group().strip()}': planning with {drafter}; the plan's cost "
                               "shows what speculative decoding changes.")
            continue
        found.add("spec_method", "off", match.group())
        found.notes.append(f"Read '{match.group().strip()}' as no speculative decoding.")
    _read_speculation_figures(scan, found)


def _read_drafters(scan: Scan, found: Findings) -> None:
    """The drafter: a draft model by name, MTP or EAGLE, each with a draft-token count written right after it."""
    for match in list(_DRAFT_MODEL.finditer(scan.text)):
        before = match.group("before") is not None
        words = match.group("before") if before else match.group("after")
        repo, used = _draft_model(words, before)
        start = match.start("before") + words.rindex(used) if before else match.start()
        end = match.end() if before else match.start("after") + len(used)
        phrase = scan.text[start:end]
        scan.blank(start, end)
        found.add("spec_method", f"draft:{repo}", phrase)
        bundled = "/" in repo and repo != used
        found.notes.append(f"Read '{phrase}' as speculative decoding with draft model {repo}"
                           + ("." if bundled else " (not bundled: the plan needs its config.json path)."))
        _tokens_after(scan, end, found)
    for method, pattern in (("mtp", _MTP), ("eagle", _EAGLE)):
        for match in scan.take(pattern):
            found.add("spec_method", method, match.group())
            drafter = "the model's MTP layers" if method == "mtp" else "an EAGLE-3 head"
            if method == "eagle" and re.search(r"[12]$", match.group().strip()):
                # The exported commands load EAGLE-3 and the price is its head's: an older head is not modelled.
                drafter += " (shardplan prices and exports EAGLE-3; an EAGLE-1/2 head is not modelled)"
            found.notes.append(f"Read '{match.group().strip()}' as speculative decoding with {drafter}.")
            _tokens_after(scan, match.end(), found)


def _read_speculation_figures(scan: Scan, found: Findings) -> None:
    """Draft tokens per step and the acceptance, in their several forms (see the module's docstring)."""
    per_step = scan.take(_TOKENS_PER_STEP) if found.values.get("spec_method") else []
    for match in scan.take(_TOKENS) + per_step:
        text = _number(match, "k", "k2", "k3", "k4", "k5")
        k = float(text) if re.fullmatch(r"\d+(?:\.\d+)?", text) else _count(text)
        if k != int(k) or not 1 <= k <= MAX_DRAFT_TOKENS:
            found.notes.append(f"Ignored '{match.group().strip()}': draft tokens are a whole number from 1 to "
                               f"{MAX_DRAFT_TOKENS}.")
            continue
        found.add("spec_tokens", int(k), match.group())
        found.notes.append(f"Read '{match.group().strip()}' as {counted(int(k), 'draft token')} per step.")
    for match in scan.take(_LENGTH):
        length = float(_number(match, "n", "n2", "n3"))
        if length < 1:
            found.notes.append(f"Ignored '{match.group().strip()}': an acceptance length counts the verify step's own "
                               "token, so it is at least 1.")
            continue
        found.add("spec_accept", round(length - 1, 6), match.group())
        found.notes.append(f"Read '{match.group().strip()}' as {length - 1:g} accepted draft tokens per step: an "
                           "acceptance length counts the token the verify step adds itself (length - 1).")
    for match in scan.take(_ACCEPTED):
        accepted = float(_number(match, "n", "n2"))
        found.add("spec_accept", accepted, match.group())
        found.notes.append(f"Read '{match.group().strip()}' as {accepted:g} accepted draft tokens per step.")
    for match in scan.take(_RATE):
        rate = float(_number(match, "n", "n2", "n3")) / (100 if match.group("pct") or match.group("pct2") else 1)
        if not 0 <= rate <= 1:
            found.notes.append(f"Ignored '{match.group().strip()}': an acceptance rate is a share from 0 to 1 (or a "
                               "percentage); for accepted tokens per step write '2 accepted tokens'.")
            continue
        found.add("spec_accept_rate", rate, match.group())
        found.add("spec_rate_words", match.group().strip())


def read_features(scan: Scan, found: Findings) -> None:
    """Speculative decoding and prefix reuse, taken from the text (see the module's docstring and
    :mod:`~shardplan.agent.parse.prefix`)."""
    _read_speculation(scan, found)
    read_prefix(scan, found)


def settle_features(merged: dict[str, Any], before: str | None, found: Findings) -> None:
    """Speculation as this message leaves it, ``before`` being the drafter the earlier messages named: "off" clears
    it; a new drafter keeps the earlier draft tokens but not the earlier acceptance, which belonged to the other
    drafter. An acceptance rate read in this message becomes accepted drafts per step (rate x K) once the draft
    tokens are known, this message's or the earlier ones'; until then it is noted and the acceptance stays unread."""
    said = found.values.get("spec_method")
    _sglang_eagle_is_mtp(merged, found)
    if merged.get("spec_method") == "off":
        merged.update(spec_method=None, spec_tokens=None, spec_accept=None)
        return
    if said and before is not None and merged["spec_method"] != before and "spec_accept" not in found.values:
        merged["spec_accept"] = None
        found.notes.append(f"The acceptance given for {before} does not carry over to {merged['spec_method']}.")
    _settle_rate(merged, found)
    if said and merged.get("spec_accept") is None:
        found.notes.append("Speculative decoding is priced from its measured acceptance, which shardplan never "
                           "assumes: give the mean accepted draft tokens per step (your engine's reported acceptance "
                           "length minus one).")


def _sglang_eagle_is_mtp(merged: dict[str, Any], found: Findings) -> None:
    """SGLang's ``--speculative-algorithm EAGLE`` with no draft model path, on a model with MTP layers (DeepSeek-V3),
    drafts with those layers: MTP, not an EAGLE-3 head."""
    words = found.said.get("spec_method", "")
    if merged.get("spec_method") != "eagle" or not words.startswith("--speculative-algorithm"):
        return
    if "draft-model-path" in found.original.lower() or merged.get("model") is None:
        return
    if _mtp_tokens(merged["model"]):
        merged["spec_method"] = "mtp"
        found.notes.append(f"Read '{words}' with no draft model as SGLang's MTP path: {merged['model']} drafts with "
                           "its own MTP layers.")


def _settle_rate(merged: dict[str, Any], found: Findings) -> None:
    """An acceptance rate read in this message as accepted drafts per step (rate x K), once K is known."""
    rates, words = found.values.get("spec_accept_rate", []), found.values.get("spec_rate_words", [])
    if not rates or merged.get("spec_accept") is not None and "spec_accept" in found.values:
        return
    k = merged.get("spec_tokens")
    if k is None:
        found.notes.append(f"'{words[0]}' is a share of draft tokens accepted: say how many draft tokens each step "
                           "proposes, or give the accepted tokens per step.")
        return
    merged["spec_accept"] = round(rates[0] * k, 6)
    found.said.setdefault("spec_accept", words[0])
    found.notes.append(f"Read '{words[0]}' as {merged['spec_accept']:g} accepted draft tokens per step ({rates[0]:g} "
                       f"of the {counted(k, 'draft token')}).")


def _mtp_tokens(model: str) -> int:
    """The MTP modules in ``model``'s checkpoint: how many tokens MTP drafts when the request does not say."""
    return mtp_layers(load_model(model))


def missing_features(parsed: Any) -> list[str]:
    """What speculative decoding still needs: ``spec_method`` (figures were given without a drafter),
    ``spec_tokens`` (K, except for MTP on a model whose MTP layers give it), ``spec_accept`` (always: it is measured,
    never assumed)."""
    if parsed.spec_method is None:
        return ["spec_method"] if parsed.spec_tokens is not None or parsed.spec_accept is not None else []
    if parsed.spec_method == "mtp" and parsed.model is not None and not _mtp_tokens(parsed.model):
        return []  # nothing to ask: the model has no MTP layers, which the plan's answer says (workload_features)
    missing = []
    if parsed.spec_tokens is None:
        mtp = parsed.spec_method == "mtp" and parsed.model is not None and _mtp_tokens(parsed.model)
        if not mtp or (parsed.spec_accept is not None and parsed.spec_accept > mtp):
            missing.append("spec_tokens")
    if parsed.spec_accept is None:
        missing.append("spec_accept")
    return missing


def workload_features(parsed: Any, isl: int, notes: list[str]) -> dict[str, Any]:
    """The workload fields the parsed features give: ``speculation`` and ``prefix_hit`` (a shared prefix of
    ``prefix_tokens`` over a prompt of ``isl`` tokens), with a note for each value worked out rather than read.

    Raises:
        InputError: a speculation the contract refuses (accepted more than the draft tokens), or a shared prefix
            as long as the prompt (field ``prefix_hit``).
    """
    fields: dict[str, Any] = {}
    if parsed.spec_method is not None:
        k = parsed.spec_tokens
        if parsed.spec_method == "mtp" and not _mtp_tokens(parsed.model):
            raise InputError(
                f"MTP: {no_mtp_layers(parsed.model)}", field="spec",
                fix="ask for an EAGLE-3 head (eagle:K) or a smaller draft model of the same vocabulary (draft:MODEL:K)",
            )
        if k is None:
            k = _mtp_tokens(parsed.model)
            notes.append(f"MTP drafts {counted(k, 'draft token')} per step: the model's {counted(k, 'MTP layer')} "
                         "(num_nextn_predict_layers), as the request gives no count.")
        fields["speculation"] = parse_speculation(f"{parsed.spec_method}:{k}", parsed.spec_accept)
    if parsed.prefix_hit is not None:
        fields["prefix_hit"] = parsed.prefix_hit
    elif parsed.prefix_tokens is not None:
        if parsed.prefix_tokens >= isl:
            raise InputError(f"the shared prefix of {counted(parsed.prefix_tokens, 'token')} is not shorter than the "
                             f"{isl}-token prompt", field="prefix_hit",
                             fix="say the prompt length, or the share of it that is shared")
        fields["prefix_hit"] = round(parsed.prefix_tokens / isl, 6)
        notes.append(f"Prefix hit {fields['prefix_hit']:.1%}: the {parsed.prefix_tokens}-token shared prefix of the "
                     f"{isl}-token prompt.")
    return fields


def parsed_features(workload: Workload) -> dict[str, Any]:
    """The parsed fields that stand for ``workload``'s speculation and prefix hit (a structured request's, which a
    follow-up in words then builds on)."""
    spec = workload.speculation
    fields: dict[str, Any] = {"prefix_hit": workload.prefix_hit or None}
    if spec is not None:
        method = f"draft:{spec.draft_model}" if spec.draft_model else spec.method
        fields.update(spec_method=method, spec_tokens=spec.draft_tokens, spec_accept=spec.accepted)
    return fields
