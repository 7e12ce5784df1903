"""Transports: stdio (default) and streamable HTTP on loopback.

HTTP binds to 127.0.0.1 by default with DNS-rebinding protection on (the SDK enables it for
loopback hosts); an optional bearer token, compared in constant time, guards every request.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .app import OrchestratorServer

__all__ = ["BearerTokenMiddleware", "http_app", "serve_http", "serve_stdio"]

log = logging.getLogger("mcp_server.transports")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerTokenMiddleware:
    """Reject every HTTP request that lacks `Authorization: Bearer <token>`."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
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


def http_app(
    server: OrchestratorServer, *, host: str = "127.0.0.1", stateless: bool = False, auth_token: str | None = None
) -> ASGIApp:
    """The ASGI app serving `/mcp` (stateful sessions unless `stateless`)."""
    app: ASGIApp = server.streamable_http_app(stateless_http=stateless, host=host)
    if auth_token:
        app = BearerTokenMiddleware(app, auth_token)
    return app


async def serve_http(
    server: OrchestratorServer,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    stateless: bool = False,
    auth_token: str | None = None,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve streamable HTTP at http://host:port/mcp until cancelled."""
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1") and not auth_token:
        log.warning("serving on %s without --auth-token: anyone who can reach it can call every tool", host)
    app = http_app(server, host=host, stateless=stateless, auth_token=auth_token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    userver = uvicorn.Server(config)
    async with server.running():
        if ready is None:
            await userver.serve()
            return
        import anyio

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
            ready(sockets[0].getsockname()[1] if sockets else port)
