"""Transports: stdio (default) and streamable HTTP.

HTTP keeps DNS-rebinding protection on wherever it binds: a request is served only when its
Host header names this server (the loopback names, the bound address, and every
`--allowed-host`), and a browser Origin only when it is one of those; the SDK answers others
with 421 / 403. The SDK turns that protection off for any bind address other than loopback, so
the settings are always passed explicitly here. Host checking is not access control: any
program (not a browser) may send `Host: 127.0.0.1`; the bearer token is. Stateful sessions are
bounded (idle timeout, total, per client: see `_sessions`); an optional bearer token, compared
in constant time, guards every request before any session exists; before either, the edge
(`_edge`) bounds what a connection may cost: header and body deadlines, connection caps sized
from the file-descriptor limit. `X-Forwarded-For` is believed only from `--forwarded-allow-ips`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ._limits import EdgeLimits

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings

    from .app import OrchestratorServer

__all__ = [
    "LOOPBACK_HOSTS",
    "BearerTokenMiddleware",
    "EdgeLimits",
    "SessionLimits",
    "accepted_hosts",
    "exposure_warning",
    "http_app",
    "is_loopback",
    "serve_http",
    "serve_stdio",
    "transport_security",
]

log = logging.getLogger("mcp_server.transports")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""Host names always accepted: only a process on this machine can send them."""


class SessionLimits(NamedTuple):
    """Bounds on stateful HTTP sessions (stateless HTTP keeps none).

    A NamedTuple, not a dataclass: the CLI reads its defaults at load time, where every
    command pays for each import.
    """

    idle_timeout: float = 600.0
    """Seconds a session may go without a request in flight before it is closed. A connected SDK
    client keeps a GET stream open, so only abandoned sessions reach it."""
    max_sessions: int = 1000
    """Open sessions in all; when full, the oldest idle session of the heaviest client makes room."""
    per_client: int = 250
    """Open sessions of one peer address (an IPv6 /64); its own oldest idle one makes room."""


