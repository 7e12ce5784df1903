"""Stateful HTTP sessions that no single client can use up.

The SDK's session manager already closes a session after its idle timeout and refuses a new
one with 503 once `max_sessions` are open. Alone, that lets one client lock everybody out:
open `max_sessions` sessions and walk away, and every other client gets 503 until the idle
timeout (30 minutes by default) frees them. This manager adds fairness on top of the SDK's
bookkeeping:

- a client (its peer address; an IPv6 /64 counts as one client) may hold at most
  `per_client` sessions; when it opens one more, its own oldest idle session is closed to make
  room, and when none of its sessions is idle it is refused with 429;
- when the server is full, the oldest idle session of the client holding the most sessions is
  closed to make room; only when every session is busy is a new client refused with 503.

A session is *busy* while a request is in flight on it (a call being served, or a client's open
GET stream for notifications, which connected SDK clients keep); otherwise it is *idle*. The
SDK tracks this in each transport's idle scope: its deadline is infinite while busy and
`last activity + idle timeout` once idle, so the smallest deadline is the oldest idle session.

Each session's transport is `QuietCancelTransport` over the server's `RecentEvents` (`_streams`):
a request's SSE stream starts with a priming event and a `retry:` field (resumable after a
dropped connection), and a request the client cancelled gets no response.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from contextlib import suppress
from typing import Any, cast
from uuid import uuid4

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from ._edge import client_key
from ._streams import RETRY_MS, QuietCancelTransport, RecentEvents

log = logging.getLogger("mcp_server.transports")

_SESSION_HEADER = MCP_SESSION_ID_HEADER.lower().encode("latin-1")


def client_of(scope: Scope) -> str:
    """Who is asking: the peer address, or what a proxy named in `--forwarded-allow-ips` says in
    X-Forwarded-For (uvicorn applied it); an IPv6 /64 is one client (`client_key`)."""
    peer = scope.get("client")
    return client_key(peer[0] if peer else "unknown")


class FairSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with a per-client cap and eviction of idle sessions.

    Built on the SDK's own session table (`_server_instances`) and admission
    (`_admit_session`, `_serve_opening_request`): only the decision of who gets a slot is ours.
    """

    def __init__(self, app: Any, *, per_client: int, **options: Any) -> None:
        self.events = RecentEvents()
        options.setdefault("retry_interval", RETRY_MS)
        super().__init__(app, **options)
        if per_client <= 0:
            raise ValueError("per_client must be a positive number of sessions")
        if self.session_idle_timeout is None:
            raise ValueError("fair sessions need an idle timeout to tell idle sessions from busy ones")
        self.per_client = per_client
        self._clients: dict[str, str] = {}
        """session id -> the client that opened it."""

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        opens_session = not any(key == _SESSION_HEADER for key, _ in scope["headers"])
        if not opens_session or scope.get("method") != "POST":
            # Requests of an existing session, and requests that cannot open one (a GET or
            # DELETE without a session id fails anyway): the SDK answers them unchanged.
            await super()._handle_stateful_request(scope, receive, send)
            return
        user = scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        client = client_of(scope)
        async with self._session_creation_lock:
            refusal = await self._make_room(client)
            transport = None if refusal is not None else self._admit_session(requestor)
            if transport is not None:
                assert transport.mcp_session_id is not None
                self._clients[transport.mcp_session_id] = client
        if transport is None:
            await (refusal or _refuse_full(self.max_sessions))(scope, receive, send)
            return
        await self._serve_opening_request(transport, scope, receive, send)

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        """The SDK's admission, with our transport: this session's view of the recent events."""
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        session_id = uuid4().hex
        transport = QuietCancelTransport(
            mcp_session_id=session_id,
            is_json_response_enabled=self.json_response,
            event_store=self.events.session(session_id),
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        if requestor is not None:
            self._session_owners[session_id] = requestor
        self._server_instances[session_id] = transport
        log.debug("opened HTTP session %s", session_id[:12])
        return transport

    async def _make_room(self, client: str) -> JSONResponse | None:
        """Close an idle session if `client` or the server is at its limit; the refusal if none can go."""
        mine = [sid for sid, owner in self._clients.items() if owner == client]
        if len(mine) >= self.per_client:
            victim = self._oldest_idle(mine)
            if victim is None:
                log.warning("refused a new HTTP session: %s holds %d busy sessions", client, len(mine))
                return _refuse_client(self.per_client)
            await self._evict(victim, f"{client} opened more than {self.per_client} sessions")
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            held = Counter(self._clients.values())
            # The heaviest client pays first: its oldest idle session goes.
            for heavy, _ in held.most_common():
                victim = self._oldest_idle([sid for sid, owner in self._clients.items() if owner == heavy])
                if victim is not None:
                    await self._evict(victim, f"the server holds {self.max_sessions} sessions; {heavy} holds most")
                    return None
            log.warning("refused a new HTTP session: all %d sessions are busy", len(self._server_instances))
            return _refuse_full(self.max_sessions)
        return None

    def _oldest_idle(self, session_ids: list[str]) -> str | None:
        """The session among these whose last request ended longest ago; None if all are busy."""
        best, best_deadline = None, math.inf
        for sid in session_ids:
            transport = self._server_instances.get(sid)
            scope = transport.idle_scope if transport is not None else None
            if scope is None or transport is None or transport.is_terminated:
                continue
            if scope.deadline < best_deadline:  # infinite while a request is in flight
                best, best_deadline = sid, scope.deadline
        return best

    async def _evict(self, session_id: str, reason: str) -> None:
        log.info("closing idle HTTP session %s: %s", session_id[:12], reason)
        transport = self._server_instances[session_id]
        await self._discard_session(session_id, transport)

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._clients.pop(session_id, None)
        self.events.forget(session_id)
        if session_id in self._server_instances and transport.idle_scope is not None:
            if transport.idle_scope.cancel_called:
                log.info("closed HTTP session %s: idle for %g s", session_id[:12], self.session_idle_timeout)
        await super()._discard_session(session_id, transport)


def _refuse_client(per_client: int) -> JSONResponse:
    return _jsonrpc_refusal(
        429,
        f"Too many open sessions from your address (limit {per_client}, all busy): "
        "end one (HTTP DELETE with its Mcp-Session-Id) before opening another",
    )


def _refuse_full(max_sessions: int | None) -> JSONResponse:
    return _jsonrpc_refusal(503, f"The server is at its limit of {max_sessions} open sessions, all busy: retry later")


def _jsonrpc_refusal(status: int, message: str) -> JSONResponse:
    """A JSON-RPC error body (no request id), as the SDK answers its own refusals."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": message}}
    return JSONResponse(body, status_code=status, headers={"retry-after": "5"})


class StatelessManager(StreamableHTTPSessionManager):
    """The SDK's stateless mode, where a handshake-era client's `notifications/cancelled` stops
    the call it names.

    Stateless, every POST is served by a server of its own, so the SDK delivers a cancellation
    (a POST of its own) to a server that never saw the request and it is ignored: the call runs
    on. Here a POST carrying a request is remembered by (client, request id) while it is served;
    a POST carrying `notifications/cancelled` for that id from the same client (`client_of`, and
    the same `Authorization` header: one address may be many clients behind a proxy) cancels
    it: the call is stopped as a cancelled call is (its skill or upstream told), and its response
    stream ends without a response (a cancelled request gets none). Clients that share an address
    and a credential share request ids too: a client's cancellation names its own latest one.
    """

    def __init__(self, app: Any, **options: Any) -> None:
        super().__init__(app, stateless=True, **options)
        self._calls: dict[tuple[str, str], anyio.CancelScope] = {}

    async def _handle_stateless_request(
        self, protocol_version_hint: str | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        body, receive = await _buffered(receive)
        message = _json_object(body)
        client = _caller(scope)
        if message.get("method") == "notifications/cancelled":
            params: Any = message.get("params")
            named: Any = cast(dict[str, Any], params).get("requestId") if isinstance(params, dict) else None
            call = self._calls.get((client, str(named))) if isinstance(named, str | int) else None
            if call is not None:
                log.debug("stateless request %s cancelled by its client", str(named)[:64])
                call.cancel()
        request_id = message.get("id")
        if not isinstance(request_id, str | int) or "method" not in message:
            await super()._handle_stateless_request(protocol_version_hint, scope, receive, send)
            return
        key = (client, str(request_id))
        ended = False

        async def tracked(event: Any) -> None:
            nonlocal ended
            ended = ended or (event["type"] == "http.response.body" and not event.get("more_body", False))
            await send(event)

        with anyio.CancelScope() as call:
            previous = self._calls.get(key)
            self._calls[key] = call
            try:
                await super()._handle_stateless_request(protocol_version_hint, scope, receive, tracked)
            finally:
                if self._calls.get(key) is call:
                    if previous is not None:
                        self._calls[key] = previous
                    else:
                        del self._calls[key]
        if call.cancelled_caught and not ended:  # the stream ends cleanly, without a response
            with anyio.CancelScope(shield=True), suppress(OSError, RuntimeError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def _caller(scope: Scope) -> str:
    """Who a stateless request is from: its client and a digest of its credential (if any)."""
    credential = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
    return f"{client_of(scope)} {hashlib.sha256(credential).hexdigest()[:16] if credential else '-'}"


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The request's body (already bounded by the SDK's body limit), and a `receive` that hands
    it over again before passing on whatever comes next (a disconnect)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            first: dict[str, Any] = dict(message)
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            first = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            break
    sent = False

    async def again() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await receive()

    return b"".join(chunks), again


def _json_object(body: bytes) -> dict[str, Any]:
    """The JSON-RPC message in `body` when it is one object (a batch or bad JSON: {})."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return {}
    return cast(dict[str, Any], data) if isinstance(data, dict) else {}
