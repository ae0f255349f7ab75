"""Reading the parameters of a short form such as ``lognormal:mean=2048,cv=0.8`` or ``uniform:256,4096``, strictly.

The forms are typed by people and written by planning models, so every slip is refused rather than guessed at: a
name the form does not take (``cw=0.8``), a name given twice (``cv=3,cv=4``), one number too many
(``fixed:5,6``), a fraction where a count is meant (``closed:2.7``), a number that is not finite, or a required
parameter left out. Each is one :class:`~shardplan.errors.InputError` naming the field, the part and the fix.

>>> read_parameters("mean=2048,0.8", form="lognormal", names=("mean", "cv"), field="isl_dist", fix="see --help")
{'mean': 2048.0, 'cv': 0.8}
>>> read_parameters("5,6", form="fixed", names=("tokens",), field="isl_dist", fix="write fixed:N")
Traceback (most recent call last):
...
shardplan.errors.InputError: isl_dist: '6' is one value too many: fixed takes tokens; write fixed:N
"""

from __future__ import annotations

import math
from collections.abc import Collection

from shardplan.errors import InputError
from shardplan.text import one_line

__all__ = ["read_parameters"]


def read_parameters(text: str, *, form: str, names: tuple[str, ...], field: str, fix: str,
                    whole: Collection[str] = (), required: Collection[str] = ()) -> dict[str, float | int]:
    """The parameters in ``text`` (``name=value`` or, in the order of ``names``, bare values; empty parts such
    as a trailing comma are skipped) as numbers, the ``whole`` ones as ints.

    Raises:
        InputError: an unknown or repeated name, a value too many, a value that is not a finite ASCII number,
            a fraction for a ``whole`` parameter, or a ``required`` one missing; naming ``field``.
    """
    values: dict[str, float | int] = {}
    for position, part in enumerate(p.strip() for p in text.split(",")):
        if not part:
            continue
        shown = one_line(part, 60)
        named, _, raw = part.rpartition("=")
        name = named.strip().lower()
        if not named:
            if position >= len(names):
                takes = ", ".join(names) if names else "no parameters"
                raise InputError(f"{field}: '{shown}' is one value too many: {form} takes {takes}", field=field,
                                 fix=fix)
            name = names[position]
        elif name not in names:
            takes = ", ".join(names) if names else "no parameters"
            raise InputError(f"{field}: '{one_line(named, 40)}' is not a parameter of {form} (it takes {takes})",
                             field=field, fix=fix)
        if name in values:
            raise InputError(f"{field}: {form} is given {name} twice", field=field, fix=fix)
        values[name] = _number(raw.strip(), shown, name in whole, field, fix)
    missing = [name for name in names if name in required and name not in values]
    if missing:
        raise InputError(f"{field}: {form} needs {' and '.join(missing)}", field=field, fix=fix)
    return values


def _number(raw: str, shown: str, whole: bool, field: str, fix: str) -> float | int:
    """``raw`` as a finite number (an int when ``whole``); ASCII only, as every other number shardplan reads."""
    try:
        if not raw.isascii():
            raise ValueError
        number = float(raw)
    except ValueError:
        raise InputError(f"{field}: '{shown}' is not a number", field=field, fix=fix) from None
    if not math.isfinite(number):
        raise InputError(f"{field}: '{shown}' is not a finite number", field=field, fix=fix)
    if not whole:
        return number
    if not number.is_integer():
        raise InputError(f"{field}: '{shown}' is not a whole number", field=field, fix=fix)
    return int(number)
