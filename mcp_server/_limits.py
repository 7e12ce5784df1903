"""Limits of the HTTP edge: what the operator asks for, and what is in force once sized.

Every connection holds a file descriptor. When a process has none left, accept() fails and
no one else can connect, so the connection caps are cut from the file-descriptor limit: its
soft value is raised toward the hard one at start (the soft limit is often 1,024 while the
hard one allows far more), the descriptors already open and a reserve for everything else the
server opens (skill worker pipes, subprocesses, upstream servers, databases) are set aside, and
the rest is for connections.

One more share is set aside for connections in flight: asyncio accepts up to its `backlog`
connections in one go before any of them reaches the edge's admission, and closing one to make
room takes a few loop turns. So the server listens with a small accept batch (`accept_batch`)
and a large kernel queue (`LISTEN_QUEUE`): a burst of clients waits in the queue instead of
being dropped, and no burst can take the process past its file-descriptor limit. Standard
library only: the CLI imports this module at start.
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["EdgeCaps", "EdgeLimits", "size_caps"]

FD_CEILING = 65536
"""The soft limit is raised at most this far: beyond it, run more processes."""
OTHER = 64
"""File descriptors kept for what else the server opens, at least (a sixteenth of a larger limit)."""
LISTEN_QUEUE = 2048
"""Connections the kernel holds for the server until it accepts them (uvicorn's default backlog)."""
IN_FLIGHT = 4
"""Accept batches that may be open beyond the caps at once: accepted but not yet admitted, or
being closed to make room (a batch each loop turn for about three turns), plus refusals
lingering to deliver their 503."""


class EdgeLimits(NamedTuple):
    """What a connection may cost before it is a request (`orchestrator serve` flags)."""

    header_timeout: float = 10.0
    """Seconds a client has to send complete request headers, from the connection opening (on a
    kept-alive connection: from the first byte of the next request); then it is closed."""
    body_timeout: float = 30.0
    """Seconds a client has to send a request's body once its headers are in."""
    max_connections: int | None = None
    """Open connections in all; None: sized from the file-descriptor limit."""
    max_connections_per_client: int | None = None
    """Open connections of one client address (an IPv6 /64); None: a quarter of `max_connections`."""
    forwarded_allow_ips: tuple[str, ...] = ()
    """Proxies whose X-Forwarded-For names the client (addresses, networks or `*`); none by default."""


class EdgeCaps(NamedTuple):
    """The limits in force: `EdgeLimits` with the connection caps sized."""

    connections: int
    per_client: int
    header_timeout: float
    body_timeout: float
    accept_batch: int
    """Connections asyncio accepts in one loop turn (its `backlog` argument)."""
    fd_limit: int
    """The soft file-descriptor limit after raising it."""
    fd_note: str
    """How it came to be (raised from what; the hard limit), for the start-up line."""

    def describe(self) -> str:
        """The start-up line: what the edge allows, in an operator's words."""
        return (
            f"HTTP limits: {self.connections:,} connections, {self.per_client:,} per client address; "
            f"request headers within {self.header_timeout:g} s, body within {self.body_timeout:g} s; "
            f"{self.fd_limit:,} file descriptors ({self.fd_note})"
        )


def size_caps(limits: EdgeLimits) -> EdgeCaps:
    """Raise the soft file-descriptor limit toward the hard one and cut the caps from it."""
    soft, note = _raise_fd_limit()
    batch = min(128, max(16, soft // 64))
    reserve = _open_fds() + max(OTHER, soft // 16) + (IN_FLIGHT + 1) * batch
    room = max(16, soft - reserve)
    connections = limits.max_connections or room
    if connections > room:
        note += f"; --max-connections {connections:,} is more than the {room:,} they leave room for"
    per_client = limits.max_connections_per_client or max(4, connections // 4)
    return EdgeCaps(
        connections=connections,
        per_client=min(per_client, connections),
        header_timeout=limits.header_timeout,
        body_timeout=limits.body_timeout,
        accept_batch=batch,
        fd_limit=soft,
        fd_note=note,
    )


def _raise_fd_limit() -> tuple[int, str]:
    """The soft limit after raising it toward the hard one, and how it came to be."""
    try:
        import resource
    except ImportError:  # Windows: no such limit to read or raise
        return 8192, "no file-descriptor limit on this platform"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = FD_CEILING if hard == resource.RLIM_INFINITY else min(hard, FD_CEILING)
    hard_text = "unlimited" if hard == resource.RLIM_INFINITY else f"{hard:,}"
    if soft != resource.RLIM_INFINITY and soft < top:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
        except (ValueError, OSError) as exc:
            return soft, f"could not raise it toward the hard limit {hard_text}: {exc}"
        return top, f"raised from {soft:,}; hard limit {hard_text}"
    if soft == resource.RLIM_INFINITY:
        return FD_CEILING, "unlimited; counted as this many"
    return soft, f"hard limit {hard_text}"


def _open_fds() -> int:
    """File descriptors open now (Linux, macOS); 32 where they cannot be listed."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 32
