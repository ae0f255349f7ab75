"""The capability registry: argument checking, structured errors, JSON-able results."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from shardplan.errors import InfeasibleError, InputError, field_error
from shardplan.text import one_line
from shardplan.tools.api.request_args import Args

# --------------------------------------------------------------------------------------------- registry

A = TypeVar("A", bound=Args)


@dataclass(frozen=True)
class Capability:
    """One capability: its name, argument model, description and the function (keyword arguments)."""

    name: str
    args: type[Args]
    description: str
    func: Callable[..., Any]


def parse_args(model: type[A], values: dict[str, Any]) -> A:
    """``values`` checked by ``model``; a bad value raises InputError naming the field."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise field_error(exc) from None


def capability(args_model: type[A]) -> Callable[[Callable[[A], Any]], Callable[..., Any]]:
    """Make ``func(args)`` a capability called with keyword arguments that ``args_model`` checks; the wrapper
    carries its :class:`Capability` as ``capability`` for the table the wrappers read."""

    def wrap(func: Callable[[A], Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def call(**kwargs: Any) -> Any:
            return func(parse_args(args_model, kwargs))

        params = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=field.annotation,
                default=inspect.Parameter.empty if field.is_required() else field.default,
            )
            for name, field in args_model.model_fields.items()
        ]
        call.__signature__ = inspect.Signature(params, return_annotation=inspect.signature(func).return_annotation)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in params}
        description = inspect.cleandoc(func.__doc__ or args_model.__doc__ or func.__name__)
        call.capability = Capability(func.__name__, args_model, description, call)  # type: ignore[attr-defined]
        return call

    return wrap


def error_dict(exc: Exception) -> dict[str, Any]:
    """A structured error an LLM or another agent can act on: ``error``, ``message``, ``field``, ``fix``.

    Every text is one line (control and bidirectional characters from the input escaped).
    """
    if isinstance(exc, InputError):
        data: dict[str, Any] = exc.to_dict()
    elif isinstance(exc, ValidationError):
        data = field_error(exc).to_dict()
    elif isinstance(exc, InfeasibleError):
        data = {"error": "InfeasibleError", "message": str(exc), "field": None, "fix": None, "min_gpus": exc.min_gpus,
                "hints": [hint.model_dump(mode="json") for hint in exc.hints]}
    else:
        data = {"error": type(exc).__name__, "message": str(exc), "field": None, "fix": None}
    return {k: one_line(v, 2000) if isinstance(v, str) else v for k, v in data.items()}


def dump(result: Any) -> Any:
    """A capability's result as JSON-able data."""
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json", exclude_none=False)
    if isinstance(result, list):
        return [dump(item) for item in result]
    return json.loads(json.dumps(result, default=str))
