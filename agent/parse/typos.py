"""Misspelt key words mended before the readers run: "promts" is "prompts", "ouput" is "output", "lama" is "llama".

People type requests fast; a slip in a noun the grammar keys on ("4k promts") would leave its figure unread and a
default assumed in its place. A word is mended only when it is one edit (a letter dropped, added, changed, or two
swapped) away from exactly one key word below, is not itself a word the readers know, and has at least four
letters, so short words ("in", "out", "bs") are never touched. Every mend is a note, so the answer shows it.

>>> mend_typos("llama 70b, 4k promts, 512 ouput tokens")
('llama 70b, 4k prompts, 512 output tokens', ["Read 'promts' as 'prompts'.", "Read 'ouput' as 'output'."])
>>> mend_typos("match the batch")[0]
'match the batch'
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["mend_typos"]

_KEY_WORDS = (
    "prompt", "prompts", "input", "inputs", "output", "outputs", "response", "responses", "completion",
    "completions", "answers", "tokens", "concurrent", "concurrency", "requests", "throughput", "latency",
    "percentile", "speculative", "acceptance", "disaggregated", "llama", "mixtral", "deepseek",
)
"""Words the readers key on that are long enough for a one-edit slip to be read safely."""
_KNOWN = frozenset(_KEY_WORDS) | {
    "prompted", "token", "answer", "request", "latent", "context", "contest", "inputted", "outputted", "output's",
    "accept", "accepted", "acceptable", "acceptances", "percent", "percents", "percentiles", "lamas", "llamas",
    "speculate", "mistral", "disaggregate", "bequests",
}
"""Real words one edit from a key word, never mended."""
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_WORD = re.compile(r"(?<![\w./-])[a-z]{4,}(?![\w/])")


def _one_edit(word: str) -> set[str]:
    """Every string one edit from ``word``."""
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deletes = {a + b[1:] for a, b in splits if b}
    swaps = {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    changes = {a + c + b[1:] for a, b in splits if b for c in _LETTERS}
    inserts = {a + c + b for a, b in splits for c in _LETTERS}
    return deletes | swaps | changes | inserts


@lru_cache(maxsize=1)
def _mends() -> dict[str, str]:
    """Misspelling -> key word, for the misspellings one edit from exactly one key word."""
    seen: dict[str, set[str]] = {}
    for key in _KEY_WORDS:
        for typo in _one_edit(key):
            seen.setdefault(typo, set()).add(key)
    mends = {}
    for typo, keys in seen.items():
        if typo in _KNOWN or len(typo) < 4 or len({key.removesuffix("s") for key in keys}) > 1:
            continue  # a real word, too short, or one slip from two different words: left as written
        # "inpust" is one slip from "input" and from "inputs": the one of its own length
        mends[typo] = min(keys, key=lambda key: (abs(len(key) - len(typo)), -len(key)))
    return mends


def mend_typos(text: str) -> tuple[str, list[str]]:
    """``text`` (already lowercase) with one-edit slips of key words mended, and a note per mend."""
    mends, notes = _mends(), []

    def mend(match: re.Match[str]) -> str:
        word = match.group()
        key = mends.get(word)
        if key is None:
            return word
        notes.append(f"Read '{word}' as '{key}'.")
        return key

    return _WORD.sub(mend, text), notes
