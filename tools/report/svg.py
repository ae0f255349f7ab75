"""Small building blocks of the report's inline SVG: escaping, number formats, axis ticks, node colours.

Everything here returns text; nothing reaches the network or the file system.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable

__all__ = [
    "esc", "fmt_ms", "fmt_num", "nice_ticks", "kind_colour", "kind_fill", "category_of", "KIND_ORDER",
    "CATEGORY_COLOURS", "svg_open", "text", "text_width", "legend_items",
]

# Saturated colour per node kind, used for timeline bars and DAG node outlines: compute in blues, greens
# and ambers, communication in reds and oranges, KV state in purples, step boundaries near black.
_KIND_COLOURS: dict[str, str] = {
    "embedding": "#0284c7", "norm": "#64748b", "linear": "#2563eb", "attention": "#16a34a",
    "expert": "#d97706", "router": "#a16207", "sampler": "#4f46e5", "elementwise": "#94a3b8",
    "all_reduce": "#dc2626", "all_gather": "#ea580c", "reduce_scatter": "#db2777", "all_to_all": "#991b1b",
    "send": "#f59e0b", "recv": "#fbbf24", "kv_transfer": "#7c3aed",
    "kv_read": "#a855f7", "kv_write": "#9333ea", "step_boundary": "#111827",
}
KIND_ORDER: tuple[str, ...] = tuple(_KIND_COLOURS)
"""Node kinds in legend order."""

_CATEGORY: dict[str, str] = {
    **dict.fromkeys(("embedding", "norm", "linear", "attention", "expert", "router", "sampler", "elementwise"),
                    "compute"),
    **dict.fromkeys(("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "recv", "kv_transfer"),
                    "communication"),
    **dict.fromkeys(("kv_read", "kv_write", "step_boundary"), "state"),
}
CATEGORY_COLOURS: dict[str, str] = {"compute": "#2563eb", "communication": "#dc2626", "state": "#9333ea",
                                    "idle": "#e2e8f0", "hidden": "#f59e0b"}
"""Colours of the time-breakdown categories."""


def esc(value: object) -> str:
    """``value`` as text safe inside HTML and SVG, attribute values included."""
    return html.escape(str(value), quote=True)


def category_of(kind: str) -> str:
    """compute, communication or state."""
    return _CATEGORY.get(kind, "compute")


def kind_colour(kind: str) -> str:
    """The saturated colour of a node kind."""
    return _KIND_COLOURS.get(kind, "#334155")


def kind_fill(kind: str, strength: float = 0.18) -> str:
    """A light tint of the kind's colour, for box backgrounds."""
    base = kind_colour(kind).lstrip("#")
    rgb = [int(base[i:i + 2], 16) for i in (0, 2, 4)]
    tint = [round(255 - (255 - c) * strength) for c in rgb]
    return "#" + "".join(f"{c:02x}" for c in tint)


def fmt_ms(ms: float) -> str:
    """A duration for people: µs below a millisecond, ms below ten seconds, else s.

    >>> fmt_ms(0.0123), fmt_ms(4.5678), fmt_ms(12345)
    ('12.3 µs', '4.57 ms', '12.3 s')
    """
    if ms < 1:
        return f"{ms * 1e3:.3g} µs"
    if ms < 10_000:
        return f"{ms:.3g} ms" if ms < 100 else f"{ms:,.0f} ms"
    return f"{ms / 1e3:.3g} s"


def fmt_num(value: float) -> str:
    """A quantity with thousands separators and a sensible number of digits.

    >>> fmt_num(1234.5), fmt_num(12.345), fmt_num(0.5)
    ('1,234', '12.3', '0.5')
    """
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def nice_ticks(high: float, target: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``high``, about ``target`` of them.

    >>> nice_ticks(9.3)
    [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    """
    if high <= 0:
        return [0.0, 1.0]
    raw = high / max(target - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    count = math.ceil(high / step - 1e-9)
    return [float(round(i * step, 10)) for i in range(count + 1)]


def svg_open(width: float, height: float, css_class: str, label: str) -> str:
    """An ``<svg>`` start tag with a viewBox, a class and an accessible label."""
    return (f'<svg class="{esc(css_class)}" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(label)}">')


def text(x: float, y: float, content: str, *, size: int = 11, anchor: str = "start", weight: str = "normal",
         fill: str = "#1e293b", css_class: str = "") -> str:
    """An SVG ``<text>`` element with escaped content."""
    cls = f' class="{esc(css_class)}"' if css_class else ""
    bold = f' font-weight="{weight}"' if weight != "normal" else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{bold}{cls}>'
            f"{esc(content)}</text>")


def text_width(content: str, size: float) -> float:
    """An upper bound on the width of ``content`` drawn at ``size`` px in the report's sans-serif font, for
    laying out labels without a browser: 0.7 em per character, wider than the digits, capitals and
    punctuation of the common UI fonts (DejaVu Sans digits are 0.64 em, Roboto's 0.56 em).

    >>> text_width("75.0 / 141 GB", 10)
    91.0
    """
    return round(len(content) * 0.7 * size, 1)


def legend_items(kinds: Iterable[str]) -> str:
    """HTML legend chips for the given node kinds, in legend order."""
    present = [kind for kind in KIND_ORDER if kind in set(kinds)]
    return "".join(f'<span class="chip" style="border-color:{kind_colour(k)};background:{kind_fill(k)}">'
                   f'<i style="background:{kind_colour(k)}"></i>{esc(k)}</span>' for k in present)
