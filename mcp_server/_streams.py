"""What the handshake-era HTTP streams of a session remember: resumable SSE, and cancelled requests.

SEP-1699 (2025-11-25): a POST's SSE stream starts with a priming event (an event id, empty
data) and a `retry:` field, so that a client whose connection drops can come back with
`Last-Event-ID` and get what it missed. The SDK's transport does this once it has an
`EventStore`; `RecentEvents` is that store, bounded:

- one store for the server, shared by every session, holding at most `max_bytes` of events
  (their JSON) and `max_events` events; the oldest go first. A stream whose early events were
  dropped can no longer be resumed (its event ids are unknown), which is said with a 404;
- event ids are random (128 bits): knowing one is proof of having received it, and a session
  may only resume its own streams (each session sees the store through its own `SessionEvents`);
- a stream that ended without a response (a request the client cancelled: see
  `QuietCancelTransport`) is not resumable: a client coming back for it gets a 404, not an
  empty stream it would reconnect to forever.

`QuietCancelTransport`: the spec says a request the client cancelled gets no response. The SDK
writes a `-32800 Request cancelled` error on this era's wire instead (its stream otherwise has
no end); ours ends the request's SSE stream without a JSON-RPC message.
"""

from __future__ import annotations

import logging
import secrets
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from http import HTTPStatus

from mcp.server.streamable_http import (
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    StreamId,
)
from mcp_types import JSONRPCMessage, RequestId, jsonrpc_message_adapter
from starlette.requests import Request
from starlette.types import Send

__all__ = ["RETRY_MS", "QuietCancelTransport", "RecentEvents", "SessionEvents"]

log = logging.getLogger("mcp_server.transports")

RETRY_MS = 2000
"""The `retry:` a stream suggests: how long a client whose stream dropped waits before resuming."""


@dataclass
class _Stream:
    events: deque[EventId] = field(default_factory=lambda: deque[EventId]())
    ended: bool = False
    """It ended without a response (cancelled): nothing more will come to resume."""


class RecentEvents:
    """The server's recent SSE events, for resuming streams (see the module docstring)."""

    def __init__(self, max_bytes: int = 32 * 1024 * 1024, max_events: int = 20_000) -> None:
        self.max_bytes = max_bytes
        self.max_events = max_events
        self._events: OrderedDict[EventId, tuple[tuple[str, StreamId], str | None]] = OrderedDict()
        self._streams: dict[tuple[str, StreamId], _Stream] = {}
        self._bytes = 0

    def session(self, session_id: str) -> SessionEvents:
        """The store as one session sees it."""
        return SessionEvents(self, session_id)

    def store(self, key: tuple[str, StreamId], message: JSONRPCMessage | None) -> EventId:
        payload = None if message is None else message.model_dump_json(by_alias=True, exclude_unset=True)
        event_id = secrets.token_urlsafe(16)
        self._events[event_id] = (key, payload)
        self._streams.setdefault(key, _Stream()).events.append(event_id)
        self._bytes += len(payload or "")
        while self._events and (self._bytes > self.max_bytes or len(self._events) > self.max_events):
            self._drop_oldest()
        return event_id

    def _drop_oldest(self) -> None:
        event_id, (key, payload) = self._events.popitem(last=False)
        self._bytes -= len(payload or "")
        stream = self._streams.get(key)
        if stream is not None:
            if stream.events and stream.events[0] == event_id:
                stream.events.popleft()
            if not stream.events:
                del self._streams[key]

    def end(self, key: tuple[str, StreamId]) -> None:
        """The stream ended without a response: it cannot be resumed."""
        stream = self._streams.get(key)
        if stream is not None:
            stream.ended = True

    def forget(self, session_id: str) -> None:
        """Drop a closed session's streams (their events age out with the rest)."""
        for key in [k for k in self._streams if k[0] == session_id]:
            del self._streams[key]

    def resumable(self, session_id: str, event_id: EventId) -> bool:
        """Whether `session_id` can resume after `event_id`: its own, known, not ended."""
        found = self._events.get(event_id)
        if found is None or found[0][0] != session_id:
            return False
        stream = self._streams.get(found[0])
        return stream is not None and not stream.ended

    async def replay(self, session_id: str, last_event_id: EventId, send: EventCallback) -> StreamId | None:
        if not self.resumable(session_id, last_event_id):
            return None
        key, _ = self._events[last_event_id]
        stream = self._streams[key]
        after = list(stream.events)
        for event_id in after[after.index(last_event_id) + 1 :]:
            found = self._events.get(event_id)
            if found is None or found[1] is None:  # dropped meanwhile, or a priming event
                continue
            message = jsonrpc_message_adapter.validate_json(found[1], by_name=False)
            await send(EventMessage(message, event_id))
        return key[1]


class SessionEvents(EventStore):
    """One session's view of `RecentEvents`: its streams, and only its own ever replayed."""

    def __init__(self, shared: RecentEvents, session_id: str) -> None:
        self.shared = shared
        self.session_id = session_id

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return self.shared.store((self.session_id, stream_id), message)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        return await self.shared.replay(self.session_id, last_event_id, send_callback)

    def end(self, stream_id: StreamId) -> None:
        self.shared.end((self.session_id, stream_id))


class QuietCancelTransport(StreamableHTTPServerTransport):
    """The SDK's handshake-era transport, except that a request the client cancelled gets no
    response: its SSE stream just ends (the 2025-11-25 spec: a receiver of a cancellation
    SHOULD NOT send a response for it)."""

    async def _terminate_unanswered_request(self, request_id: RequestId) -> None:
        stream_id = str(request_id)
        store = self._event_store
        if isinstance(store, SessionEvents):
            store.end(stream_id)  # a client that comes back for it is told it is gone
        log.debug("request %s settled without a response (cancelled): its stream ends", stream_id[:64])
        self.close_sse_stream(stream_id)

    async def _replay_events(self, last_event_id: str, request: Request, send: Send) -> None:
        store = self._event_store
        if isinstance(store, SessionEvents) and not store.shared.resumable(store.session_id, last_event_id):
            response = self._create_error_response(
                "nothing to resume after this Last-Event-ID: the stream ended (its request was cancelled "
                "or answered long ago) or belongs to another session; send the request again",
                HTTPStatus.NOT_FOUND,
            )
            await response(request.scope, request.receive, send)
            return
        await super()._replay_events(last_event_id, request, send)
