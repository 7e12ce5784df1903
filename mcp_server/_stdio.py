"""Stdio: a message the SDK's parser refuses gets an answer instead of silence.

The SDK's stdio transport parses each line with pydantic; a line it cannot parse (nested deeper
than the parser's recursion limit, say a tool argument of 1,000 nested arrays) becomes an
exception on the read stream that the dispatcher drops at debug level: the client waits for an
answer forever. `AnsweringReader` sits between the transport and the server: for such a line
whose request id can still be found, it sends the JSON-RPC error a client expects (-32700 Parse
error, with what was wrong and a hint), and the server reads on.
"""

from __future__ import annotations

import logging
import re
from types import TracebackType
from typing import Any, Self

import anyio
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp_types import PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from skills.core.errors import clip
from skills.core.jsontext import nesting_depth
from skills.core.schema import MAX_ARGUMENT_DEPTH

__all__ = ["AnsweringReader", "request_id_of"]

log = logging.getLogger("mcp_server.stdio")

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_VALUE = re.compile(r'\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def request_id_of(line: str) -> int | str | None:
    """The top-level `"id"` of a JSON-RPC message that may be too deep to parse (None if absent).

    Scans tokens (strings and brackets) tracking the depth, so an `"id"` key inside the params
    is never taken for the request's; stops at the first top-level one.
    """
    depth = 0
    for match in _TOKEN.finditer(line):
        token = match.group()
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth -= 1
        elif depth == 1 and token == '"id"':
            value = _VALUE.match(line, match.end())
            if value is not None:
                raw = value.group(1)
                return int(raw) if raw[0] != '"' else raw[1:-1]
    return None


class AnsweringReader:
    """The transport's read stream, answering the requests its parser refused (see module doc)."""

    def __init__(
        self,
        inner: ReadStream[SessionMessage | Exception],
        write: WriteStream[SessionMessage],
        answered: anyio.Event | None = None,
    ) -> None:
        self._inner = inner
        self._write = write
        self._answered = answered
        """Set when the client's second message arrives: a client sends it once its first
        (initialize, or server/discover) has been answered. The upstreams wait for it."""
        self._seen = 0

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            if isinstance(item, ValidationError):
                reply = _refusal(item)
                if reply is not None:
                    await self._write.send(reply)
                    continue
            if self._answered is not None:
                self._seen += 1
                if self._seen > 1:
                    self._answered.set()
                    self._answered = None
            return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


def _refusal(error: ValidationError) -> SessionMessage | None:
    """The error answer to a line the parser refused, when the line is a request we can name."""
    details = error.errors(include_url=False)
    raw = details[0].get("input") if details else None
    if not details or details[0].get("type") != "json_invalid" or not isinstance(raw, str):
        return None
    request_id = request_id_of(raw)
    if request_id is None:
        return None
    why = clip(str(details[0].get("msg", "invalid JSON")))
    log.info("refused request %r: %s", request_id, why)
    deep = nesting_depth(raw, stop=MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH  # ours to tell, not the parser's words
    hint = (
        f"send flatter data: tool arguments may nest at most {MAX_ARGUMENT_DEPTH} levels" if deep else "send valid JSON"
    )
    data = ErrorData(code=PARSE_ERROR, message=f"{why} ({hint})")
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=data))
