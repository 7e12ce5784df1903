"""Fast reads of the MCP SDK's tool `Context` on the per-call path.

`Context` is a pydantic model whose request state lives in private attributes; each read of
`context.request_context` (or `request_state`, `input_responses`) goes through pydantic's
`__getattr__`, which costs ~5-10 us here: a tool call read them about a dozen times, a fifth of
the server's own work per call. These helpers read the private values directly (pydantic keeps
them in `__pydantic_private__`), and fall back to plain attribute access for any other object
that carries a `request_context` (the task methods pass a `SimpleNamespace`).
"""

from __future__ import annotations

from typing import Any, cast

__all__ = ["input_round_of", "request_of"]


def _private(context: Any) -> dict[str, Any] | None:
    found = getattr(context, "__pydantic_private__", None)
    return cast("dict[str, Any]", found) if isinstance(found, dict) else None


def request_of(context: Any) -> Any:
    """The SDK request context of `context` (a tool's `Context`, or anything with a
    `request_context` attribute), or None outside a request."""
    if context is None:
        return None
    try:  # the SDK's Context: its private value (this runs several times per call)
        return context.__pydantic_private__["_request_context"]
    except (AttributeError, KeyError, TypeError):
        pass
    try:
        return getattr(context, "request_context", None)
    except ValueError:  # the SDK's Context outside a request
        return None


def input_round_of(context: Any) -> tuple[str | None, Any]:
    """`(request_state, input_responses)` of a 2026-07-28 retry round; `(None, None)` on a first round."""
    private = _private(context)
    if private is not None and "_input_params" in private:
        params = private["_input_params"]
        if params is None:
            return None, None
        return params.request_state, params.input_responses
    return getattr(context, "request_state", None), getattr(context, "input_responses", None)
