"""Corrections inside one message: "8 H100s, 2k/256, actually make it 16 GPUs", "4k prompts - sorry, I meant 8k".

People correct themselves mid-message. Read as one piece, the two values would be a contradiction and the answer
would ask back about something the message already settled; so the message is cut at each correction word and
every later piece is read as a follow-up to the pieces before it: what it says replaces, the rest is kept. A note
names the word read as a correction, so a reading the user did not mean is visible.

>>> [lead for lead, _ in split_corrections("8 h100s, actually make it 16 gpus")]
['', 'actually']
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from shardplan.agent.parse.text import _LABELS

__all__ = ["split_corrections", "read_with_corrections"]

_CORRECTION = re.compile(
    r"(?<![\w#])(?:(?:(?<=[,.;:!?\-—–(]\s)|(?<=[,.;:!?\-—–(])|^)actually|sorry|i\s+meant?|correction\s*:|scratch\s+that"
    r"|oops|make\s+that|or\s+rather"
    r"|on\s+second\s+thought|no,?\s+wait|wait,?\s+no)(?![\w])"
)
"""Words that take back what came just before them; "actually" only where a clause starts ("2k/256, actually 16
GPUs"), not as an adverb inside one ("what does EP actually buy us")."""

Reading = TypeVar("Reading", bound=Any)


def split_corrections(text: str) -> list[tuple[str, str]]:
    """``text`` cut at its correction words: (the word, the piece after it), the first piece with an empty word."""
    pieces, lead, start = [], "", 0
    for match in _CORRECTION.finditer(text):
        pieces.append((lead, text[start : match.start()]))
        lead, start = match.group(), match.end()
    pieces.append((lead, text[start:]))
    return pieces


def _is_default_note(note: str) -> bool:
    """A default-length note, which the last piece restates if the length is still not given."""
    return note.startswith("No ") and "length given" in note


def _unsettled(contradictions: list[str], said: dict[str, str]) -> list[str]:
    """The earlier pieces' contradictions that a later piece did not settle by saying the field again ("8 H100 and 16
    H100, sorry, I meant 16")."""
    settled = [f"two {_LABELS[name]}:" for name in said if name in _LABELS]
    return [text for text in contradictions if not any(label in text for label in settled)]


def read_with_corrections(
    text: str, previous: Reading | None, notes: list[str], read: Callable[[str, Reading | None, list[str]], Reading]
) -> Reading:
    """``text`` read with ``read`` (one message over ``previous``, starting from ``notes``), a piece at a time when it
    corrects itself; the pieces' contradictions, notes (but stale default-length ones) and echoed words are kept."""
    pieces = [(lead, piece) for lead, piece in split_corrections(text) if piece.strip(" ,.;:-()")]
    if len(pieces) < 2:
        return read(text, previous, notes)
    reading, earlier = previous, None
    for lead, piece in pieces:
        said = [f"Read '{lead}' as a correction: what follows it replaces what came before."] if lead else []
        current = read(piece, reading, (notes if earlier is None else []) + said)
        if earlier is not None:
            current = current.model_copy(update={
                "notes": list(dict.fromkeys([n for n in earlier.notes if not _is_default_note(n)] + current.notes)),
                "contradictions": list(dict.fromkeys(_unsettled(earlier.contradictions, current.said)
                                                     + current.contradictions)),
                "said": {**earlier.said, **current.said},
                "intent": earlier.intent if current.intent == "plan" else current.intent,
                "about": current.about or earlier.about,
            })
        reading = earlier = current
    return current  # the last piece's reading, over all the ones before it
