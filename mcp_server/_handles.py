"""Run handles: a long call that outlives the client's patience answers with its run id instead.

Many hosts cap a tool call at about a minute and do not speak MCP tasks. A call of a long tool
(a pipeline, an agent skill, `create_skill`, `plan_and_run`, `orchestrate`, `spawn_agent`,
`run_pipeline`) from a client that did not ask for a task runs as a `LiveRun`: a task of the
server, not of the request. The request waits for it and passes its progress on; if it is still
running after `after` seconds (`serve --handle-after`, default 45, `0` never), the request
answers a successful result `{"run_id", "status": "running", "progress", "hint"}` and the run
goes on. The client follows it with `get_run` (which can wait for its end), `list_runs`, and
stops it with `cancel_run` (`_runs`), through any replica: a pipeline run is in the run store
already; any other call handed over gets a run record of kind `tool` there, finished with its
result or error envelope when it ends.

A call that ends before `after` answers as it always did, and records nothing more: the only
cost of handles on a call is starting its body as a task.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread
from mcp_types import CallToolResult, TextContent

from pipelines.asking import ASK_KEY
from pipelines.storage.runs import LOCAL, STARTED_BY_KEY
from skills import SkillCancelledError
from skills.core.base import LogFn, LogLevel, ProgressFn
from skills.core.errors import error_envelope
from skills.core.schema import nullable

from ._results import error_result
from .tasks import RUN_IDS_KEY

if TYPE_CHECKING:
    from pipelines.storage.runs import RunStore
    from skills import SkillContext

    from .tasks import CallTarget

__all__ = ["DEFAULT_HANDLE_AFTER", "HANDLES_KEY", "LiveRun", "RunHandles", "handle_schema"]

log = logging.getLogger("mcp_server.runs")

DEFAULT_HANDLE_AFTER = 45.0
"""Seconds a long call runs before it answers with a run handle (below the ~60 s many hosts allow)."""
HANDLES_KEY = "run_handles"
"""`ctx.extras` key: the server's `RunHandles` (the run meta tools cancel and wait through it)."""

_STOP_WAIT = 10.0
"""Seconds a cancelled call waits for its work to stop and record how it ended."""

_HANDLE_FIELDS: dict[str, Any] = {
    "run_id": {"type": "string", "description": "Identifier of this run (get_run, cancel_run, runs show)."},
    "status": {"type": "string", "description": "`running`: the call answered with a run handle."},
    "progress": {
        **nullable({"type": "object"}),
        "description": "The run's latest progress: {progress, total, message}.",
    },
    "hint": {"type": "string", "description": "How to follow the run."},
}


def handle_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """A long tool's output schema that also admits its run handle (its own result unchanged)."""
    if schema is None:
        return None
    props: dict[str, Any] = dict(schema.get("properties") or {})
    for name, field in _HANDLE_FIELDS.items():
        props[name] = {"anyOf": [props[name], field]} if name in props else field
    out = {**schema, "properties": props}
    required = out.pop("required", None)
    if required:
        out["anyOf"] = [{"required": list(required)}, {"required": ["run_id", "status", "hint"]}]
    return out


