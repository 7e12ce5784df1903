"""The HTTP edge under attack: half-open connections (slowloris), slow bodies, running out of
file descriptors, a flood of invalid requests, and who may say X-Forwarded-For.

Every server is `orchestrator serve --transport http` in a subprocess; attackers are raw
sockets (to send exactly half a request), well-behaved clients the SDK's own `Client`. Another
source address on this machine (127.0.0.x) is, to the server, another client. Each wait is for
an event (a socket closed by the server, a log line), bounded by fail_after.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests._http import MCP_HEADERS, TIMEOUT, Served, from_address, http_server, initialize, open_session, ping

OTHER = "127.0.0.2"
HALF_A_REQUEST = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
SLOW_BODY = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n" + b'{"jsonrpc": '
)


async def _connects(url: str, *, address: str | None = None) -> None:
    """A real MCP client (from `address`) initializes and calls a tool."""
    http = from_address(address) if address else create_mcp_http_client()
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        result = await client.call_tool("text-stats", {"text": "still served"})
    assert result.structured_content is not None and result.structured_content["words"] == 2


async def _sending(port: int, data: bytes, address: str = "127.0.0.1") -> SocketStream:
    """A connection from `address` that sent `data` (half a request) and then nothing more."""
    sock = await anyio.connect_tcp("127.0.0.1", port, local_host=address)
    await sock.send(data)
    return sock


async def _closed_by_server(sock: SocketStream) -> bytes:
    """Wait until the server closes `sock`; what it said before."""
    said = b""
    try:
        while True:
            said += await sock.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        return said
    finally:
        await sock.aclose()


def _edge_lines(served: Served) -> list[str]:
    return [line for line in served.lines if "HTTP edge" in line]


def _counted(lines: list[str], what: str) -> int:
    """The sum of `N <what>` over the edge's log lines."""
    return sum(int(n) for line in lines for n in re.findall(rf"(\d+) {re.escape(what)}", line))


async def test_half_open_connections_cannot_lock_a_client_out_and_are_cut_after_the_header_timeout(home: Path) -> None:
    options = ("--max-connections-per-client", "8", "--header-timeout", "2")
    async with http_server(home, *options) as served:
        with anyio.fail_after(TIMEOUT):
            attack = [await _sending(served.port, HALF_A_REQUEST) for _ in range(40)]  # 5x the cap
            await _connects(served.url)  # from the attacker's own address: the oldest half-open make room
            await _connects(served.url, address=OTHER)
            for sock in attack:  # each is closed: to make room, or at its header deadline
                assert await _closed_by_server(sock) == b""
            for _ in range(30):
                garbage = await _sending(served.port, b"NOT HTTP AT ALL\r\n\r\n")
                assert (await _closed_by_server(garbage)).startswith(b"HTTP/1.1 400")
    said = served.stderr()
    assert "HTTP limits: " in said and "8 per client address; request headers within 2 s" in said
    lines = _edge_lines(served)
    assert len(lines) <= 4, lines  # one line at the first event, then one per 10 s: never a line each
    assert _counted(lines, "connection(s) closed") == 40
    assert _counted(lines, "request(s) answered 400") == 30
    assert "127.0.0.1 x" in lines[-1]
    assert "Invalid HTTP request" not in said


async def test_with_few_file_descriptors_a_flood_from_many_addresses_locks_no_one_out(home: Path) -> None:
    async with http_server(home, "--header-timeout", "5", fd_limit=256) as served:
        with anyio.fail_after(TIMEOUT):
            # 400 connections, 20 from each of 20 addresses: past every file descriptor the server has.
            attack = [await _sending(served.port, HALF_A_REQUEST, f"127.0.0.{10 + i % 20}") for i in range(400)]
            await _connects(served.url, address=OTHER)
            for sock in attack:
                await _closed_by_server(sock)
    said = served.stderr()
    limits = next(line for line in served.lines if "HTTP limits: " in line)
    assert "256 file descriptors" in limits
    assert int(re.findall(r"([\d,]+) connections", limits)[0].replace(",", "")) < 256
    assert "out of system resource" not in said and "could not be accepted" not in said
    lines = _edge_lines(served)
    assert len(lines) <= 4, lines
    assert _counted(lines, "connection(s) closed") == 400


async def test_past_the_per_client_cap_of_busy_connections_a_client_gets_503_and_slow_bodies_are_cut(
    home: Path,
) -> None:
    async with http_server(home, "--max-connections-per-client", "3", "--body-timeout", "2") as served:
        with anyio.fail_after(TIMEOUT):
            slow = [await _sending(served.port, SLOW_BODY) for _ in range(3)]  # headers in, body trickling
            async with httpx2.AsyncClient() as fourth:
                refused = await fourth.post(served.url, json=initialize(), headers=MCP_HEADERS)
            assert refused.status_code == 503
            assert int(refused.headers["retry-after"]) > 0
            assert "Too many open connections from your address (limit 3" in refused.json()["error"]["message"]
            await _connects(served.url, address=OTHER)  # the cap is per address
            for sock in slow:  # cut at the body deadline, unanswered
                assert await _closed_by_server(sock) == b""
            await _connects(served.url)  # and the address is served again
    lines = _edge_lines(served)
    assert _counted(lines, "connection(s) closed: request body not received within 2 s") == 3
    assert _counted(lines, "connection(s) refused over the limit of 3 connections per client address") == 1
    assert "Exception in ASGI application" not in served.stderr()


@pytest.mark.parametrize(
    ("options", "alive"),
    [
        ((), [404, 200]),  # X-Forwarded-For ignored: both sessions are 127.0.0.1's, the second replaced the first
        (("--forwarded-allow-ips", "127.0.0.1"), [200, 200]),  # a named proxy: two clients
    ],
)
async def test_x_forwarded_for_is_believed_only_from_a_proxy_named_with_forwarded_allow_ips(
    home: Path, options: tuple[str, ...], alive: list[int]
) -> None:
    async with http_server(home, "--max-sessions-per-client", "1", *options) as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient() as proxy:
                sessions: list[str] = []
                for client in ("203.0.113.7", "203.0.113.8"):
                    opened = await open_session(proxy, url, {"x-forwarded-for": client})
                    assert opened.status_code == 200
                    sessions.append(opened.headers["mcp-session-id"])
                assert [await ping(proxy, url, session) for session in sessions] == alive
