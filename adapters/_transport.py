"""Transports to an upstream, watched for their end.

The SDK's client does not say when its connection ends: a dead stdio child (or an HTTP
server gone away) only makes the next request fail with "Connection closed". The read
stream is wrapped so that its end of file is reported the moment it happens, which is what
lets the supervisor restart an upstream without waiting for a call to fail first. The wrapper
forwards `last_context` (the sender's contextvars on streamable HTTP), so requests from the
upstream still run in the context of the call that caused them.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, TextIO

import anyio
import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from .config import ServerConfig

__all__ = ["open_transport"]

Streams = tuple[Any, Any]
"""(read stream of `SessionMessage | Exception`, write stream of `SessionMessage`), as the SDK's transports yield."""

_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults: a response stream may stay open


class _EndWatch:
    """A read stream that calls `on_end` when the upstream's stream ends (or breaks)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> contextvars.Context | None:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
            return item
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _EndWatch:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _inner(config: ServerConfig, stack: AsyncExitStack, errlog: TextIO | None) -> AbstractAsyncContextManager[Streams]:
    if config.transport == "stdio":
        assert config.command is not None
        params = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            env=dict(config.env) or None,  # merged over the SDK's minimal safe set; nothing else is inherited
            cwd=config.cwd,
        )
        return stdio_client(params, errlog=errlog) if errlog is not None else stdio_client(params)
    assert config.url is not None
    if config.transport == "sse":
        return sse_client(config.url, headers=dict(config.headers) or None)
    http = httpx2.AsyncClient(headers=dict(config.headers), timeout=_HTTP_TIMEOUT)
    stack.push_async_callback(http.aclose)
    return streamable_http_client(config.url, http_client=http)


@asynccontextmanager
async def open_transport(
    config: ServerConfig, on_end: Callable[[], None], errlog: TextIO | None = None
) -> AsyncGenerator[Streams, None]:
    """The transport `config` asks for; `on_end` is called when the upstream's stream ends."""
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(_inner(config, stack, errlog))
        yield _EndWatch(read, on_end), write
