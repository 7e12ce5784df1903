"""`orchestrator worker`: runs and loop items taken from the queue (the distributed mode).

A worker is a process with its own Catalog (the same skills as the servers: the same folders, or
an image built with them), the shared state (PostgreSQL) and the queue (Docket on Redis). It
takes two kinds of task (see `_queue`):

- a run: it drives the run's graph here, from the YAML the run recorded, starting it or resuming
  it from its checkpoint (a run handed again after its worker died resumes where that worker
  stopped); the items of its parallel loops go back to the queue, so every worker runs some;
- an item: it runs one item of a parallel loop and records its result in the shared state
  (`PgRunStore.put_item`), unless it was recorded already.

A worker keeps up with the skills and pipelines a run was started with (`_needs`): when the run
names one this worker lacks, or has in another version, it reads its skill folders and pipelines
again before it verifies the run. A run it still cannot run fails at once with the real problem
(each issue, with file, line and hint), recorded in the run store (`runs show`) and logged here:
never left `queued`.

Everything a run or an item does inside (a pipeline called as a step, the loops of an item) runs
here, in the same worker.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread

from skills import SkillContext, SkillsError
from skills.core.budget import AGENT_BUDGET_KEY

from ..engine.context import RunContext
from ..engine.loops import run_item
from ..errors import PipelineError, StepFailed, VerificationError
from ..language.spec import StepSpec
from ..service import HERE_KEY, ITEM_KEY, PipelineService
from ..storage.owner import Owner
from .needs import describe, from_json, stale
from .runqueue import (
    HOSTS,
    ITEMS,
    RUNS,
    Outcome,
    failure,
    item_slot,
    orchestrator_item,
    orchestrator_run,
    pooled,
    raise_outcome,
    secure,
)
from .wire import serving

if TYPE_CHECKING:
    from ..source import PipelineSkill
    from ..storage.pgruns import PgRunStore
    from ..storage.runs import RunRecord

__all__ = ["WorkerHost"]

log = logging.getLogger("pipelines.worker")

RUN_SLOTS = 64
CHECK_EVERY = timedelta(milliseconds=25)
"""How soon a worker whose item slots were all busy looks again (Docket's default, 250 ms, left a
freed slot idle for longer than a short item takes)."""
"""Runs one worker drives at once (a run mostly waits for its items, which the items' slots bound)."""


class WorkerHost:
    """The tasks of one worker process, on one `PipelineService` in the distributed mode."""

    def __init__(
        self,
        service: PipelineService,
        make_ctx: Callable[[str, str], SkillContext],
        *,
        name: str | None = None,
        concurrency: int = 8,
        redelivery_timeout: float = 30.0,
        reload: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        if service.queue is None or not service.backends.state:
            raise PipelineError("a worker needs the shared state and the queue", hint="give --state and --queue")
        self.service = service
        # `service.backends.state` (checked above) means the run store is the PostgreSQL one
        self.store: PgRunStore = cast("PgRunStore", service.store)
        self.make_ctx = make_ctx
        """A fresh skill context for (pipeline, run id): models, allowed roots, the Catalog."""
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.concurrency = concurrency
        self.redelivery_timeout = redelivery_timeout
        self._skills: dict[str, PipelineSkill] = {}
        self._runs: dict[str, tuple[str, PipelineSkill]] = {}
        """The pipeline of each run this worker ran items of (a run's YAML never changes)."""
        self._recorded: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
        """Items found recorded when a run driven here reached a parallel step (run, slot): a
        resumed run takes them instead of queueing them again."""
        self._reading = anyio.Lock()
        self.reload = reload or service.catalog.refresh
        """Reads the worker's skill folders and pipelines again (a run needs what it lacks)."""
        self._reloading = anyio.Lock()
        service.dispatch = self.dispatch

    async def serve(self, ready: Callable[[], None] | None = None) -> None:
        """Take tasks from both dockets until cancelled."""
        from docket import Docket, Worker

        url = self.service.backends.queue
        assert url is not None
        secure()  # before a message is read: our JSON, checked; refuses to start when it cannot be
        serving(RUNS, f"{self.name}/runs")
        serving(ITEMS, f"{self.name}/items")
        lease = timedelta(seconds=self.redelivery_timeout)
        async with Docket(name=RUNS, url=pooled(url)) as runs, Docket(name=ITEMS, url=pooled(url)) as items:
            runs.register(orchestrator_run)
            items.register(orchestrator_item)
            slots = self.concurrency
            async with (
                Worker(runs, name=f"{self.name}/runs", concurrency=RUN_SLOTS, redelivery_timeout=lease) as driver,
                Worker(
                    items,
                    name=f"{self.name}/items",
                    concurrency=slots,
                    redelivery_timeout=lease,
                    minimum_check_interval=CHECK_EVERY,
                ) as doer,
            ):
                HOSTS[driver] = HOSTS[doer] = self
                await anyio.to_thread.run_sync(_warm_up)
                if ready is not None:
                    ready()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(driver.run_forever)
                    tg.start_soon(doer.run_forever)

    # -- runs --------------------------------------------------------------------------------------
    async def run(self, run_id: str, progress: Any) -> Outcome:
        """Drive a run here: start it, or resume it from its checkpoint."""
        record = await self._io(self.store.get, run_id)
        if record is None:
            return failure(PipelineError(f"no run '{run_id}' in the shared state", hint="start a new run"))
        while record.status == "running" and record.owner != _me():  # handed again while its driver lives
            log.info("run %s is still driven by %s; waiting for it to end or die", run_id, record.owner)
            await anyio.sleep(max(1.0, self.redelivery_timeout / 4))
            record = await self._io(self.store.get, run_id)
            assert record is not None
        if record.status == "succeeded":
            return {"status": "succeeded", "result": record.result or {}}
        try:
            return await self._drive(record, progress)
        finally:
            for key in [k for k in self._recorded if k[0] == run_id]:
                del self._recorded[key]
            if self.service.queue is not None:
                with anyio.CancelScope(shield=True):
                    await self.service.queue.release(run_id)

    async def _drive(self, record: RunRecord, progress: Any) -> Outcome:
        run_id = record.run_id
        try:
            skill = await self._skill(record)
        except Exception as exc:  # why: a run this worker cannot run fails here, said and recorded
            return await self._cannot_run(record, exc)
        try:
            resume = await self.service.has_checkpoint(run_id)
            await self._io(self.store.resumed, run_id)  # running, in this process
            await self._io(self.store.restart_spending, run_id)
            ctx = self._context(record.pipeline, run_id)
            limits = self.service.budget(skill, ctx).limits  # the agents' limits, counted run-wide:
            ctx.extras[AGENT_BUDGET_KEY] = await self._io(self.store.agent_budget, run_id, limits)
            ctx.progress_fn = _Progress(progress).report
            log.info("%s run %s of %s", "resuming" if resume else "starting", run_id, record.pipeline)
            result = await self.service.drive(skill, record.inputs, ctx, run_id, resume=resume)
        except Exception as exc:  # why: every failure goes back to the caller as its envelope
            if not isinstance(exc, PipelineError | SkillsError):
                log.exception("run %s stopped by an unexpected error", run_id)
            return failure(exc)
        return {"status": "succeeded", "result": result}

    # -- items -------------------------------------------------------------------------------------
    async def dispatch(self, run_id: str, step: StepSpec, payload: dict[str, Any]) -> dict[str, Any]:
        """The coordinator's side of one item: its recorded result, or the queue runs it first."""
        index, slot = payload["index"], item_slot(step.id, payload)
        async with self._reading:  # the step's recorded items, read once for all its items
            recorded = self._recorded.get((run_id, slot))
            if recorded is None:
                recorded = self._recorded[run_id, slot] = await self._io(self.store.items, run_id, slot)
        update = recorded.pop(index, None)
        if update is None:
            assert self.service.queue is not None
            outcome = await self.service.queue.item(run_id, step.id, payload)
            if outcome.get("status") != "done":
                raise_outcome(outcome, item=True)
            update = outcome.get("update") or await self._io(self.store.item, run_id, slot, index)
            if update is None:
                raise StepFailed(f"step '{step.id}': item {index + 1} finished but left no result", step_id=step.id)
        return update

    async def item(self, run_id: str, step_id: str, payload: dict[str, Any]) -> Outcome:
        """Run one loop item here and record its result (nothing to do when it was recorded already)."""
        index, slot = payload["index"], item_slot(step_id, payload)
        if await self._io(self.store.item, run_id, slot, index) is not None:
            return {"status": "done"}
        try:
            pipeline, skill = await self._run_skill(run_id)
        except Exception as exc:  # why: the run that waits fails at this step with the problem
            error = self._unrunnable(run_id, exc, f"item {index + 1} of step '{step_id}'")
            return {"status": "failed", "error": error | {"step": step_id}}
        try:
            compiled = skill.compiled()
            step = next((s for s in skill.spec.walk() if s.id == step_id), None)
            if step is None:
                raise PipelineError(f"pipeline {pipeline} has no step '{step_id}'")
            ctx = self._context(pipeline, run_id)
            ctx.extras[ITEM_KEY] = True
            budget = self.service.budget(skill, ctx)
            run = RunContext(
                catalog=self.service.catalog,
                spec=skill.spec,
                run_id=run_id,
                skill_ctx=ctx,
                artifact_dir=self.service.artifact_dir(pipeline, run_id),
                budget=budget,
                # counted run-wide, read afresh per item: what the other workers' agents spent so far
                agents=await self._io(self.store.agent_budget, run_id, budget.limits),
            )
            update = await run_item(run, step, compiled.bodies.get(step_id), compiled.state_vars, payload)
        except Exception as exc:  # why: the run that waits reports the failure as the step's
            if not isinstance(exc, PipelineError | SkillsError):
                log.exception("item %d of step %s (run %s) failed unexpectedly", index + 1, step_id, run_id)
            outcome = failure(exc)
            if "error" in outcome:
                outcome["error"].setdefault("step", step_id)
            return outcome
        await self._io(self.store.put_item, run_id, slot, index, update, self.name)
        return {"status": "done", "update": update}

    # -- helpers -----------------------------------------------------------------------------------
    def _context(self, pipeline: str, run_id: str) -> SkillContext:
        ctx = self.make_ctx(pipeline, run_id)
        ctx.extras[HERE_KEY] = True  # what this run calls runs here, not through the queue again
        return ctx

    async def _run_skill(self, run_id: str) -> tuple[str, PipelineSkill]:
        """The pipeline (its id, and it compiled) of a run whose items run here (read once per run)."""
        known = self._runs.get(run_id)
        if known is None:
            record = await self._io(self.store.get, run_id)
            if record is None:
                raise PipelineError(f"no run '{run_id}' in the shared state")
            known = (record.pipeline, await self._skill(record))
            if len(self._runs) > 256:
                self._runs.clear()
            self._runs[run_id] = known
        return known

    async def _skill(self, record: RunRecord) -> PipelineSkill:
        """The run's pipeline, from the YAML it recorded (verified and compiled once per text),
        against this worker's Catalog once it holds what the run was started with."""
        source = await self._io(self.store.source, record.run_id)
        needs = from_json(await self._io(self.store.needs, record.run_id))
        await self._keep_up(record.run_id, needs)
        if source is None:
            skill = self.service.pipeline(record.pipeline)
        else:
            digest = hashlib.sha256(source.encode()).hexdigest()
            found = self._skills.get(digest)
            if found is None:
                file = Path(record.file or f"{record.pipeline}.yaml")
                found = await anyio.to_thread.run_sync(self.service.skill_from_text, source, file)
                if len(self._skills) > 64:
                    self._skills.clear()
                self._skills[digest] = found
            skill = found
        differ = await anyio.to_thread.run_sync(stale, needs, self.service.catalog)
        if differ:  # verified, yet not what it was started with: another version of a skill here
            raise PipelineError(describe(differ))
        return skill

    async def _keep_up(self, run_id: str, needs: dict[str, str]) -> None:
        """Read the skill folders and pipelines again when the run needs what this worker's
        Catalog lacks or holds in another version (once for the runs and items that wait)."""
        catalog = self.service.catalog
        if not needs or not await anyio.to_thread.run_sync(stale, needs, catalog):
            return
        async with self._reloading:
            differ = await anyio.to_thread.run_sync(stale, needs, catalog)  # another run may have reloaded
            if differ:
                names = ", ".join(f"'{m.name}'" for m in differ)
                log.info("run %s needs %s as it was started with: reading skills and pipelines again", run_id, names)
                await self.reload()

    async def _cannot_run(self, record: RunRecord, exc: Exception) -> Outcome:
        """A run this worker cannot run: recorded as failed with the problem (not left `queued`)."""
        error = self._unrunnable(record.run_id, exc, f"run {record.run_id} of {record.pipeline}")
        text = f"{error['message']} (hint: {error['hint']})"
        try:
            await self._io(functools.partial(self.store.finish, record.run_id, "failed", error=text))
        except Exception:  # why: the outcome still reaches the caller; the log says why the record could not
            log.exception("run %s: its failure could not be recorded", record.run_id)
        return {"status": "failed", "error": error}

    def _unrunnable(self, run_id: str, exc: Exception, what: str) -> dict[str, Any]:
        """The error envelope (and the worker's log line) of work this worker cannot start: every
        problem named."""
        if not isinstance(exc, PipelineError | SkillsError):
            log.exception("%s: stopped by an unexpected error", what)
        error = dict(failure(exc).get("error") or {})
        problem = problem_text(exc)
        error["message"] = f"run {run_id} failed: worker {self.name} cannot run it: {problem}"
        if isinstance(exc, VerificationError) or not error.get("hint"):
            error["hint"] = f"{_SAME_SKILLS}; then `orchestrator runs resume {run_id}` runs it"
        log.error("%s cannot run here: %s (hint: %s)", what, problem, error["hint"])
        return error

    @staticmethod
    async def _io(fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)


_SAME_SKILLS = (
    "give every worker the skill folders and pipelines the servers have (the same --skills folders, "
    "or an image built with them)"
)


def problem_text(exc: BaseException) -> str:
    """What went wrong, in full: a pipeline that does not verify names each of its errors."""
    if isinstance(exc, VerificationError):
        errors = [i for i in exc.issues if i.severity == "error"] or exc.issues
        if errors:
            return "; ".join(str(i) for i in errors)
    if isinstance(exc, PipelineError | SkillsError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


class _Progress:
    """A run's progress as Docket's (whole numbers; the caller's replica passes it to its client).

    Docket publishes an event per change (total, count, message), so one report is up to three
    events: the message goes last, with the total and count already in it, and the waiting side
    passes on only the events whose message is new (`_queue.Queue.run`): each report once.
    """

    def __init__(self, progress: Any) -> None:
        self._progress = progress
        self._total: int | None = None
        self._done = 0
        self._message: str | None = None

    async def report(self, done: float, total: float | None = None, message: str | None = None) -> None:
        if total is not None and int(total) != self._total:
            self._total = int(total)
            await self._progress.set_total(max(self._total, 1))
        if int(done) > self._done:
            await self._progress.increment(int(done) - self._done)
            self._done = int(done)
        if message != self._message:
            self._message = message
            await self._progress.set_message(message)


def _warm_up() -> None:
    """Import what driving a run needs (LangGraph, its PostgreSQL checkpointer: ~1 s) before the
    worker says it is ready, not while its first run waits."""
    import importlib

    for module in ("langgraph.graph", "langgraph.types", "langgraph.checkpoint.postgres.aio"):
        importlib.import_module(module)


def _me() -> str:
    me = Owner.current()
    return f"{me.host}:{me.pid}"