class BearerTokenMiddleware:
    """Reject every HTTP request that lacks `Authorization: Bearer <token>`.

    It stands in front of the session manager, so a request without the token never creates
    (or costs) a session.
    """

    def __init__(self, app: ASGIApp, token: str, *, own_gate: tuple[str, ...] = ()) -> None:
        import hmac

        self._compare = hmac.compare_digest
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._own_gate = own_gate
        """Path prefixes that check the token themselves (the run viewer: a browser's cookie)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and not any(path == p or path.startswith(p + "/") for p in self._own_gate):
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not self._compare(given, self._expected):
                body = b'{"error": "unauthorized", "hint": "send Authorization: Bearer <ORCHESTRATOR_TOKEN>"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def serve_stdio(server: OrchestratorServer) -> None:
    """Serve one client over stdin/stdout until it disconnects."""
    await server.run_stdio_async()


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server reachable from this machine only."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _as_host_name(host: str) -> str:
    """A bind address as it appears in a Host header (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def accepted_hosts(bind: str, allowed_hosts: Sequence[str] = ()) -> list[str]:
    """The Host names served: loopback, the bound address itself (not a wildcard), and `allowed_hosts`.

    A literal address is safe to accept: DNS rebinding needs a name the attacker controls.
    """
    names: list[str] = list(LOOPBACK_HOSTS)
    if not is_loopback(bind) and not _is_wildcard(bind):
        names.append(_as_host_name(bind).lower())
    names += [name for name in allowed_hosts if name not in names]
    return names


def transport_security(bind: str, allowed_hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """DNS-rebinding protection for `accepted_hosts`, on any port unless a name carries its own."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts: list[str] = []
    for name in accepted_hosts(bind, allowed_hosts):
        with_port = name.rsplit("]", 1)[-1] if name.startswith("[") else name
        hosts += [name] if ":" in with_port else [name, f"{name}:*"]
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


def http_app(
    server: OrchestratorServer,
    *,
    host: str = "127.0.0.1",
    stateless: bool = False,
    auth_token: str | None = None,
    allowed_hosts: Sequence[str] = (),
    limits: SessionLimits | None = None,
) -> ASGIApp:
    """The ASGI app serving `/mcp` (stateful sessions unless `stateless`) and the run viewer at `/runs`."""
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import BaseRoute, Mount, Route

    from ._sessions import FairSessionManager, StatelessManager
    from ._viewer import viewer_for

    limits = limits or SessionLimits()
    security = transport_security(host, allowed_hosts)
    low = server.lowlevel
    manager: StreamableHTTPSessionManager
    if stateless:
        # No stream outlives a request: handshake-era clients can never be told of changes.
        server.list_changed_to_handshake_clients = False
        server.tasks_listed_to_handshake_clients = False
        manager = StatelessManager(low, security_settings=security)
    else:
        manager = FairSessionManager(
            low,
            per_client=limits.per_client,
            security_settings=security,
            session_idle_timeout=limits.idle_timeout,
            max_sessions=limits.max_sessions,
        )
    routes: list[BaseRoute] = [Route("/mcp", endpoint=StreamableHTTPASGIApp(manager))]
    viewer = viewer_for(server, token=auth_token, hosts=security.allowed_hosts, origins=security.allowed_origins)
    if viewer is not None:
        routes.append(Mount("/runs", app=viewer))
    app: ASGIApp = Starlette(routes=routes, lifespan=lambda _: manager.run())
    if auth_token:
        app = BearerTokenMiddleware(app, auth_token, own_gate=("/runs",))
    return app


def exposure_warning(
    host: str, port: int, *, auth_token: str | None, allowed_hosts: Sequence[str], stateless: bool
) -> str | None:
    """What to tell the operator when `host` is reachable beyond this machine (None on loopback)."""
    if is_loopback(host):
        return None
    lines = [
        f"serving beyond loopback on {_as_host_name(host)}:{port}: any machine that can reach this port can connect.",
        f"Accepted Host names (others get 421): {', '.join(accepted_hosts(host, allowed_hosts))}.",
    ]
    if _is_wildcard(host) and not allowed_hosts:
        lines.append(
            "No --allowed-host given: clients on other machines are refused until you name the host "
            "they connect to, e.g. --allowed-host mcp.example.com."
        )
    if not auth_token:
        lines.append("No --auth-token: anyone who can connect can call every tool.")
    lines.append("Put a TLS-terminating proxy in front: over plain HTTP the token and every call travel in clear text.")
    if not stateless:
        lines.append(
            "Sessions and connections are limited per client address; behind a proxy, let it send "
            "X-Forwarded-For and name it with --forwarded-allow-ips."
        )
    return "\n    ".join(lines)


async def serve_http(
    server: OrchestratorServer,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    stateless: bool = False,
    auth_token: str | None = None,
    allowed_hosts: Sequence[str] = (),
    limits: SessionLimits | None = None,
    edge: EdgeLimits | None = None,
    ready: Callable[[int, str], None] | None = None,
) -> None:
    """Serve streamable HTTP at http://host:port/mcp until cancelled.

    `ready(port, limits)` is called once it listens, with the edge's limits in words.
    """
    import uvicorn

    from ._edge import Edge, EdgeReport, TrustedProxies, edge_protocol, quiet_edge_logs
    from ._limits import size_caps

    edge = edge or EdgeLimits()
    caps = size_caps(edge)
    proxies = TrustedProxies(edge.forwarded_allow_ips)
    report = EdgeReport(caps)
    app = http_app(
        server, host=host, stateless=stateless, auth_token=auth_token, allowed_hosts=allowed_hosts, limits=limits
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        http=edge_protocol(Edge(caps, proxies, report)),
        backlog=caps.accept_batch,  # asyncio accepts this many per loop turn; the kernel queue is widened below
        ws="none",
        proxy_headers=bool(proxies),  # uvicorn would believe X-Forwarded-For from loopback
        forwarded_allow_ips=list(edge.forwarded_allow_ips),
    )

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            try:
                await super().shutdown(sockets)
            finally:
                # Here, not after serve(): uvicorn re-raises a SIGTERM once serve() returns.
                report.flush()

    userver = Server(config)

    def announce(bound: int) -> None:
        warning = exposure_warning(host, bound, auth_token=auth_token, allowed_hosts=allowed_hosts, stateless=stateless)
        if warning:
            log.warning(warning)
        if ready is not None:
            ready(bound, caps.describe())
        else:
            log.info(caps.describe())

    undo = quiet_edge_logs(report)
    try:
        await _serve_uvicorn(server, userver, host, port, announce)
    finally:
        undo()


async def _serve_uvicorn(
    server: OrchestratorServer, userver: Any, host: str, port: int, announce: Callable[[int], None]
) -> None:
    """Run uvicorn with the server's lifespan; once it listens, widen its queue and announce the port."""
    import anyio

    from ._limits import LISTEN_QUEUE

    async with server.running():
        stopped = anyio.Event()

        async def serve() -> None:
            try:
                await userver.serve()
            finally:
                stopped.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            while not userver.started:  # uvicorn offers no event; poll its flag cheaply
                if stopped.is_set():
                    raise OSError(f"the HTTP server on {host}:{port} stopped before it started")
                await anyio.sleep(0.01)
            sockets = [s for srv in userver.servers for s in srv.sockets]
            for listener in sockets:
                # asyncio uses one number for the kernel's queue and for its accept batch: the
                # batch stays small (see `_limits`), the queue holds a burst of clients.
                with listener.dup() as raw:
                    raw.listen(LISTEN_QUEUE)
            announce(sockets[0].getsockname()[1] if sockets else port)
