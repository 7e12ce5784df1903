"""Tasks: a tool call that returns a handle at once and runs on in the server.

A client that declares the tasks extension on its `tools/call` (2026-07-28), or sends the call
with `task` (2025-11-25, for a tool whose `execution.taskSupport` is `optional`), gets a task
for pipelines, agents and the long meta tools. The call runs as an `Execution` whose state is
written to the `TaskStore` as it changes, so `tasks/get` from any connection (and `orchestrator
runs`) sees it, the result outlives the connection, and a task whose server stopped is reported
failed with the run id that resumes its pipeline run. In the distributed mode a task whose run a
worker drives outlives its replica instead: another replica adopts it (`_adopt`).

Who may see a task: the identity that created it (the authenticated principal); on a transport
without authentication the task id (192 random bits) is the key, as both specs allow.
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp_types import CallToolResult

from pipelines.storage.owner import Heartbeat
from skills import SkillContext
from skills.core.base import LogFn, LogLevel, ProgressFn
from skills.core.errors import LimitExceededError

from .._results import error_result
from ._adopt import Adopter
from ._execution import Execution, ExecutionHost
from ._target import RUN_IDS_KEY, CallTarget, Handles, identity_of, seen_tasks
from .postgres import PostgresTaskStore
from .store import TaskLimits, TaskRecord, TaskState, TaskStore

if TYPE_CHECKING:
    from pipelines.service import PipelineService

__all__ = ["TaskService"]

log = logging.getLogger("mcp_server.tasks")

PROGRESS_WRITE_EVERY = 0.5
"""Seconds between writes of a task's progress to the store (status changes are written at once)."""


