"""What an upstream asks while one of our calls runs: progress, logs, sampling and elicitation.

One upstream session serves every caller, so each call is registered with its `SkillContext`
for as long as it runs; a request from the upstream is routed to the call it belongs to:

- the current call in a contextvar, when the SDK runs the callback in the caller's task
  (2026-07-28 input-required rounds; handshake-era requests over streamable HTTP);
- otherwise (handshake-era requests over stdio carry no link to the call that caused them)
  the one call in flight, or several that share a `caller` (the same client of ours);
  when that is ambiguous the request is refused rather than shown to the wrong client.

Sampling and elicitation go to `ctx.extras["sampling"]` / `ctx.extras["elicitation"]`
(see `SamplingForward`, `ElicitationForward`); without them the upstream gets an MCP error
saying our client does not support it. While our client answers, the call's timeout is paused.
"""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Awaitable, Callable, Generator
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_REQUEST,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    LoggingMessageNotificationParams,
)

from skills import SkillContext
from skills.core.base import LogLevel

__all__ = ["CallClock", "Calls", "ElicitationForward", "Forwarder", "InFlight", "SamplingForward"]

SamplingForward = Callable[
    [CreateMessageRequestParams], Awaitable[CreateMessageResult | CreateMessageResultWithTools | ErrorData]
]
"""`ctx.extras["sampling"]`: ask our client's model; return its result or an `ErrorData` (or raise `MCPError`)."""

ElicitationForward = Callable[[ElicitRequestParams], Awaitable[ElicitResult | ErrorData]]
"""`ctx.extras["elicitation"]`: ask our client's user; return the answer or an `ErrorData` (or raise `MCPError`)."""

P = TypeVar("P")
R = TypeVar("R")

_LEVELS: dict[str, LogLevel] = {
    "debug": "debug",
    "info": "info",
    "notice": "info",
    "warning": "warning",
    "error": "error",
    "critical": "error",
    "alert": "error",
    "emergency": "error",
}


class CallClock:
    """The per-call timeout, as a cancel scope whose deadline can be paused.

    Waiting for our client's model or user is not the upstream being slow, so it does not count.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
        self._paused = 0
        self._remaining = timeout

    @contextmanager
    def paused(self) -> Generator[None, None, None]:
        if self._paused == 0:
            self._remaining = max(self.scope.deadline - anyio.current_time(), 0.0)
            self.scope.deadline = math.inf
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1
            if self._paused == 0:
                self.scope.deadline = anyio.current_time() + self._remaining

    @property
    def timed_out(self) -> bool:
        return self.scope.cancelled_caught


class InFlight:
    """One call of ours to the upstream, while it runs."""

    __slots__ = ("asking", "caller", "clock", "ctx", "tool")

    def __init__(self, tool: str, ctx: SkillContext, clock: CallClock) -> None:
        self.tool = tool
        self.ctx = ctx
        self.clock = clock
        self.caller: Any = ctx.extras.get("caller", self)
        """Who made the call (`ctx.extras["caller"]`, e.g. our client's session); the call itself if unknown."""
        self.asking: set[anyio.CancelScope] = set()
        """Questions forwarded to our client for this call, abandoned when the call ends."""


_current: contextvars.ContextVar[InFlight | None] = contextvars.ContextVar("adapters_current_call", default=None)


class Calls:
    """The calls in flight on one upstream session."""

    def __init__(self) -> None:
        self._calls: dict[int, InFlight] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def enter(self, call: InFlight) -> contextvars.Token[InFlight | None]:
        """`call` is in flight (and the current call of this task) until `leave(call, token)`.

        A pair of calls rather than a context manager: this is on every imported call's path."""
        self._calls[id(call)] = call
        return _current.set(call)

    def leave(self, call: InFlight, token: contextvars.Token[InFlight | None]) -> None:
        self._calls.pop(id(call), None)
        _current.reset(token)
        for scope in list(call.asking):  # the upstream no longer waits for these answers
            scope.cancel()

    def owner(self) -> tuple[InFlight | None, str]:
        """The call an upstream request belongs to, or None and why it cannot be told."""
        current = _current.get()
        if current is not None and id(current) in self._calls:
            return current, ""
        calls = list(self._calls.values())
        if not calls:
            return None, "no call of the orchestrator to this server is in progress"
        if len({id(c.caller) for c in calls}) == 1:
            return calls[0], ""
        return None, (
            f"{len(calls)} calls from different clients of the orchestrator are in progress "
            "and the request does not say which one it belongs to"
        )


class Forwarder:
    """The client callbacks of one upstream session, routing each request to its call's context."""

    def __init__(self, server: str, calls: Calls, log: logging.Logger) -> None:
        self.server = server
        self.calls = calls
        self.log = log

    def _refuse(self, what: str, why: str) -> ErrorData:
        self.log.info("refused a %s request of upstream '%s': %s", what, self.server, why)
        return ErrorData(code=INVALID_REQUEST, message=why)

    async def sampling(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData:
        call, why = self.calls.owner()
        if call is None:
            return self._refuse("sampling", why)
        forward: SamplingForward | None = call.ctx.extras.get("sampling")
        if forward is None:
            return self._refuse("sampling", "the client of the orchestrator does not support sampling")
        return await self._ask(call, forward, params)

    async def elicitation(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        call, why = self.calls.owner()
        if call is None:
            return self._refuse("elicitation", why)
        forward: ElicitationForward | None = call.ctx.extras.get("elicitation")
        if forward is None:
            return self._refuse("elicitation", "the client of the orchestrator does not support elicitation")
        return await self._ask(call, forward, params)

    async def _ask(self, call: InFlight, forward: Callable[[P], Awaitable[R]], params: P) -> R | ErrorData:
        with call.clock.paused(), anyio.CancelScope() as scope:
            call.asking.add(scope)
            try:
                return await forward(params)
            except MCPError as exc:  # our client said no: the upstream hears the same
                return exc.error
            finally:
                call.asking.discard(scope)
        return ErrorData(code=INVALID_REQUEST, message="the call this request belongs to has ended")

    async def logging(self, params: LoggingMessageNotificationParams) -> None:
        data = params.data
        text = data if isinstance(data, str) else repr(data)
        if params.logger:
            text = f"{params.logger}: {text}"
        call, _ = self.calls.owner()
        level = _LEVELS.get(str(params.level), "info")
        if call is not None:
            await call.ctx.log(level, f"[{self.server}] {text}")
        else:
            self.log.log(logging.getLevelNamesMapping()[level.upper()], "%s", text)
