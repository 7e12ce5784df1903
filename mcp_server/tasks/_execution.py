"""Parked executions: a tool body that keeps running in the server between the client's requests.

A call that needs the client's model when the client cannot be asked mid-call (2026-07-28), and
every call run as a task, runs its body as an `Execution`: an asyncio task of the server, not of
the request. Its model calls wait in its `InputInbox` until the client answers (the next round
of the call, or `tasks/update` / `tasks/result`); everything else about the body stays as it is.
So a round continues the work instead of replaying it: finished tool calls are not repeated, the
body's clock runs from the first round, and progress goes on from where it was.

Progress and log messages of the body go to whoever is attached now (the current round's
request), and always to `listeners` (a task's record).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from mcp_types import CallToolResult

from skills.core.base import LogFn, LogLevel, ProgressFn

if TYPE_CHECKING:
    from adapters.models import InputInbox

__all__ = ["Execution", "ExecutionHost", "first_of"]

log = logging.getLogger("mcp_server.tasks")

Listener = Callable[["Execution"], None]


class Execution:
    """One tool body running apart from the requests that drive it."""

    def __init__(
        self, *, tool: str, requester: str, principal: str | None, inbox: InputInbox | None, idle_limit: float
    ) -> None:
        self.id = secrets.token_urlsafe(24)
        self.tool = tool
        self.requester = requester
        self.principal = principal
        self.inbox = inbox
        self.idle_limit = idle_limit
        """Seconds it may wait for the client with no one attached before it is stopped."""
        self.run_ids: list[str] = []
        """Pipeline runs the body started (the first is the call's own)."""
        self.result: CallToolResult | None = None
        self.expired = False
        self.finished = anyio.Event()
        self.progress: tuple[float, float | None, str | None] | None = None
        self.listeners: list[Listener] = []
        self.touched = time.monotonic()
        self._attached = 0
        self._progress_sink: ProgressFn | None = None
        self._log_sink: LogFn | None = None
        self._scope = anyio.CancelScope()
        self._task: asyncio.Task[None] | None = None

    # -- what the body sees ----------------------------------------------------------------------
    async def report(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """The body's progress: to the attached request, and to the listeners."""
        self.progress = (done, total, message)
        self._tell()
        sink = self._progress_sink
        if sink is not None:
            await _quietly(sink(done, total, message), "progress")

    async def log(self, level: LogLevel, message: str) -> None:
        sink = self._log_sink
        if sink is not None:
            await _quietly(sink(level, message), "log")
        else:
            log.log(logging.getLevelNamesMapping()[level.upper()], "%s: %s", self.tool, message)

    # -- who drives it ---------------------------------------------------------------------------
    def attach(self, progress: ProgressFn | None, log_fn: LogFn | None) -> None:
        self._attached += 1
        self._progress_sink, self._log_sink = progress, log_fn
        self.touched = time.monotonic()

    def detach(self) -> None:
        self._attached = max(0, self._attached - 1)
        if not self._attached:
            self._progress_sink = self._log_sink = None
        self.touched = time.monotonic()

    @property
    def waiting(self) -> bool:
        """Paused: the body waits for answers from the client."""
        return bool(self.inbox is not None and self.inbox.pending) and not self.finished.is_set()

    async def next_stop(self) -> bool:
        """Wait until the body finished (True) or waits for the client (False)."""
        while not self.finished.is_set():
            asked = self.inbox.next_request() if self.inbox is not None else None
            if self.waiting:
                assert self.inbox is not None
                await self.inbox.settle()  # parallel model calls join the same round
                if self.waiting:
                    return False
                continue
            await first_of(self.finished.wait, asked.wait if asked is not None else None)
        return True

    def cancel(self) -> None:
        self._scope.cancel()

    # -- running ---------------------------------------------------------------------------------
    def start(self, body: Callable[[], Awaitable[CallToolResult]], on_end: Callable[[Execution], None]) -> None:
        """Run `body` as a task of the server (it survives the request that started it)."""
        self._task = asyncio.get_running_loop().create_task(self._main(body, on_end), name=f"call {self.tool}")

    async def _main(self, body: Callable[[], Awaitable[CallToolResult]], on_end: Callable[[Execution], None]) -> None:
        try:
            with self._scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._watch_idle, tg.cancel_scope)
                    self.result = await body()
                    tg.cancel_scope.cancel()
        except Exception:  # why: the body turns every failure into a result; anything else is a bug to log
            log.exception("the call of %s ended with an unexpected error", self.tool)
        finally:
            self.finished.set()
            on_end(self)
            self._tell()

    async def _watch_idle(self, scope: anyio.CancelScope) -> None:
        """Stop the body when it has waited for a client that did not come back (`idle_limit`)."""
        while True:
            left = self.touched + self.idle_limit - time.monotonic()
            if left <= 0 and self.waiting and not self._attached:
                log.info("%s: no one came back for its paused call within %gs; stopped", self.tool, self.idle_limit)
                self.expired = True
                self._scope.cancel()
                return
            await anyio.sleep(max(left, 0.05) if left > 0 else min(self.idle_limit, 1.0))

    async def wait_closed(self) -> None:
        if self._task is not None:
            await asyncio.wait([self._task])

    def _tell(self) -> None:
        for listener in list(self.listeners):
            listener(self)


class ExecutionHost:
    """The executions of one server: found by id, bounded per requester, stopped at shutdown."""

    def __init__(self) -> None:
        self._live: dict[str, Execution] = {}
        self.users = 0
        """Open server lifespans (connections for in-memory and stdio, one for HTTP)."""

    def get(self, execution_id: str) -> Execution | None:
        return self._live.get(execution_id)

    def count(self, requester: str, *, waiting_only: bool = False) -> int:
        return sum(1 for e in self._live.values() if e.requester == requester and (e.waiting or not waiting_only))

    def start(self, execution: Execution, body: Callable[[], Awaitable[CallToolResult]]) -> None:
        self._live[execution.id] = execution
        execution.start(body, self._ended)

    def forget(self, execution: Execution) -> None:
        self._live.pop(execution.id, None)

    def _ended(self, execution: Execution) -> None:
        if execution.result is None:  # cancelled or broken: nobody fetches it
            self._live.pop(execution.id, None)

    async def aclose(self) -> None:
        """Stop every execution (the server is stopping): their runs are recorded as cancelled."""
        live = list(self._live.values())
        for execution in live:
            execution.cancel()
        with anyio.move_on_after(10, shield=True):
            for execution in live:
                await execution.wait_closed()
        self._live.clear()


async def first_of(*waits: Callable[[], Awaitable[Any]] | None) -> None:
    """Return as soon as one of `waits` returns."""
    async with anyio.create_task_group() as tg:

        async def one(wait: Callable[[], Awaitable[Any]]) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            if wait is not None:
                tg.start_soon(one, wait)


async def _quietly(pending: Awaitable[None], what: str) -> None:
    """Send to a request that may be gone (the client left mid-round): losing a message is fine."""
    try:
        await pending
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
        log.debug("a %s message found its request gone: %r", what, exc)
    except Exception as exc:  # why: a peer gone in a way the transport names differently must not stop the work
        log.debug("a %s message could not be sent: %r", what, exc)
