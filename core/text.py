"""Text echoed from untrusted input, made safe to print on one terminal line.

>>> one_line("a\\nb\\u202ec")
'a\\\\nb\\\\u202ec'
"""

from __future__ import annotations

import unicodedata

__all__ = ["one_line"]

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