class TaskService:
    """The tasks and parked calls of one server."""

    def __init__(
        self,
        store: TaskStore,
        limits: TaskLimits,
        *,
        pipelines: PipelineService | None,
        sinks: Callable[[Any, str], tuple[ProgressFn | None, LogFn | None]],
        targets: Callable[[str], CallTarget | CallToolResult] | None = None,
    ) -> None:
        self.store = store
        self.targets = targets
        """The tool of a name as the call path needs it: an adopted task's result takes its shape."""
        self.limits = limits
        self.pipelines = pipelines
        self.sinks = sinks
        """The progress and log channels of a request (to attach a round to its execution)."""
        self.host = ExecutionHost()
        self.handles: Handles | None = None
        """The server's run handles (`.._handles`): a long call without a task may answer with one."""
        self.tasks: dict[str, Execution] = {}
        """Executions of the tasks this process runs, by task id."""
        self.records: dict[str, TaskRecord] = {}
        """Current records of the tasks this process runs (fresher than the store)."""
        self.done: dict[str, TaskRecord] = {}
        """Records of tasks that finished here, until their store write is surely done."""
        self._recovered = False
        self._handing_over = False
        """Set while the server stops with replicas to take its queued tasks over (`aclose`)."""
        # Replicas on other machines tell a live task from an orphan by its heartbeat.
        self._heartbeat = Heartbeat(lambda task_ids: store.beat(list(task_ids)))
        self._written: dict[str, float] = {}
        self._dirty: dict[str, TaskRecord] = {}
        self._flushing: dict[str, anyio.Event] = {}
        # Shared state: the client of a task may come back through another replica.
        self.relay = (
            store.relay(functools.partial(self._changed, force=True), self.tasks)
            if isinstance(store, PostgresTaskStore)
            else None
        )
        self.adopter = Adopter(self, store) if isinstance(store, PostgresTaskStore) else None
        """Takes over the tasks of replicas that stopped (shared state only)."""

    async def in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking store call in a worker thread (SQLite and Postgres stores block)."""
        return await anyio.to_thread.run_sync(fn, *args)

    # -- start-up --------------------------------------------------------------------------------
    async def recover(self) -> None:
        """Once per process: tasks whose server stopped are failed, naming the run that resumes them.

        In the shared state, a task whose run a worker drives is adopted instead (`_adopt`), and
        this replica keeps looking for such tasks while it serves.
        """
        if self._recovered:
            return
        self._recovered = True
        if self.adopter is not None and self.relay is not None:  # replicas die while this one serves
            await self.adopter.look()
            self.relay.spawn(self.adopter.sweep(), "adopt the tasks of stopped replicas")
        else:
            for record in await self.in_thread(self.store.orphans):
                await self.fail_orphan(record)
        await self.in_thread(self.store.purge, time.time())

    async def fail_orphan(self, record: TaskRecord) -> None:
        """A task whose server stopped, failed naming the run that resumes it."""
        how = f"; `orchestrator runs resume {record.run_id}` continues its run" if record.run_id else ""
        message = f"the server stopped while this task ran{how}"
        error = {"code": -32603, "message": message, "data": {"run_id": record.run_id}}
        update = record.with_(status="failed", status_message=message, error=error, updated=time.time())
        await self.in_thread(self.store.save, update)
        log.info("task %s of %s: %s", record.task_id[:8], record.tool, message)

    # -- creating --------------------------------------------------------------------------------
    async def create(
        self,
        target: CallTarget,
        arguments: dict[str, Any],
        context: Any,
        ctx: SkillContext,
        *,
        era: str,
        ttl_ms: int | None,
        bound: Callable[[], Any],
    ) -> TaskRecord | CallToolResult:
        """Start the call as a task; its record (or a limit error when the client has too many)."""
        await self.recover()
        principal, requester, client, _ = identity_of(context)
        refused = None
        if len(self.tasks) >= self.limits.max_total:
            refused = LimitExceededError(
                f"the server already runs {self.limits.max_total} unfinished tasks of all its clients",
                limit=f"unfinished tasks per server <= {self.limits.max_total}",
                hint="call again when some have finished (tasks: max_total in config.yaml raises it)",
            )
        elif await self.in_thread(self.store.active, requester) >= self.limits.max_per_client:
            # every session of one identity (or, unauthenticated over HTTP, of one address) counts
            refused = LimitExceededError(
                f"this client already has {self.limits.max_per_client} unfinished tasks",
                limit=f"unfinished tasks per client <= {self.limits.max_per_client}",
                hint="wait for them or cancel some (tasks: max_per_client in config.yaml raises it)",
            )
        if refused is not None:
            log.warning("task refused for %s: %s", client or requester, refused.message)
            return error_result(refused, output_schema=target.output_schema)
        limit = int(self.limits.max_ttl_hours * 3_600_000)
        ttl = min(ttl_ms, limit) if ttl_ms else int(self.limits.ttl_hours * 3_600_000)
        now = time.time()
        record = TaskRecord(
            task_id=secrets.token_urlsafe(24),
            tool=target.name,
            status="working",
            created=now,
            updated=now,
            ttl_ms=max(60_000, ttl),
            principal=principal,
            requester=requester,
            client=client,
            era="extension" if era == "extension" else "core",
            arguments=arguments,
            status_message="started",
        )
        await self.in_thread(self.store.create, record)  # durable before the handle is returned (both specs)
        request = getattr(context, "request_context", None)
        if request is not None:
            seen_tasks(request).add(record.task_id)  # its connection lists it (2025-11-25 `tasks/list`)
        from adapters.models import INBOX_KEY, InputInbox

        inbox = ctx.extras.get(INBOX_KEY)
        execution = Execution(
            tool=target.name,
            requester=requester,
            principal=principal,
            inbox=inbox if isinstance(inbox, InputInbox) else None,
            idle_limit=record.ttl_ms / 1000 if record.ttl_ms else float("inf"),
        )
        ctx.progress_fn, ctx.log_fn = execution.report, execution.log
        if self.adopter is not None:  # shared state: another replica adopts the task by its run id
            ctx.log_fn = self._noting_runs(record.task_id, execution)
        ctx.extras[RUN_IDS_KEY] = execution.run_ids
        async with bound():
            self.run_here(record, execution, target.body(arguments, ctx))
        log.info("task %s: %s started for %s", record.task_id[:8], target.name, client or requester)
        return record

    def _noting_runs(self, task_id: str, execution: Execution) -> LogFn:
        """The task's log channel, which also puts its run id on record as soon as the run says it
        started (progress may come much later, and the replica may die before)."""

        async def log_fn(level: LogLevel, message: str) -> None:
            record = self.records.get(task_id)
            if execution.run_ids and record is not None and record.run_id is None:
                self._changed(task_id, execution)
            await execution.log(level, message)

        return log_fn

    def run_here(self, record: TaskRecord, execution: Execution, body: Callable[[], Awaitable[CallToolResult]]) -> None:
        """Run a task's body in this process (made here, or adopted), its record kept in the store."""
        task_id = record.task_id
        self.tasks[task_id] = execution
        self.records[task_id] = record
        execution.listeners.append(lambda e: self._changed(task_id, e))
        self._heartbeat.add(task_id)
        self.host.start(execution, body)
        if self.relay is not None:
            self.relay.started(task_id, execution)

    # -- reading ---------------------------------------------------------------------------------
    async def find(self, task_id: str, context: Any) -> TaskRecord | None:
        """The task as it is now, if this requester may see it (else None: it does not exist for them)."""
        await self.recover()
        record = self.records.get(task_id) or self.done.get(task_id) or await self.in_thread(self.store.get, task_id)
        if record is None:
            return None
        if record.principal != identity_of(context).principal:
            return None
        execution = self.tasks.get(task_id)
        if execution is None and self.adopter is not None and not record.terminal:
            await self.adopter.take_over(task_id)  # its replica may be gone
            execution = self.tasks.get(task_id)
            record = self.records.get(task_id) or await self.in_thread(self.store.get, task_id) or record
        if execution is None and self.relay is not None and record.status == "input_required":
            # another replica runs it: its requests are in the store (none yet: on their way)
            if not await self.relay.refresh(task_id):
                record = record.with_(status="working")
        return self._live(record, execution) if execution is not None else record

    def execution(self, task_id: str) -> Execution | None:
        return self.tasks.get(task_id)

    def pending(self, task_id: str) -> dict[str, dict[str, Any]]:
        """The input requests the task waits on (wire dicts by key), wherever it runs."""
        execution = self.tasks.get(task_id)
        if execution is not None:
            inbox = execution.inbox
            return {
                key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
                for key, request in (inbox.pending.items() if inbox is not None else ())
            }
        return self.relay.remote.get(task_id, {}) if self.relay is not None else {}

    async def answer(self, task_id: str, responses: dict[str, Any]) -> None:
        """The client's answers to the task's input requests, wherever it runs."""
        execution = self.tasks.get(task_id)
        if self.relay is None:
            if execution is not None and execution.inbox is not None:
                execution.inbox.answer(responses)
        elif execution is not None:
            await self.relay.answer_here(task_id, execution, responses)
        else:
            await self.relay.answer(task_id, responses)

    def _live(self, record: TaskRecord, execution: Execution) -> TaskRecord:
        status: TaskState = "input_required" if execution.waiting else record.status
        progress = execution.progress
        message = record.status_message
        if progress is not None and not record.terminal:
            done, total, text = progress
            count = f"{done:g}/{total:g}" if total else f"{done:g}"
            message = f"{text} ({count})" if text else count
        if status == "input_required":
            message = "waiting for the client's model" + (f": {message}" if message else "")
        return record.with_(
            status=status,
            status_message=message,
            progress=(progress[0], progress[1]) if progress else record.progress,
            run_id=execution.run_ids[0] if execution.run_ids else record.run_id,
        )

    # -- changing --------------------------------------------------------------------------------
    async def cancel(self, task_id: str) -> TaskRecord:
        """Stop a task (its pipeline run is recorded as cancelled and can be resumed by its run id)."""
        record = self.records.get(task_id) or await self.in_thread(self.store.get, task_id)
        assert record is not None
        execution = self.tasks.get(task_id)
        if execution is not None:
            execution.cancel()
            with anyio.move_on_after(5):
                await execution.finished.wait()
            return self.records.get(task_id, record)
        if self.relay is not None:  # another replica runs it: it stops the run there
            stopped = await self.relay.cancel(task_id)
            if stopped is not None and stopped.terminal:
                return stopped
        cancelled = record.with_(status="cancelled", status_message="cancelled", updated=time.time())
        await self.in_thread(self.store.save, cancelled)
        return cancelled

    def _changed(self, task_id: str, execution: Execution, *, force: bool = False) -> None:
        """An execution changed: write its task's record (progress at most every half second;
        `force`: now, as another replica may have changed the stored status)."""
        record = self.records.get(task_id)
        if record is None:
            return
        now = time.monotonic()
        finished = execution.finished.is_set()
        if finished:
            if execution.result is not None:
                result = execution.result.model_dump(by_alias=True, mode="json", exclude_none=True)
                update = self._live(record, execution).with_(status="completed", result=result)
                update = update.with_(status_message=_summary(update))
            else:
                run = execution.run_ids[0] if execution.run_ids else None
                if self._handing_over and run is not None and not execution.expired:
                    # the server stops, the run goes on on its worker: left as it is, for another
                    # replica to adopt once this process is gone
                    self.tasks.pop(task_id, None)
                    self.records.pop(task_id, None)
                    self._heartbeat.remove(task_id)
                    return
                why = "it waited too long for input" if execution.expired else "cancelled"
                how = f"; `orchestrator runs resume {run}` continues its run" if run else ""
                update = record.with_(status="cancelled", status_message=f"{why}{how}", run_id=run)
            self.tasks.pop(task_id, None)
            self.records.pop(task_id, None)
            self._heartbeat.remove(task_id)
            self.host.forget(execution)  # its result is on record: the execution need not stay in memory
        else:
            update = self._live(record, execution)
            if (
                not force
                and update.status == record.status
                and update.run_id == record.run_id  # a run id goes on record at once: adoption needs it
                and now - self._written.get(task_id, 0.0) < PROGRESS_WRITE_EVERY
            ):
                return
            self.records[task_id] = update
        self._written[task_id] = now
        update = update.with_(updated=time.time())
        if finished:
            self._written.pop(task_id, None)
            self.done[task_id] = update
            while len(self.done) > 1000:
                self.done.pop(next(iter(self.done)))
        self._queue(update)

    def _queue(self, record: TaskRecord) -> None:
        """Write `record` soon, in order: the writes of one task never overtake each other."""
        self._dirty[record.task_id] = record
        if record.task_id not in self._flushing:
            self._flushing[record.task_id] = anyio.Event()
            _spawn(self._flush(record.task_id), f"save task {record.task_id[:8]}")

    async def _flush(self, task_id: str) -> None:
        try:
            while (record := self._dirty.pop(task_id, None)) is not None:
                await self.in_thread(self.store.save, record)
        finally:
            self._flushing.pop(task_id).set()

    async def aclose(self) -> None:
        """Stop what runs (recorded as cancelled: resumable) and finish the writes.

        With the shared state and a queue (a replica), a task whose run a worker drives is handed
        over instead: its run goes on and its record stays as it is, so another replica adopts it
        once this process is gone (a rolling restart loses no task)."""
        queue = self.pipelines.queue if self.pipelines is not None else None
        if self.adopter is not None and queue is not None:
            queue.detach()
            self._handing_over = True
        await self.host.aclose()
        if self.relay is not None:
            await self.relay.aclose()
        with anyio.move_on_after(10, shield=True):
            for done in list(self._flushing.values()):
                await done.wait()


def iso(ts: float) -> str:
    """An ISO 8601 UTC timestamp, as both specs want them."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _summary(record: TaskRecord) -> str:
    if record.is_error:
        return "finished with an error"
    return "finished" + (f" (run {record.run_id})" if record.run_id else "")


def _spawn(work: Awaitable[Any], what: str) -> None:
    """Run a store write without holding up the body (it is awaited by nobody; failures are logged)."""
    import asyncio

    async def run() -> None:
        try:
            await work
        except Exception:  # why: a write nobody awaits must say why it failed somewhere
            log.exception("could not %s", what)

    task = asyncio.get_running_loop().create_task(run())
    _PENDING.add(task)
    task.add_done_callback(_PENDING.discard)


_PENDING: set[Any] = set()
