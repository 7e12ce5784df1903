"""The HTTP edge: what a connection may cost before it is a request the app sees.

uvicorn accepts every connection the kernel hands it and waits for request headers for as long
as the client likes. A client that opens connections and sends half a request (slowloris)
holds each of them forever; once the process runs out of file descriptors nobody else gets in,
and asyncio logs every failed accept() with a traceback (megabytes a second). The edge lives in
the protocol uvicorn runs for each connection (`EdgeProtocol`: uvicorn's h11 protocol with
deadlines and admission):

- deadlines: a request's headers must be complete within `header_timeout` of the connection
  opening (or of the previous response, on a kept-alive connection), its body within
  `body_timeout` of its headers; otherwise the connection is closed;
- caps: open connections in all and per client address (a trusted proxy's connections count
  toward the total only). A connection over a cap first closes the oldest connection of the
  same client (over the total: of anyone) that has not sent a complete request yet, so
  half-open connections cannot lock out a client that sends its request at once. Only when
  every such connection is serving a request is the new one answered 503 with Retry-After, at
  once, without reading its request;
- the caps are sized from the file-descriptor limit (`_limits`), so accept() does not run out;
  what still goes wrong at the edge is counted and logged as one line per interval
  (`EdgeReport`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._limits import EdgeCaps

__all__ = ["Edge", "EdgeReport", "TrustedProxies", "client_key", "edge_protocol"]

log = logging.getLogger("mcp_server.transports")

RETRY_AFTER = 5
"""Seconds a refused client is told to wait (a half-open connection lives at most `header_timeout`)."""
LINGER = 2.0
"""Seconds a refused connection stays open after its 503, so that the client reads the answer
(closing at once with its request unread would reset the connection and lose the 503)."""
REPORT_INTERVAL = 10.0
"""Seconds over which edge events are summed into one log line."""


def client_key(host: str) -> str:
    """The client an address belongs to: itself, but an IPv6 /64 is one client.

    IPv6 clients usually own a whole /64, so an address in it would be a free new identity;
    `::ffff:a.b.c.d` is the IPv4 client a.b.c.d. A name that is no address (a unix socket path,
    a test client's name) is taken as given.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class TrustedProxies:
    """The peers whose `X-Forwarded-For` names the real client (`--forwarded-allow-ips`)."""

    def __init__(self, entries: Iterable[str]) -> None:
        items = [e.strip() for e in entries if e.strip()]
        self.anyone = "*" in items
        self.networks = [ipaddress.ip_network(e, strict=False) for e in items if e != "*"]

    def __bool__(self) -> bool:
        return self.anyone or bool(self.networks)

    def __contains__(self, host: object) -> bool:
        if self.anyone:
            return True
        try:
            address = ipaddress.ip_address(str(host))
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


class EdgeReport:
    """Edge events, logged as one line per `interval` with counts (never a line per event).

    The first event after a quiet interval is logged at once, so that an operator watching the
    log sees an attack begin; the rest of the interval is summed up when it ends.
    """

    def __init__(self, caps: EdgeCaps, interval: float = REPORT_INTERVAL) -> None:
        self.caps = caps
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self.clients: Counter[str] = Counter()
        self._window: asyncio.TimerHandle | None = None
        self._opened = 0.0

    def note(self, event: str, client: str | None = None) -> None:
        if client is not None:
            self.clients[client] += 1
        if self._window is None:
            log.warning("HTTP edge: %s", self._describe(Counter({event: 1}), self.clients))
            self.clients.clear()
            self._open_window()
            return
        self.counts[event] += 1

    def flush(self) -> None:
        """Log what the current interval counted (also when the server stops)."""
        if self._window is not None:
            self._window.cancel()
            self._window = None
        if self.counts:
            seconds = max(1, round(time.monotonic() - self._opened))
            log.warning("HTTP edge, last %d s: %s", seconds, self._describe(self.counts, self.clients))
            self.counts.clear()
            self.clients.clear()
            self._open_window()

    def _open_window(self) -> None:
        self._opened = time.monotonic()
        self._window = asyncio.get_running_loop().call_later(self.interval, self._close_window)

    def _close_window(self) -> None:
        self._window = None
        self.flush()

    def _describe(self, counts: Counter[str], clients: Counter[str]) -> str:
        caps = self.caps
        says = {
            "per_client": f"connection(s) refused over the limit of {caps.per_client} connections per client "
            "address (503)",
            "full": f"connection(s) refused over the limit of {caps.connections} connections (503)",
            "evicted": "connection(s) closed to make room: connected but sent no complete request yet",
            "headers": f"connection(s) closed: no complete request headers within {caps.header_timeout:g} s",
            "body": f"connection(s) closed: request body not received within {caps.body_timeout:g} s",
            "invalid": "request(s) answered 400: not a valid HTTP request",
        }
        parts: list[str] = []
        for event, n in counts.most_common():
            if event.startswith("accept:"):
                parts.append(
                    f"{n} connection(s) could not be accepted ({event[7:]}; {caps.fd_limit} file descriptors: "
                    "lower --max-connections or raise `ulimit -n`)"
                )
            else:
                parts.append(f"{n} {says.get(event, event)}")
        if clients:
            top = ", ".join(f"{client} x{n}" for client, n in clients.most_common(3))
            parts.append(f"from {top}" + (f" and {len(clients) - 3} more" if len(clients) > 3 else ""))
        return "; ".join(parts)


class Edge:
    """The connections of one server: counts per client, the ones still waiting for a request."""

    def __init__(self, caps: EdgeCaps, proxies: TrustedProxies, report: EdgeReport) -> None:
        self.caps = caps
        self.proxies = proxies
        self.report = report
        self.total = 0
        self.open: Counter[str] = Counter()
        self.waiting: dict[EdgeProtocol, None] = {}
        """Connections that have not sent a complete request yet, oldest first."""
        self.waiting_of: dict[str, dict[EdgeProtocol, None]] = {}
        self.lingering = 0

    def admit(self, conn: EdgeProtocol) -> str | None:
        """Count `conn` in; the reason it is refused instead (`per_client` or `full`)."""
        client = conn.client_key
        if not conn.via_proxy and self.open[client] >= self.caps.per_client:
            if not self._make_room(self.waiting_of.get(client, {})):
                return "per_client"
        if self.total >= self.caps.connections and not self._make_room(self.waiting):
            return "full"
        self.total += 1
        self.open[client] += 1
        self.waiting[conn] = None
        self.waiting_of.setdefault(client, {})[conn] = None
        return None

    def started(self, conn: EdgeProtocol) -> None:
        """`conn` sent its first complete request headers: it is no longer a candidate to close."""
        if conn in self.waiting:
            del self.waiting[conn]
            mine = self.waiting_of[conn.client_key]
            del mine[conn]
            if not mine:
                del self.waiting_of[conn.client_key]

    def release(self, conn: EdgeProtocol) -> None:
        """`conn` closed (or is being closed): it no longer counts."""
        self.started(conn)
        self.total -= 1
        self.open[conn.client_key] -= 1
        if not self.open[conn.client_key]:
            del self.open[conn.client_key]

    @staticmethod
    def _make_room(candidates: dict[EdgeProtocol, None]) -> bool:
        """Close the oldest connection among `candidates` (all waiting for a request); False if none."""
        victim = next(iter(candidates), None)
        if victim is None:
            return False
        victim.cut("evicted")
        return True


class EdgeProtocol(H11Protocol):
    """uvicorn's h11 protocol with the edge's admission and deadlines (see the module docstring).

    uvicorn offers no header-read timeout, and its keep-alive timer starts only after a first
    response, so these hooks sit on the protocol's own events: the connection opening, data
    arriving (the h11 state of the client says whether it is sending headers or a body) and a
    response completing.
    """

    edge: ClassVar[Edge]

    def connection_made(self, transport: asyncio.Transport) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]  # as uvicorn's own
        super().connection_made(transport)
        host = self.client[0] if self.client else "unknown"
        self.client_key = client_key(host)
        self.via_proxy = host in self.edge.proxies
        self.counted = False
        """Whether it counts toward the caps (until it closes or is cut)."""
        self.waits = True
        """No complete request headers yet: the first to close when a new connection needs room."""
        self.refused = False
        self.lingers = False
        self.phase: str | None = None
        self.deadline: asyncio.TimerHandle | None = None
        reason = self.edge.admit(self)
        if reason is not None:
            self._refuse(reason)
            return
        self.counted = True
        self._watch(receiving=True)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # read and dropped: the 503 is already on its way
        super().data_received(data)
        self._watch(receiving=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch(receiving=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        if self.counted:
            self.counted = False
            self.edge.release(self)
        if self.lingers:
            self.lingers = False
            self.edge.lingering -= 1
        super().connection_lost(exc)

    def cut(self, event: str) -> None:
        """Close this connection and count it out now (its `connection_lost` comes later)."""
        self.edge.report.note(event, self.client_key)
        if self.counted:
            self.counted = False
            self.edge.release(self)
        self._stop_deadline()
        self.transport.close()

    # -- deadlines ---------------------------------------------------------------------------
    def _watch(self, *, receiving: bool) -> None:
        """Arm the deadline of what the client is sending now: headers, a body, or nothing.

        A kept-alive connection that is quiet after a response is uvicorn's (its keep-alive
        timeout closes it); its header deadline starts with the first byte of the next request.
        """
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if self.waits and state is not h11.IDLE:
            self.waits = False
            self.edge.started(self)
        if state is h11.IDLE:
            phase = "headers" if receiving or self.phase == "headers" else None
        else:
            phase = "body" if state is h11.SEND_BODY else None
        if phase == self.phase:
            return
        self._stop_deadline()
        self.phase = phase
        if phase is not None:
            seconds = self.edge.caps.header_timeout if phase == "headers" else self.edge.caps.body_timeout
            self.deadline = self.loop.call_later(seconds, self._expire, phase)

    def _expire(self, phase: str) -> None:
        self.deadline = None
        if self.phase == phase and not self.transport.is_closing():
            self.cut(phase)

    def _stop_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.phase = None

    # -- refusal -----------------------------------------------------------------------------
    def _refuse(self, reason: str) -> None:
        """Answer 503 with Retry-After before reading the request, then close."""
        self.refused = True
        self.edge.report.note(reason, self.client_key)
        caps = self.edge.caps
        if reason == "per_client":
            message = (
                f"Too many open connections from your address (limit {caps.per_client}, all serving "
                f"requests): retry after {RETRY_AFTER} s"
            )
        else:
            message = f"The server is at its limit of {caps.connections} open connections: retry after {RETRY_AFTER} s"
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": message}}).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"retry-after: {RETRY_AFTER}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        transport = self.transport
        transport.write(head.encode() + body)
        if self.edge.lingering >= self.edge.caps.accept_batch or not transport.can_write_eof():
            transport.close()
            return
        # Half-close: the client reads the 503 and our end of stream; what it still sends is
        # dropped until it closes, or until LINGER is up.
        transport.write_eof()
        self.lingers = True
        self.edge.lingering += 1
        self.deadline = self.loop.call_later(LINGER, transport.close)


def edge_protocol(edge: Edge) -> type[EdgeProtocol]:
    """The protocol class uvicorn instantiates per connection (`Config(http=...)`), bound to `edge`."""

    class BoundEdgeProtocol(EdgeProtocol):
        pass

    BoundEdgeProtocol.edge = edge
    return BoundEdgeProtocol


class _InvalidRequests(logging.Filter):
    """Counts uvicorn's line per invalid request into the report instead of logging each."""

    def __init__(self, report: EdgeReport) -> None:
        super().__init__()
        self.report = report

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() == "Invalid HTTP request received.":
            self.report.note("invalid")
            return False
        return True


def quiet_edge_logs(report: EdgeReport) -> Callable[[], None]:
    """Route failed accept()s and invalid requests into `report`; returns the undo.

    asyncio reports each accept() that fails for want of file descriptors with a traceback
    (CPython 3.11 retries up to the listen backlog, 2,048 times, per attempt); uvicorn logs each
    invalid request. Both are counted instead.
    """
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") == "socket.accept() out of system resource":
            exc = context.get("exception")
            report.note(f"accept:{exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    invalid = _InvalidRequests(report)
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(invalid)

    def undo() -> None:
        loop.set_exception_handler(previous)
        uvicorn_log.removeFilter(invalid)
        report.flush()

    return undo