class LiveRun:
    """One long call running in this process, apart from the request that started it."""

    def __init__(self, target: CallTarget, ctx: SkillContext) -> None:
        self.tool = target.name
        self.is_pipeline = target.is_pipeline
        self.owner = str(ctx.extras.get(STARTED_BY_KEY) or LOCAL)
        self.own_id = ctx.run_id
        """The run id of a tool run (a call that is not a pipeline run of its own)."""
        self.run_ids: list[str] = []
        """Pipeline runs the call started (a pipeline tool's own run is the first)."""
        self.result: CallToolResult | None = None
        self.finished = anyio.Event()
        self.recorded = anyio.Event()
        """Set once the run's record exists (a tool run's is written when the handle is given)."""
        self.handed = False
        self.arguments: dict[str, Any] = {}
        self.progress: dict[str, Any] | None = None
        self._extras = ctx.extras
        self._progress_sink: ProgressFn | None = ctx.progress_fn
        self._log_sink: LogFn | None = ctx.log_fn
        self._scope = anyio.CancelScope()
        self._task: asyncio.Task[None] | None = None
        self.finished_callbacks: list[Callable[[], None]] = []

    @property
    def run_id(self) -> str:
        """The run's id: the pipeline's own run, else the tool run's."""
        return self.run_ids[0] if self.is_pipeline and self.run_ids else self.own_id

    @property
    def kind(self) -> str:
        return "pipeline" if self.is_pipeline and self.run_ids else "tool"

    async def report(self, done: float, total: float | None = None, message: str | None = None) -> None:
        self.progress = {"progress": done, "total": total, "message": message}
        sink = self._progress_sink
        if sink is not None:
            await _quietly(sink(done, total, message))

    async def log(self, level: LogLevel, message: str) -> None:
        sink = self._log_sink
        if sink is not None:
            await _quietly(sink(level, message))
        else:
            log.log(logging.getLevelNamesMapping()[level.upper()], "%s: %s", self.tool, message)

    def detach(self) -> None:
        """The request answered with the handle: progress and logs no longer go to it, and its
        pipelines' later `ask:` questions wait for `answer_run` (no one is there to ask)."""
        self._progress_sink = self._log_sink = None
        self._extras.pop(ASK_KEY, None)

    def cancel(self) -> None:
        self._scope.cancel()

    def start(self, body: Callable[[], Awaitable[CallToolResult]], ended: Callable[[LiveRun], Awaitable[None]]) -> None:
        self._task = asyncio.get_running_loop().create_task(self._main(body, ended), name=f"run {self.tool}")

    async def _main(self, body: Callable[[], Awaitable[CallToolResult]], ended: Callable[[LiveRun], Awaitable[None]]):
        try:
            with self._scope:
                self.result = await body()
        except Exception:  # why: the body makes every failure a result; anything else is a bug to log
            log.exception("the call of %s ended with an unexpected error", self.tool)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await ended(self)
                finally:
                    self.finished.set()
                    for callback in self.finished_callbacks:
                        callback()

    async def wait_closed(self) -> None:
        if self._task is not None:
            await asyncio.wait([self._task])


