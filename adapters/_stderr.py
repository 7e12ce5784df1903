"""The stderr of a stdio upstream: logged line by line, its last lines kept for error messages.

A server that fails to start (a missing package, a bad argument) explains itself on stderr
and then just closes the pipe; the SDK only says "Connection closed". Reading the server's
stderr through a pipe of our own turns that into "... exited: <its last lines>". What a
server writes there is made plain first: many colour their logs and draw tracebacks in boxes
(rich), which would reach a client's error message as escape codes and box drawing; the tail
keeps the meaningful lines and the place a traceback named.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager, suppress
from typing import TextIO

import anyio

from skills.core.errors import plain, plain_text

__all__ = ["StderrTail"]


class StderrTail:
    """The last lines a server wrote to stderr (bounded), each also sent to `log` at INFO."""

    def __init__(self, log: logging.Logger, keep: int = 60) -> None:
        self.log = log
        self.lines: deque[str] = deque(maxlen=keep)
        self._partial = b""
        self._fd: int | None = None

    def tail(self, max_chars: int = 1200) -> str:
        """The last lines read up to now (what the server printed before it died), as one plain
        line: traceback frames and boxes left out, the place they named kept at the end."""
        self._drain()
        text = plain_text("\n".join(self.lines)).joined()
        return text if len(text) <= max_chars else "..." + text[-max_chars:]

    @asynccontextmanager
    async def capture(self) -> AsyncGenerator[TextIO | None, None]:
        """A file to pass as the child's stderr while inside (None where pipes cannot be polled)."""
        if sys.platform == "win32":  # no readiness polling of pipes on the Proactor loop
            yield None
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self._fd = read_fd
        writer = os.fdopen(write_fd, "w")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, read_fd)
                try:
                    yield writer
                finally:
                    tg.cancel_scope.cancel()
        finally:
            writer.close()
            self._drain()
            self._fd = None
            os.close(read_fd)

    async def _pump(self, fd: int) -> None:
        while True:
            await anyio.wait_readable(fd)
            if not self._drain():
                return

    def _drain(self) -> bool:
        """Read what is available now; False at end of file."""
        fd = self._fd
        if fd is None:
            return False
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                self._flush()
                return False
            self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for raw in lines:
            self._line(raw)
        if len(self._partial) > 8192:  # a server that never ends its line
            self._flush()

    def _flush(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = b""

    def _line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        self.lines.append(line)
        shown = plain(line).rstrip()
        if shown.strip():
            with suppress(ValueError):  # logging into a closed handler at interpreter exit
                self.log.info("%s", shown)
