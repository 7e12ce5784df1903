"""The limits every pipeline expression runs under (private to pipelines.language.sandbox): sizes, a per-render
deadline, and the size measure that checks values against them. Kept apart from the Jinja2 policy
so the limits read in one place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar, Token
from functools import partial
from time import monotonic
from typing import Any, cast

from jinja2 import StrictUndefined, Undefined
from jinja2.utils import missing

from ..errors import ExpressionError

TIME_LIMIT = 2.0
"""Seconds one render may take before it is stopped."""
MAX_SIZE = 10_000_000
"""Largest text a render may produce, and largest value (as approximate JSON size) it may build."""
MAX_ITEMS = 1_000_000
"""Largest list an operator may build."""
MAX_RANGE = 100_000
"""Largest `range()`."""
MAX_INT_BITS = 14_000
"""Largest integer (in bits) that `*` and `**` may produce: about 4,200 digits, so it still prints."""
MAX_FILES = 10_000
"""Most paths `list_files` returns."""


class UndefinedUse(ExpressionError):
    """A use of a missing variable, key or attribute; `expressions` rewrites it with scope in hand."""

    def __init__(self, name: Any, obj: Any, message: str = "") -> None:
        super().__init__(message or f"undefined: {name!r}")
        self.name = name
        self.obj = obj


class Missing(StrictUndefined):
    """A missing name: fine for `is defined` and `default`, an `UndefinedUse` error on any other use."""

    __slots__ = ()

    def __init__(self, hint: str | None = None, obj: Any = missing, name: str | None = None, exc: Any = None) -> None:
        super().__init__(hint, obj, name, cast(Any, partial(UndefinedUse, name, obj)))


_deadline: ContextVar[float] = ContextVar("pipeline_expression_deadline", default=float("inf"))


def forbidden(what: str, hint: str = "") -> ExpressionError:
    """The error for anything the sandbox refuses."""
    return ExpressionError(f"not allowed in a pipeline expression: {what}", hint=hint)


def too_large(what: str) -> ExpressionError:
    """The error for an operation that would exceed a size limit."""
    return ExpressionError(f"{what} is too large for a pipeline expression", hint="work on smaller data")


def start_clock() -> Token[float] | None:
    """Start the deadline of one render unless an outer render already runs one."""
    if _deadline.get() != float("inf"):
        return None
    return _deadline.set(monotonic() + TIME_LIMIT)


def stop_clock(token: Token[float] | None) -> None:
    """End the deadline started by `start_clock`."""
    if token is not None:
        _deadline.reset(token)


def check_deadline() -> None:
    """Stop a render that has run past its deadline."""
    if monotonic() > _deadline.get():
        raise ExpressionError(
            f"expression took too long (more than {TIME_LIMIT:g} s)", hint="loop over fewer items or simplify it"
        )


def measure(value: Any, budget: int = MAX_SIZE, indent: int = 0) -> int:
    """Approximate JSON size of `value`, counting shared references every time they appear.

    A list literal can hold the same big list ten times, and nesting multiplies that without
    allocating anything, so turning such a value into text is where the bomb goes off. Stops
    counting once past `budget`, so its cost is bounded too. `indent` counts JSON indentation.
    A missing name, key or attribute anywhere inside raises its `UndefinedUse` (see `defined`).
    """
    return _walk(value, budget, indent)[0]


def _walk(value: Any, budget: int, indent: int) -> tuple[int, bool]:
    """(`measure`, whether a plain `Undefined` sits inside); a `Missing` inside raises its error."""
    total, plain = 0, False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        total += indent * depth
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, Mapping):
            mapping = cast(Mapping[Any, Any], item)
            total += 2
            stack.extend((child, depth + 1) for child in mapping.keys())
            stack.extend((child, depth + 1) for child in mapping.values())
        elif isinstance(item, list | tuple | set | frozenset):
            total += 2
            stack.extend((child, depth + 1) for child in cast(Sequence[Any], item))
        else:
            if isinstance(item, Undefined):
                if isinstance(item, Missing):
                    item._fail_with_undefined_error()  # pyright: ignore[reportPrivateUsage]  # jinja2's only way to raise it
                plain = True
                total += 3  # written as null
            total += 1
        if total > budget:
            return total, plain
    return total, plain


def defined(value: Any, what: str = "the value") -> Any:
    """`value` fit to leave an expression: within `MAX_SIZE`, and no Jinja `Undefined` inside.

    A filter such as `map(attribute=...)` or `select` puts an undefined value *inside* a list or
    mapping, where `native` (which looks at the top only) does not see it; let through, it would
    reach the run's checkpoints and its result as an object JSON cannot hold. A missing name,
    key or attribute is the expression's error (as at the top); a plain undefined (`x if false`
    inside a list) is null (as at the top).
    """
    size, plain = _walk(value, MAX_SIZE, 0)
    if size > MAX_SIZE:
        raise too_large(what)
    return _nulled(value) if plain else value


def _nulled(value: Any) -> Any:
    """A copy of `value` with each (plain) `Undefined` inside replaced by None."""
    if isinstance(value, Undefined):
        return None
    if isinstance(value, Mapping):
        return {k: _nulled(v) for k, v in cast(Mapping[Any, Any], value).items()}
    if isinstance(value, list | tuple):
        return [_nulled(v) for v in cast(Sequence[Any], value)]
    return value


def check_size(value: Any, what: str = "the value") -> None:
    """Refuse a value whose text would exceed `MAX_SIZE`."""
    if measure(value) > MAX_SIZE:
        raise too_large(what)