class RunHandles:
    """The long calls of one server that may answer with a handle, and those that did."""

    def __init__(self, after: float, store: RunStore | None) -> None:
        self.after = after
        self.store = store
        self.live: dict[str, LiveRun] = {}
        """Runs handed over and still running here, by run id (cancel and wait find them here)."""
        self.running: set[LiveRun] = set()
        """Every long call under way here, handed over or not (stopped when the server stops)."""

    def applies(self, target: CallTarget) -> bool:
        return self.after > 0 and target.may_task and self.store is not None

    async def call(
        self,
        target: CallTarget,
        arguments: dict[str, Any],
        ctx: SkillContext,
        body: Callable[[], Awaitable[CallToolResult]],
    ) -> CallToolResult:
        """Run a long call's `body`; its result if it ends within `after`, else its run handle."""
        live = LiveRun(target, ctx)
        live.arguments = arguments
        ctx.progress_fn, ctx.log_fn = live.report, live.log
        given = ctx.extras.get(RUN_IDS_KEY)
        if isinstance(given, list):
            live.run_ids = given  # pyright: ignore[reportUnknownMemberType]  # the caller's list of run ids
        else:
            ctx.extras[RUN_IDS_KEY] = live.run_ids
        self.running.add(live)
        live.finished_callbacks = [lambda: self.running.discard(live)]
        live.start(body, self._ended)
        try:
            with anyio.move_on_after(self.after):
                await live.finished.wait()
        except BaseException:  # the request was cancelled before a handle: its work stops with it
            live.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_WAIT):
                await live.finished.wait()  # its run is recorded cancelled before the request ends
            raise
        if live.finished.is_set():
            return live.result or _cancelled(target)
        live.handed = True
        live.detach()
        await self._record(live, target, ctx)
        return self.handle(live)

    def handle(self, live: LiveRun) -> CallToolResult:
        run_id = live.run_id
        data: dict[str, Any] = {
            "run_id": run_id,
            "status": "running",
            "progress": live.progress,
            "hint": f"the run goes on in the server: call get_run with run_id {run_id} (and wait: 30 to wait "
            f"for its end) for its progress and outputs; cancel_run stops it",
        }
        if live.owner.startswith("request:"):  # no identity outlives this request: no one could come back
            data["hint"] += (
                "; this client has no identity beyond one request (no session, no authentication): send "
                "an Authorization bearer token with every request to come back to its runs"
            )
        text = json.dumps(data, ensure_ascii=False, indent=1)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)

    async def _record(self, live: LiveRun, target: CallTarget, ctx: SkillContext) -> None:
        """Keep the handed-over run findable: a pipeline run is recorded already; a tool run now."""
        self.live[live.run_id] = live
        try:
            if live.kind == "tool" and self.store is not None:
                arguments, store, owner = live.arguments, self.store, live.owner
                artifacts = ctx.artifact_dir or Path()

                def record() -> None:
                    store.start(live.own_id, target.name, None, arguments, artifacts, started_by=owner)
                    store.set_kind(live.own_id, "tool")

                await anyio.to_thread.run_sync(record)
        finally:
            live.recorded.set()

    async def _ended(self, live: LiveRun) -> None:
        """A handed-over tool run ended: its record says how (a pipeline run records itself)."""
        if not live.handed:
            return
        await live.recorded.wait()
        try:
            if live.kind == "tool" and self.store is not None:
                await anyio.to_thread.run_sync(self._finish, live)
        except Exception as exc:  # why: the store out of reach: the run's end is logged, nothing else to do
            log.warning("run %s of %s: could not record its end: %s", live.run_id, live.tool, exc)
        finally:
            self.live.pop(live.run_id, None)

    def _finish(self, live: LiveRun) -> None:
        assert self.store is not None
        result = live.result
        if result is None:
            envelope = error_envelope(SkillCancelledError(f"run {live.run_id} was cancelled", hint="call it again"))
            self.store.finish(live.own_id, "cancelled", error="cancelled", envelope=envelope)
            return
        data = _data_of(result)
        if result.is_error:
            body: dict[str, Any] = data.get("error") if isinstance(data.get("error"), dict) else {}  # pyright: ignore[reportAssignmentType]
            status = "cancelled" if body.get("type") == "cancelled" else "failed"
            message = str(body.get("message") or "the call failed")
            self.store.finish(live.own_id, status, error=message, envelope={"error": body} if body else None)
        else:
            self.store.finish(live.own_id, "succeeded", result=data)

    def cancel(self, run_id: str) -> bool:
        """Cancel a run handed over here; False when none runs here under that id."""
        live = self.live.get(run_id)
        if live is None:
            return False
        live.cancel()
        return True

    async def wait(self, run_id: str, seconds: float) -> bool:
        """Wait up to `seconds` for a run handed over here to end; False when none runs here."""
        live = self.live.get(run_id)
        if live is None:
            return False
        with anyio.move_on_after(seconds):
            await live.finished.wait()
        return True

    async def aclose(self) -> None:
        """Stop every long call under way here (the server is stopping): they are recorded cancelled."""
        live = list(self.running)
        for run in live:
            run.cancel()
        with anyio.move_on_after(10, shield=True):
            for run in live:
                await run.wait_closed()


def _data_of(result: CallToolResult) -> dict[str, Any]:
    """A result's structured content, else its JSON text, else `{"text": ...}`."""
    content: Any = result.structured_content
    if isinstance(content, dict):
        return dict(cast("dict[str, Any]", content))
    text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = None
    return dict(parsed) if isinstance(parsed, dict) else {"text": text}  # pyright: ignore[reportUnknownArgumentType]


def _cancelled(target: CallTarget) -> CallToolResult:
    return error_result(
        SkillCancelledError(f"'{target.name}' was stopped before it finished", hint="call it again"),
        output_schema=target.output_schema,
    )


async def _quietly(pending: Awaitable[None]) -> None:
    """Send to a request that may be gone: losing a progress or log message is fine."""
    try:
        await pending
    except Exception as exc:  # why: a request gone in whatever way must not stop the work
        log.debug("a message could not be sent: %r", exc)
