"""What an upstream's outcomes are reported as: a one-line reason for a failed connection, a relayable result."""

from __future__ import annotations

from typing import cast

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult

__all__ = ["describe_error", "first_line", "relayable"]

_PROTOCOL_META = "io.modelcontextprotocol/"  # per-hop stamps (serverInfo) that must not be relayed


def relayable(result: CallToolResult) -> CallToolResult:
    """The upstream's result without its per-hop protocol stamps (our server adds its own)."""
    meta = result.meta
    if not meta or not any(k.startswith(_PROTOCOL_META) for k in meta):
        return result
    kept = {k: v for k, v in meta.items() if not k.startswith(_PROTOCOL_META)}
    return result.model_copy(update={"meta": kept or None})


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", exc)
        return [leaf for sub in group.exceptions for leaf in _leaves(sub)]
    return [exc]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


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
