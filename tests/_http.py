"""`orchestrator serve --transport http` as a real subprocess, and raw HTTP sessions against it.

Shared by the HTTP test modules. The server is the installed console script on a free port;
its stderr is read line by line so that tests can wait for what it says (the address it
serves, a warning, a session reaped) instead of sleeping.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from anyio.streams.text import TextReceiveStream

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
TIMEOUT = 60
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
HANDSHAKE = "2025-11-25"


def initialize(request_id: int = 1) -> dict[str, Any]:
    """A handshake-era `initialize` request: the one request that opens a session."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }


@dataclass
class Served:
    """A running HTTP server: where it listens and what it has said on stderr so far."""

    port: int = 0
    lines: list[str] = field(default_factory=list)
    process: Any = None
    """The server's process (anyio `Process`): a test may kill it."""
    _said: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def heard(self, line: str) -> None:
        self.lines.append(line)
        said, self._said = self._said, anyio.Event()
        said.set()

    def stderr(self) -> str:
        return "\n".join(self.lines)

    async def wait_for(self, pattern: str) -> re.Match[str]:
        """The first stderr line matching `pattern`, waiting for the server to print it."""
        seen = 0
        while True:
            for line in self.lines[seen:]:
                match = re.search(pattern, line)
                if match:
                    return match
            seen = len(self.lines)
            await self._said.wait()


_WITH_FD_LIMIT = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])"
)
"""Run a command with its file-descriptor limit (soft and hard) lowered, as `ulimit -n N` would."""


@asynccontextmanager
async def http_server(
    home: Path, *options: str, env: dict[str, str] | None = None, fd_limit: int | None = None
) -> AsyncIterator[Served]:
    """Start `orchestrator serve --transport http --port 0 ...` and yield it once it serves.

    `fd_limit`: the server's file-descriptor limit (soft and hard), to run out of descriptors
    with a few hundred connections instead of thousands.
    """
    environ = {k: v for k, v in os.environ.items() if k != "ORCHESTRATOR_TOKEN"}
    environ |= {"ORCHESTRATOR_HOME": str(home), **(env or {})}
    command = [str(ORCHESTRATOR), "serve", "--transport", "http", "--port", "0", "--home", str(home), *options]
    if fd_limit is not None:
        command = [sys.executable, "-c", _WITH_FD_LIMIT, str(fd_limit), *command]
    process = await anyio.open_process(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=environ,
    )
    served = Served(process=process)
    announced = anyio.Event()

    async def read_stderr() -> None:
        assert process.stderr is not None
        buffer = ""
        async for chunk in TextReceiveStream(process.stderr):  # keeps draining so the server never blocks
            *complete, buffer = (buffer + chunk).split("\n")
            for line in complete:
                served.heard(line)
                match = re.fullmatch(r"orchestrator: serving http://\S+:(\d+)/mcp", line)
                if match:
                    served.port = int(match[1])
                    announced.set()
        announced.set()  # EOF: the server died before announcing itself
        served.heard("")
        ended.set()

    async def stop() -> None:
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()

    ended = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stderr)
            with anyio.fail_after(TIMEOUT):
                await announced.wait()
            assert served.port, "server did not start:\n" + served.stderr()
            try:
                yield served
            finally:
                # Stop it and read what it says while stopping (its last log lines), then stop reading.
                with anyio.CancelScope(shield=True):
                    await stop()
                    with anyio.move_on_after(10):
                        await ended.wait()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await stop()
            await process.aclose()


def from_address(address: str, **options: Any) -> httpx2.AsyncClient:
    """An HTTP client whose connections come from `address` (any 127.x.y.z is this machine):
    to the server, another client."""
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address=address), **options)


async def open_session(http: httpx2.AsyncClient, url: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    """POST `initialize` (and, when it succeeds, `notifications/initialized`): a session opened and left idle."""
    response = await http.post(url, json=initialize(), headers=MCP_HEADERS | (headers or {}))
    session = response.headers.get("mcp-session-id")
    if response.status_code == 200 and session:
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        sent = await http.post(url, json=done, headers=MCP_HEADERS | _session_headers(session) | (headers or {}))
        assert sent.status_code == 202, sent.text
    return response


async def ping(http: httpx2.AsyncClient, url: str, session: str) -> int:
    """The HTTP status a `ping` in `session` gets: 200 while it lives, 404 once it was closed."""
    request = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    return (await http.post(url, json=request, headers=MCP_HEADERS | _session_headers(session))).status_code


@asynccontextmanager
async def busy(http: httpx2.AsyncClient, url: str, session: str) -> AsyncIterator[None]:
    """Hold the session's GET stream open (as a connected SDK client does): the session is busy inside."""
    headers = {"accept": "text/event-stream"} | _session_headers(session)
    async with http.stream("GET", url, headers=headers) as stream:
        assert stream.status_code == 200, await stream.aread()
        yield


def _session_headers(session: str) -> dict[str, str]:
    return {"mcp-session-id": session, "mcp-protocol-version": HANDSHAKE}
