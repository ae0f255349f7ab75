"""The exception tree of shardplan.

Three kinds of failure are kept apart, because callers react to them differently:

* :class:`InputError`: the input is malformed (unknown model, bad key, a degree that does not divide).
  The CLI prints it as one line and exits 2; tools return it as a structured error.
* :class:`InfeasibleError`: the input is well formed but no answer exists (the model does not fit,
  no strategy meets the targets). Planning reports these as a plan marked infeasible, not a crash.
* Anything else is a bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shardplan.text import one_line

if TYPE_CHECKING:  # only the type: a pydantic error is read through its public methods
    from pydantic import ValidationError

__all__ = ["ShardplanError", "InputError", "StrategyError", "InfeasibleError", "DeprecatedFieldWarning", "field_error"]


class ShardplanError(Exception):
    """Base class of every error shardplan raises on purpose."""


class InputError(ShardplanError, ValueError):
    """Malformed input. ``field`` names what was wrong, ``fix`` says how to mend it."""

    def __init__(self, message: str, *, field: str | None = None, fix: str | None = None) -> None:
        # Input echoed into a message may hold newlines or bidi controls: the message stays one honest line.
        # Cut well under the 2,000 characters of the printed line, so the fix after it is never cut off.
        message = one_line(message, 1000)
        fix = one_line(fix, 1000) if fix else fix
        self.field = field
        self.fix = fix
        text = message
        if fix:
            text = f"{message}; {fix}"
        super().__init__(text)

    def to_dict(self) -> dict[str, str | None]:
        """The error as a JSON-able object, the shape tools and the MCP server return."""
        return {"error": type(self).__name__, "message": str(self), "field": self.field, "fix": self.fix}


class StrategyError(InputError):
    """A strategy that cannot be built for this model and cluster (a degree that does not divide, ...)."""


class InfeasibleError(ShardplanError):
    """A well-formed request with no answer: the model does not fit, or no strategy is possible.

    ``min_gpus`` is the fewest GPUs that would fit; ``hints`` are the single changes to the request
    that would make it fit, each checked and with its figures (``FitHint`` contracts, which this ground
    module does not import).
    """

    def __init__(self, message: str, *, min_gpus: int | None = None, hints: Sequence[Any] = ()) -> None:
        self.min_gpus = min_gpus
        self.hints = list(hints)
        super().__init__(message)


class DeprecatedFieldWarning(DeprecationWarning):
    """An input file uses a field's old name; it is still read, and the message names the new one."""


def field_error(exc: ValidationError) -> InputError:
    """A pydantic ValidationError as one InputError naming the first bad field (up to three listed)."""
    errors = exc.errors()
    places = [".".join(str(p) for p in e["loc"]) or "arguments" for e in errors]
    text = "; ".join(f"{one_line(where, 80)}: {one_line(e['msg'], 200)}"
                     for where, e in zip(places, errors[:3], strict=False))
    if len(errors) > 3:
        text += f" (and {len(errors) - 3} more)"
    return InputError(text, field=places[0], fix=f"correct '{one_line(places[0], 80)}' and call again")
