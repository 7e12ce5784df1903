"""What an upstream's outcomes are reported as: a one-line reason for a failed connection, a
relayable result, the error envelope of a failed call.

Everything an upstream says is made plain text first (`skills.core.errors.plain_text`): no
terminal escapes, no rich traceback boxes, the first meaningful line and where it happened.
"""

from __future__ import annotations

from typing import cast

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, TextContent

from skills.core.errors import plain_text

from .errors import UpstreamToolError

__all__ = ["describe_error", "first_line", "relayable", "tool_failure"]

_PROTOCOL_META = "io.modelcontextprotocol/"  # per-hop stamps (serverInfo) that must not be relayed


def relayable(result: CallToolResult) -> CallToolResult:
    """The upstream's result without its per-hop protocol stamps (our server adds its own).

    Changed in place, not copied: the result was parsed for this one call and nothing else holds it.
    """
    meta = result.meta
    if meta and any(k.startswith(_PROTOCOL_META) for k in meta):
        result.meta = {k: v for k, v in meta.items() if not k.startswith(_PROTOCOL_META)} or None
    return result


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", exc)
        return [leaf for sub in group.exceptions for leaf in _leaves(sub)]
    return [exc]


def first_line(exc: BaseException) -> str:
    """The first meaningful line of an exception's text (plain), or its class name."""
    text = plain_text(str(exc))
    return text.lines[0] if text.lines else type(exc).__name__


def tool_failure(server: str, tool: str, result: CallToolResult) -> UpstreamToolError:
    """An upstream's `isError` result as the envelope's error: its first text item (made plain)
    is the message, every other item follows the envelope."""
    first = next((i for i, item in enumerate(result.content) if isinstance(item, TextContent)), None)
    said = plain_text(cast(TextContent, result.content[first]).text) if first is not None else None
    rest = [item for i, item in enumerate(result.content) if i != first]
    message = said.message if said is not None and said.lines else f"'{tool}' reported an error without a message"
    return UpstreamToolError(
        server,
        message,
        where=said.where if said is not None else "",
        content=rest,
        hint=f"reported by the tool '{tool}' of the upstream server '{server}': check the arguments, "
        "or that server's own log",
    )


def describe_error(exc: Exception) -> str:
    """A one-line reason for a failed or ended connection, from whatever the SDK raised."""
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, FileNotFoundError):
            return f"command not found: {leaf.filename or leaf}"
        if isinstance(leaf, PermissionError):
            return f"cannot run the command: {leaf}"
    for leaf in leaves:
        if isinstance(leaf, httpx2.TransportError):
            return f"cannot reach the server: {type(leaf).__name__}: {first_line(leaf)}"
    for leaf in leaves:
        if isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED:
            return "the server closed the connection during initialization"
    leaf = leaves[-1] if leaves else exc
    name = type(leaf).__name__
    return f"{name}: {first_line(leaf)}" if str(leaf).strip() else name
