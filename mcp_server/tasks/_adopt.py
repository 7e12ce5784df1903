"""A task whose replica is gone while a worker still runs its pipeline: another replica adopts it.

With `--queue`, the replica that created a pipeline task only waits for the run a worker drives.
When that replica dies (`kill -9`, a crash, a lost machine) the run goes on and ends on the
worker; what is lost is only the waiting. So a live replica that finds the task orphaned (its owner is
gone by the test the run history uses, `pipelines.storage.owner.owner_alive`) takes it over: it claims
the record with one conditional `UPDATE` (the owner it saw must still be there; the first
replica wins, the others change nothing), waits for the run to end in the shared run history,
and completes the task with the run's result, or its failure as the same error envelope a
direct call returns. Tasks without a run handed to the workers keep the old ending: failed,
naming the run that resumes them. A replica stopped cleanly hands its queued tasks over the same
way (`TaskService.aclose`: their runs go on, their records stay for another replica to adopt).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.to_thread

from pipelines.errors import PipelineError, StepFailed
from pipelines.storage.owner import BEAT, Owner, owner_alive
from skills import SkillCancelledError, SkillContext, SkillRunError

from ._execution import Execution
from ._sqlite import TASK_COLUMNS, task_record
from ._target import CallTarget
from .store import TaskRecord

if TYPE_CHECKING:
    from mcp_types import CallToolResult

    from pipelines.service import PipelineService
    from pipelines.storage.pgruns import PgRunStore
    from pipelines.storage.runs import RunRecord, RunStore

    from .postgres import PostgresTaskStore

__all__ = ["ADOPT_POLL", "Adopter", "Adopting", "Seen", "claim", "orphaned", "run_outcome"]

log = logging.getLogger("mcp_server.tasks")

ADOPT_POLL = 0.5
"""Seconds between reads of the run history while an adopted task waits for its run (a worker
in another process writes it: no event reaches this one)."""

Seen = tuple[Any, Any, Any, Any, Any]
"""The owner columns of a task's row as read (host, boot, pid, start time, heartbeat)."""

_OWNER = "owner_host, owner_boot, owner_pid, owner_started, heartbeat"
_UNFINISHED = "status IN ('working', 'input_required')"


