"""Text for people: untrusted input made safe to print on one terminal line, and counts with their nouns.

>>> one_line("a\\nb\\u202ec")
'a\\\\nb\\\\u202ec'
>>> counted(1, "sequence"), counted(2, "GPU"), counted(1200, "token", spec=",")
('1 sequence', '2 GPUs', '1,200 tokens')
>>> counted(3, "microbatch", "microbatches")
'3 microbatches'
>>> f"{counted(1, 'replica')} already {agreeing(1, 'serves', 'serve')}"
'1 replica already serves'
"""

from __future__ import annotations

import unicodedata

__all__ = ["one_line", "counted", "agreeing"]

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str, limit: int = 600) -> str:
    """``text`` as one printable line: control and bidirectional-format characters escaped, cut at ``limit``.

    A name echoed from the input may carry newlines (a forged second line) or U+202E (text shown
    reversed); escaping them keeps every error one honest line.
    """
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    line = "".join(out)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def counted(count: object, noun: str, plural: str | None = None, *, spec: str = "") -> str:
    """``count`` (formatted by ``spec``, e.g. ``","``) and ``noun``, singular for exactly one and ``plural`` (default:
    ``noun`` + "s") otherwise: every count printed beside a noun goes through here, so no output reads "1 sequences"."""
    return f"{count:{spec}} {noun if count == 1 else (plural or noun + 's')}"


def agreeing(count: object, singular: str, plural: str) -> str:
    """The verb that agrees with a subject of ``count`` things (:func:`counted`): ``singular`` for exactly one."""
    return singular if count == 1 else plural
