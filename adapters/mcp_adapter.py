"""MCPSkillAdapter: one upstream MCP server, kept connected, its tools published as skills.

One persistent session per upstream, held by a supervisor (`run()`): it connects (stdio
child or HTTP endpoint), lists the tools, follows the upstream's `tools/list_changed`, and
when the connection ends (the child died, the endpoint went away) reconnects with
exponential backoff. Meanwhile calls fail at once with an error that says why and when the
next attempt is; the tools stay published (their last known definitions) so clients and
pipelines keep seeing them. Nothing an upstream does reaches another upstream or our server:
everything that can end a connection is caught at the supervisor, reported in `status()`,
and retried.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal

import anyio
import anyio.abc
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    Implementation,
    SamplingCapability,
    SamplingToolsCapability,
    Tool,
    ToolListChangedNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from skills import SkillContext
from skills.core.errors import plain_text

from ._forward import CallClock, Calls, Forwarder, InFlight
from ._names import sanitize
from ._outcomes import describe_error, first_line, relayable
from ._stderr import StderrTail
from ._transport import open_transport
from .config import ServerConfig
from .errors import UpstreamCallError, UpstreamTimeoutError, UpstreamUnavailableError
from .skill import RemoteSkill, build_skills

__all__ = ["DEFAULT_BACKOFF", "DEFAULT_CONNECT_TIMEOUT", "AdapterState", "MCPSkillAdapter"]

AdapterState = Literal["disabled", "idle", "starting", "connected", "retrying", "closed"]
"""disabled: `enabled: false`; idle: not started; starting: connecting and listing;
connected: serving calls; retrying: the connection ended, waiting for the next attempt; closed: stopped."""

DEFAULT_BACKOFF = (0.5, 30.0)
"""First and longest wait between connection attempts (doubling in between)."""

DEFAULT_CONNECT_TIMEOUT = 120.0
"""Seconds to start, initialize and list; generous because `uvx`/`npx` may download the server first."""

_STABLE = 10.0  # a connection that lasted this long resets the backoff to its first step

OnChange = Callable[["MCPSkillAdapter"], None]


class MCPSkillAdapter:
    """One upstream MCP server (stdio command, or streamable HTTP / SSE url with headers).

    Run it with `run()` inside a task group (what `ServerSource` does), or `start()` and
    `aclose()` from one task, or `async with adapter:`. `on_change` is called (synchronously)
    whenever the state or the imported tools change.
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        on_change: OnChange | None = None,
        backoff: tuple[float, float] = DEFAULT_BACKOFF,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        client_info: Implementation | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.log = logging.getLogger(f"adapters.upstream.{sanitize(config.name)}")
        self.on_change = on_change
        self.backoff = backoff
        self.connect_timeout = connect_timeout
        self.client_info = client_info or Implementation(name="orchestrator", version="0")
        self.state: AdapterState = "idle" if config.enabled else "disabled"
        self.last_error: str | None = None
        """Why the last connection attempt failed or the last connection ended (kept once reconnected)."""
        self.tools: list[Tool] = []
        """The imported tools (include/exclude applied), as last listed; kept while reconnecting."""
        self.excluded: list[str] = []
        """Upstream tools left out by include/exclude."""
        self.tools_version = 0
        self.server_info: Implementation | None = None
        self.server_instructions: str | None = None
        self.protocol_version: str | None = None
        self.connections = 0
        """Successful connections so far (more than one: the upstream was restarted)."""
        self.retry_at: float | None = None
        self._client: Client | None = None
        self._lost: anyio.Event | None = None
        self._lost_reason = ""
        self._relist: anyio.Event | None = None
        self._wake: anyio.Event | None = None
        self._changed: anyio.Event | None = None
        self._calls = Calls()
        self._forward = Forwarder(self.name, self._calls, self.log)
        self._stderr = StderrTail(self.log)
        self._tg: anyio.abc.TaskGroup | None = None
        self._skills: list[RemoteSkill] = []
        self._skills_version = -1

    # -- what it publishes -------------------------------------------------------------------
    @property
    def instructions(self) -> str | None:
        """The config's `instructions`, else what the upstream said at initialize."""
        return self.config.instructions or self.server_instructions

    @property
    def tool_count(self) -> int:
        return len(self.tools)

    def skills(self) -> list[RemoteSkill]:
        """This upstream's tools as skills, named without regard to other upstreams (see `ServerSource`)."""
        if self._skills_version != self.tools_version:
            self._skills, collisions = build_skills([self], self._skills)
            for text in collisions:
                self.log.warning("%s", text)
            self._skills_version = self.tools_version
        return list(self._skills)

    def retry_in(self) -> float | None:
        """Seconds until the next connection attempt, while retrying."""
        if self.state != "retrying" or self.retry_at is None:
            return None
        return max(self.retry_at - anyio.current_time(), 0.0)

    @property
    def first_connection(self) -> bool:
        """Whether the upstream is making its first connection attempt (or has not started yet)."""
        return self.state in ("idle", "starting") and self.connections == 0 and self.last_error is None

    def status(self) -> dict[str, Any]:
        """For `orchestrator servers list`: state, tool count, last error, where it runs."""
        retry = self.retry_in()
        return {
            "name": self.name,
            "transport": self.config.transport,
            "target": self.config.target(),
            "namespace": self.config.namespace,
            "enabled": self.config.enabled,
            "state": self.state,
            "tools": self.tool_count,
            "excluded": len(self.excluded),
            "last_error": self.last_error,
            "retry_in": round(retry, 1) if retry is not None else None,
            "restarts": max(self.connections - 1, 0),
            "protocol_version": self.protocol_version,
            "server": None
            if self.server_info is None
            else {"name": self.server_info.name, "version": self.server_info.version},
            "warnings": [str(w) for w in self.config.warnings],
        }

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the supervisor in the background; returns at once (the connection comes later)."""
        if self._tg is not None:
            return
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self.run)

    async def aclose(self) -> None:
        """Stop the supervisor and close the session (a stdio child is terminated). Same task as `start()`."""
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    async def __aenter__(self) -> MCPSkillAdapter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def wait_for(self, *states: AdapterState) -> AdapterState:
        """Wait until the adapter is in one of `states` (wrap in `anyio.fail_after`)."""
        while self.state not in states:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()
        return self.state

    def retry_now(self) -> None:
        """Cut the current backoff short (e.g. after the user fixed the server)."""
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """The supervisor: connect, serve, reconnect with backoff, until cancelled."""
        if not self.config.enabled:
            self._set("disabled")
            return
        delay = self.backoff[0]
        try:
            while True:
                self._set("starting")
                began = anyio.current_time()
                connections, previous = self.connections, self.last_error
                self.last_error = await self._connection()
                if self.connections > connections and anyio.current_time() - began >= _STABLE:
                    delay = self.backoff[0]
                self.retry_at = anyio.current_time() + delay
                # A server that keeps failing the same way is reported once, then quietly retried.
                news = self.last_error != previous or self.connections > connections
                level = logging.WARNING if news else logging.DEBUG
                self.log.log(level, "upstream '%s': %s; retrying in %.1fs", self.name, self.last_error, delay)
                self._wake = anyio.Event()
                self._set("retrying")
                with anyio.move_on_after(delay):
                    await self._wake.wait()
                delay = min(delay * 2, self.backoff[1])
        finally:
            self._client = None
            self.retry_at = None
            self._set("closed")

    async def probe(self) -> None:
        """Connect once, list the tools and disconnect (`orchestrator servers test`); raises on failure."""
        lost = anyio.Event()
        self._lost = lost
        with anyio.fail_after(self.connect_timeout):
            async with self._open(lost) as client:
                await self._list(client)

    # -- one connection --------------------------------------------------------------------------
    async def _connection(self) -> str:
        """Serve one connection; return why it ended."""
        lost = anyio.Event()
        self._lost, self._lost_reason = lost, ""
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout) as deadline:
                async with self._open(lost) as client, anyio.create_task_group() as tg:
                    # Subscribed before the first listing, so that no change can fall in between.
                    self._relist = relist = anyio.Event()
                    caps = client.server_capabilities.tools
                    if client.protocol_version in MODERN_PROTOCOL_VERSIONS and caps is not None and caps.list_changed:
                        await tg.start(self._listen, client)
                    await self._list(client)
                    deadline.deadline = math.inf
                    self._client = client
                    self.connections += 1
                    self.log.info("upstream '%s' connected: %d tool(s)", self.name, len(self.tools))
                    self._set("connected")
                    tg.start_soon(self._follow, client, relist)
                    await lost.wait()
                    self._client = None
                    tg.cancel_scope.cancel()
            if deadline.cancelled_caught:
                return self.with_stderr(f"no answer to initialize and tools/list within {self.connect_timeout:g}s")
            return self.with_stderr(self._lost_reason or "the connection ended")
        except Exception as exc:  # the boundary of one upstream: whatever ends it is reported and retried
            return self.with_stderr(describe_error(exc))
        finally:
            self._client = None

    @asynccontextmanager
    async def _open(self, lost: anyio.Event) -> AsyncGenerator[Client, None]:
        async with AsyncExitStack() as stack:
            errlog = None
            if self.config.transport == "stdio":
                self._stderr = StderrTail(self.log)
                errlog = await stack.enter_async_context(self._stderr.capture())
            ended = "the server exited" if self.config.transport == "stdio" else "the server closed the connection"
            transport = open_transport(self.config, lambda: self._mark_lost(lost, ended), errlog)
            client = Client(
                transport,
                cache=None,  # listings must be re-read on every list_changed, never served from a cache
                client_info=self.client_info,
                sampling_callback=self._forward.sampling,
                # Whatever our own client can do is forwarded; it answers for itself when it cannot.
                sampling_capabilities=SamplingCapability(tools=SamplingToolsCapability()),
                elicitation_callback=self._forward.elicitation,
                logging_callback=self._forward.logging,
                message_handler=self._on_message,
                log_level="info",
            )
            await stack.enter_async_context(client)
            self.protocol_version = client.protocol_version
            self.server_info = client.server_info
            self.server_instructions = client.instructions
            yield client

    def _mark_lost(self, lost: anyio.Event, reason: str) -> None:
        if not lost.is_set():
            self._lost_reason = reason
            lost.set()

    async def _list(self, client: Client) -> None:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(1000):  # a paginator that never ends cannot hang the supervisor
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        kept = [t for t in tools if self.config.selects(t.name)]
        self.excluded = [t.name for t in tools if not self.config.selects(t.name)]
        if kept != self.tools:
            self.tools = kept
            self.tools_version += 1
            self._set(self.state)

    async def _follow(self, client: Client, relist: anyio.Event) -> None:
        """Re-list whenever the upstream says its tools changed (either protocol era)."""
        while True:
            await relist.wait()
            self._relist = relist = anyio.Event()
            try:
                await self._list(client)
            except (MCPError, ValidationError) as exc:
                self.log.warning("upstream '%s': re-listing tools failed: %s", self.name, exc)
                continue
            self.log.info("upstream '%s' changed its tools: %d now", self.name, len(self.tools))

    async def _listen(self, client: Client, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Follow a 2026-07-28 upstream's tools/list_changed; `started` once subscribed (or refused)."""
        started = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                task_status.started()
                started = True
                async for _ in subscription:
                    if self._relist is not None:
                        self._relist.set()
        except (MCPError, SubscriptionLost, ListenNotSupportedError, TimeoutError) as exc:
            self.log.info("upstream '%s': no tools/list_changed subscription: %s", self.name, exc)
        finally:
            if not started:
                task_status.started()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            if self._relist is not None:
                self._relist.set()
        elif isinstance(message, Exception):
            self.log.warning("upstream '%s': transport error: %s", self.name, message)

    def _set(self, state: AdapterState) -> None:
        self.state = state
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
        if self.on_change is not None:
            self.on_change(self)

    def with_stderr(self, message: str) -> str:
        """`message` followed by the last lines the stdio server wrote to stderr, if any."""
        tail = self._stderr.tail() if self.config.transport == "stdio" else ""
        return f"{message} (stderr: {tail})" if tail else message

    # -- calls -------------------------------------------------------------------------------------
    async def call(self, tool: str, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
        """Call `tool` upstream within the config's timeout; progress, sampling and logs go to `ctx`."""
        client, lost = self._client, self._lost
        if client is None or lost is None or self.state != "connected":
            raise self.unavailable()
        clock = CallClock(self.config.timeout)
        call = InFlight(tool, ctx, clock)
        result: CallToolResult | None = None

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.progress(progress, total, message)

        token = self._calls.enter(call)
        try:
            with clock.scope:
                result = await client.call_tool(tool, arguments, progress_callback=progress)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._mark_lost(lost, "the connection closed during a call")
                raise self._dropped(tool, "closed the connection") from None
            if exc.error.message == "Session terminated":  # an HTTP upstream restarted and forgot our session
                self._mark_lost(lost, "the server ended our session (it restarted?)")
                raise self._dropped(tool, "ended our session") from None
            if exc.code == REQUEST_TIMEOUT:
                raise self._timeout(tool) from None
            said = plain_text(exc.error.message)
            raise UpstreamCallError(
                self.name,
                f"upstream '{self.name}' answered the call to '{tool}' with an error: {said.message}",
                hint=f"the upstream refused the request (JSON-RPC {exc.code})"
                + (f" at {said.where}" if said.where else ""),
            ) from None
        except (ValidationError, RuntimeError) as exc:  # a result that breaks the protocol or its own output schema
            if lost.is_set():  # (or the session was closed under the call)
                raise self._dropped(tool, "closed the connection") from None
            raise UpstreamCallError(
                self.name, f"upstream '{self.name}' answered '{tool}' with an invalid result: {first_line(exc)}"
            ) from None
        finally:
            self._calls.leave(call, token)
        if clock.timed_out or result is None:  # the clock's scope ended the call before its result
            raise self._timeout(tool)
        return relayable(result)

    def _dropped(self, tool: str, what: str) -> UpstreamUnavailableError:
        tail = self._stderr.tail(400) if self.config.transport == "stdio" else ""
        return UpstreamUnavailableError(
            self.name,
            f"upstream '{self.name}' {what} during the call to '{tool}'" + (f" (stderr: {tail})" if tail else ""),
            hint="it is being reconnected; call again in a moment",
        )

    def unavailable(self) -> UpstreamUnavailableError:
        """The error of a call while not connected: why, and when the next attempt is."""
        retry = self.retry_in()
        if self.state == "retrying":
            why = f"{self.last_error or 'its connection ended'}; retrying in {retry:.1f}s"
        elif self.state == "starting":
            why = "still starting" + (f" (last error: {self.last_error})" if self.last_error else "")
        elif self.state == "disabled":
            why = "disabled in servers.json"
        elif self.state == "connected":  # the connection ended a moment ago; the supervisor has yet to notice
            why = f"{self._lost_reason or 'its connection ended'}; it is being reconnected"
        else:
            why = f"not running ({self.state})"
        return UpstreamUnavailableError(
            self.name,
            f"upstream '{self.name}' is not connected: {why}",
            hint="`orchestrator servers list` shows its state and last error",
        )

    def _timeout(self, tool: str) -> UpstreamTimeoutError:
        return UpstreamTimeoutError(
            self.name,
            f"'{tool}' of upstream '{self.name}' did not answer within {self.config.timeout:g}s; "
            "the call was cancelled upstream",
            hint=f'raise "timeout" for "{self.name}" in servers.json',
        )