class Adopting(Protocol):
    """What an `Adopter` uses of its replica's task service (`_service.TaskService`, which makes
    it): declared here, so that this module does not import the one that imports it."""

    pipelines: PipelineService | None
    targets: Callable[[str], CallTarget | CallToolResult] | None

    async def in_thread(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    async def fail_orphan(self, record: TaskRecord) -> None: ...

    def run_here(
        self, record: TaskRecord, execution: Execution, body: Callable[[], Awaitable[CallToolResult]]
    ) -> None: ...


class Adopter:
    """One replica's side: it looks for orphaned tasks (at start-up, every `BEAT` seconds, and
    when a client asks about one) and takes them over."""

    def __init__(self, service: Adopting, store: PostgresTaskStore) -> None:
        self.service = service
        self.store = store

    async def look(self) -> None:
        """Take over every task whose replica is gone."""
        for record in await self.service.in_thread(self.store.orphans):
            await self.take_over(record.task_id)

    async def sweep(self) -> None:
        """`look` every `BEAT` seconds, until cancelled (the server stops)."""
        while True:
            await anyio.sleep(BEAT)
            try:
                await self.look()
            except Exception as exc:  # why: the database out of reach for a while: the next look
                log.warning("could not look for the tasks of stopped replicas: %s", exc)

    async def take_over(self, task_id: str) -> None:
        """If the task's replica is gone: adopt it when a worker drives its run (it completes with
        the run's result), else fail it naming the run that resumes it. Only the replica whose
        claim lands does either; the others leave it alone."""
        found = await self.service.in_thread(orphaned, self.store, task_id)
        if found is None:
            return
        record, seen = found
        adoptable = await self._adoptable(record)
        me = Owner.current()
        message = (
            f"its server stopped; adopted by {me.host}:{me.pid}, which waits for run {record.run_id} on a worker"
            if adoptable is not None
            else "its server stopped"
        )
        if not await self.service.in_thread(claim, self.store, task_id, seen, message):
            return
        if adoptable is None:
            await self.service.fail_orphan(record)
            return
        self._adopt(record.with_(status="working", status_message=message, updated=time.time()), *adoptable)

    async def _adoptable(self, record: TaskRecord) -> tuple[CallTarget, Any] | None:
        """The pipeline tool of a task whose run was handed to the workers, and the pipeline as
        the workers run it: from the YAML the run recorded, so that its failures read the same
        (None: not such a task)."""
        service, run_id, targets = self.service.pipelines, record.run_id, self.service.targets
        if service is None or service.queue is None or run_id is None or targets is None:
            return None
        target = targets(record.tool)
        if not isinstance(target, CallTarget) or not target.is_pipeline:
            return None
        runs: PgRunStore = service.store  # pyright: ignore[reportAssignmentType]  # with a queue: the shared one
        source = await self.service.in_thread(runs.source, run_id)  # kept for the workers: handed to them
        run = await self.service.in_thread(runs.get, run_id) if source is not None else None
        if source is None or run is None:
            return None
        file = Path(run.file or f"{run.pipeline}.yaml")  # as the worker names it
        try:
            return target, await self.service.in_thread(service.skill_from_text, source, file)
        except PipelineError:  # why: the text no longer verifies here (a skill it calls went): as published
            return target, target.skill

    def _adopt(self, record: TaskRecord, target: CallTarget, pipeline: Any) -> None:
        """Run the adopted task here: its body waits for the run and makes its result."""
        service = self.service.pipelines
        assert service is not None and record.run_id is not None
        execution = Execution(
            tool=record.tool,
            requester=record.requester,
            principal=record.principal,
            inbox=None,
            idle_limit=float("inf"),
        )
        execution.run_ids.append(record.run_id)
        expires = record.created + record.ttl_ms / 1000 if record.ttl_ms else float("inf")
        work = run_outcome(service, record.run_id, pipeline, expires)
        ctx = SkillContext(skill=record.tool, run_id=record.run_id)
        self.service.run_here(record, execution, lambda: target.finish(work, ctx))
        log.info("task %s of %s: %s", record.task_id[:8], record.tool, record.status_message)


def orphaned(store: PostgresTaskStore, task_id: str) -> tuple[TaskRecord, Seen] | None:
    """The task and its owner as read, if it is unfinished and its owner is gone (else None)."""
    row = store._do(  # pyright: ignore[reportPrivateUsage]  # the store's one way to its database
        lambda conn: conn.execute(
            f"SELECT {TASK_COLUMNS} FROM orchestrator_tasks WHERE task_id=? AND {_UNFINISHED}", (task_id,)
        ).fetchone()
    )
    if row is None:
        return None
    seen: Seen = (row[16], row[17], row[18], row[19], row[20])
    return None if owner_alive(*seen) else (task_record(row), seen)


def claim(store: PostgresTaskStore, task_id: str, seen: Seen, message: str) -> bool:
    """Make this process the task's owner if the owner is still the one `seen` (gone); False:
    another replica was first (or the owner beat again). One conditional UPDATE: no lock held."""
    me = Owner.current()
    now = time.time()
    cursor = store._do(  # pyright: ignore[reportPrivateUsage]
        lambda conn: conn.execute(
            f"UPDATE orchestrator_tasks SET ({_OWNER}) = (?, ?, ?, ?, ?), status_message=?, updated=?"
            f" WHERE task_id=? AND {_UNFINISHED} AND owner_host IS NOT DISTINCT FROM ?"
            " AND owner_boot IS NOT DISTINCT FROM ? AND owner_pid IS NOT DISTINCT FROM ?"
            " AND owner_started IS NOT DISTINCT FROM ? AND heartbeat IS NOT DISTINCT FROM ?",
            (me.host, me.boot, me.pid, me.started, now, message, now, task_id, *seen),
        )
    )
    return bool(cursor.rowcount)


def run_outcome(
    service: PipelineService, run_id: str, skill: Any, deadline: float
) -> Callable[[], Awaitable[dict[str, Any]]]:
    """The work of an adopted task: wait for its run to end, then its result (or its failure,
    raised as the error the run's own caller would have got). Cancelled (the task was): the run
    is stopped on its worker too, as for a task its own replica runs."""

    async def work() -> dict[str, Any]:
        try:
            return await _wait(service.store, run_id, skill, deadline)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await _stop(service.queue, run_id)
            raise

    return work


async def _wait(runs: RunStore, run_id: str, skill: Any, deadline: float) -> dict[str, Any]:
    while True:
        run = await anyio.to_thread.run_sync(runs.get, run_id)
        if run is None:
            raise SkillRunError(f"run {run_id} is no longer recorded", hint="start the pipeline again")
        if run.status == "succeeded":
            return run.result or {}
        if run.status in ("failed", "cancelled", "stopped"):
            raise _failure(run, skill)
        # queued or running on a worker, or interrupted (its worker died: the queue hands it to another)
        if time.time() > deadline:
            raise SkillRunError(
                f"run {run_id} did not end before its task expired",
                hint=f"`orchestrator runs show {run_id}` shows where it is; `orchestrator runs resume {run_id}`",
            )
        await anyio.sleep(ADOPT_POLL)


async def _stop(queue: Any, run_id: str) -> None:
    """Cancel the run's task in the queue (its key is `run:RUN:...`: the replica that handed it
    out is gone, so it is found in the queue's snapshot); its worker records the run cancelled."""
    from pipelines.distributed.runqueue import RUNS

    runs = await queue.docket(RUNS)
    snapshot = await runs.snapshot()
    for execution in [*snapshot.running, *snapshot.future]:
        if execution.key.startswith(f"run:{run_id}:"):
            await runs.cancel(execution.key)


def _failure(run: RunRecord, skill: Any) -> Exception:
    """A failed or cancelled run as the error a direct call of the pipeline raises."""
    from pipelines.source import PipelineSkill, describe_failure

    if run.status == "cancelled":
        return SkillCancelledError(
            f"run {run.run_id} was cancelled", hint=f"`orchestrator runs resume {run.run_id}` continues it"
        )
    message, _, hint = (run.error or f"run {run.run_id} failed").partition(" (hint: ")
    hint = hint.removesuffix(")")
    error = (
        StepFailed(message, hint=hint, step_id=run.failed_step)
        if run.failed_step
        else PipelineError(message, hint=hint)
    )
    failure = describe_failure(error, run.run_id, skill if isinstance(skill, PipelineSkill) else None)
    if run.result:  # what the run left (a PARTIAL run's outputs, any run's usage) goes with its error
        failure.attached = run.result
    return failure
