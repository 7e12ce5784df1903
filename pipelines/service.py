"""The pipelines of one home: their sources, runs, checkpoints, history, validation and registration.

`PipelineService` is what the server (and the CLI) use: it adds the pipeline sources to the
Catalog, runs a pipeline under a new run id with its checkpointer, records the run, and resumes
a failed, cancelled or killed run without re-running its finished steps.

Where runs keep their state and who runs them is `Backends` (see `state`): the home's
state.sqlite and this process (the default), or PostgreSQL shared by replicas and workers, with
runs and loop items handed to `orchestrator worker` processes through a Docket queue.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread

from skills import Catalog, Home, SkillCancelledError, SkillContext, SkillRunError, SkillsError, tracing
from skills.core.errors import clip, error_envelope

from . import _loading
from ._loading import partial_of
from .asking import ANSWERS_KEY, RunWaiting, waiting_result
from .engine.steplog import StepLog
from .errors import Issue, PipelineError, RunCancelled, RunPartial, RunStopped, StepFailed, VerificationError
from .language.limits import BUDGET_KEY, Budget, ServerLimits
from .language.spec import PipelineSpec
from .language.summary import run_summary_in
from .source import EXAMPLES_DIR, PipelineSkill, PipelineSource, describe_failure, new_run_id
from .storage.checkpoints import SharedSaver
from .storage.checkpoints import saver as checkpoint_saver
from .storage.owner import Heartbeat
from .storage.runs import LOCAL, STARTED_BY_KEY, RunRecord, RunStore, may_see
from .storage.state import Backends
from .storage.statedb import is_corrupt, set_aside

if TYPE_CHECKING:
    from skills.core.roles import RoleBook

    from .engine.stepping import Decision, StepGate, StepView
    from .storage.pgruns import PgRunStore

__all__ = ["PipelineService"]

log = logging.getLogger("pipelines.service")

RUN_IDS_KEY = "run_ids"
"""`ctx.extras` list (when the caller put one there) to which each run started under it adds its id."""
ITEM_KEY = "in_item"
"""`ctx.extras` flag: the call runs inside one loop item on a worker; its own loops run here."""
HERE_KEY = "runs_here"
"""`ctx.extras` flag: runs started under this context run in this process (a pipeline called as a
step of a run a worker drives, or inside a loop item a worker runs), never through the queue."""


class PipelineService:
    """Pipelines of one home, attached to one Catalog."""

    def __init__(
        self,
        home: Home,
        catalog: Catalog,
        *,
        examples: bool = True,
        models: Callable[[], Collection[str]] | None = None,
        backends: Backends | None = None,
        roles: Callable[[], RoleBook] | None = None,
        checks: Any = None,
    ) -> None:
        self.home = home
        self.models = models
        self.roles = roles
        """The agent roles of the home (`skills.core.roles`); an agent step naming an unknown one is an error."""
        self.catalog = catalog
        self.backends = backends or Backends()
        self.store: RunStore
        self.shared: Any = None
        """The registered pipelines in the shared state (`_shared.SharedPipelineSource`), if any."""
        self.queue: Any = None
        """The Docket queue (`_queue.Queue`) runs are handed to, in the distributed mode."""
        if self.backends.state:
            from .shared import SharedPipelineSource
            from .storage.pg import postgres
            from .storage.pgruns import PgRunStore

            pg = postgres(self.backends.state)
            self.store = PgRunStore(pg)
            self.shared = SharedPipelineSource(pg, home.cache_dir)
        else:
            self.store = RunStore(home.state_db)
        if self.backends.queue:
            from .distributed.runqueue import Queue

            self.queue = Queue(self.backends.queue)
        self.dispatch: Any = None
        """Set in a worker: hands the items of the parallel loops of the runs it drives to the queue."""
        self.limits = ServerLimits(home.root / "config.yaml")
        """The server's run limits (`runs:` in the home's config.yaml); a pipeline may only lower them."""
        self._heartbeat = Heartbeat(self.store.beat)
        self.sources: list[PipelineSource] = []
        if examples:
            self.sources.append(PipelineSource(EXAMPLES_DIR, "builtin", label="builtin pipelines"))
        self.sources.append(PipelineSource(home.pipelines_dir, "home", label=f"pipelines ({home.pipelines_dir})"))
        if self.shared is not None:  # registered through any replica: they win over one machine's files
            self.sources.append(self.shared)
        for source in self.sources:
            source.catalog = catalog
            source.runner = self.run
            source.others = self.specs
            source.help_cache = home.cache_dir
            source.models = models
            source.roles = roles
            source.checks = checks  # the server's cache of checks (`PipelineSource.checks`)
        catalog.add_providers(self.sources)  # one merge: each pipeline is verified once at start-up
        self._savers = SharedSaver(self._saver_factory)
        self.live: dict[str, tuple[anyio.CancelScope, anyio.Event]] = {}
        """Runs of this process (driven here, or waited for on a worker): their cancel scope, and
        an event set once they ended and their record says so (`cancel_here`, `wait_here`)."""

    models: Callable[[], Collection[str]] | None = None
    """The model roles and ids the server knows; set with `use_models` (pipelines cannot import adapters)."""

    def use_models(self, known: Callable[[], Collection[str]]) -> None:
        """Check `model:` in pipelines against `known()` from now on (and re-verify what is published)."""
        self.models = known
        for source in self.sources:
            source.models = known
        self.catalog.rebuild(list(self.sources))

    def known_models(self) -> Collection[str] | None:
        """The model roles and ids known now (None: not checked)."""
        return self.models() if self.models is not None else None

    def role_book(self) -> RoleBook | None:
        """The home's agent roles now (None: not checked)."""
        return self.roles() if self.roles is not None else None

    def specs(self) -> dict[str, PipelineSpec]:
        """Every published pipeline by id (later sources win, as in the Catalog)."""
        out: dict[str, PipelineSpec] = {}
        for source in self.sources:
            out.update(source.loaded_specs())
        return out

    def load_file(self, path: Path) -> PipelineSkill:
        """A pipeline file outside the published folders, verified, ready to run (`orchestrator run FILE`)."""
        return _loading.load_file(self, path)

    def skill_from_text(self, text: str, file: Path) -> PipelineSkill:
        """A pipeline's YAML (as a run recorded it), verified against this process's Catalog, ready to run."""
        return _loading.skill_from_text(self, text, file)

    def pipeline(self, pipeline_id: str) -> PipelineSkill:
        skill = self.catalog.find(pipeline_id)
        if not isinstance(skill, PipelineSkill):
            import difflib

            close = difflib.get_close_matches(pipeline_id, list(self.specs()), n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "`orchestrator pipelines list` shows them"
            raise PipelineError(f"no pipeline named '{clip(pipeline_id, 64)}'", hint=hint)
        return skill

    # -- running ---------------------------------------------------------------------------------
    def artifact_dir(self, pipeline_id: str, run_id: str) -> Path:
        return (self.backends.artifacts or self.home.pipelines_dir) / pipeline_id / "runs" / run_id

    @property
    def _shared(self) -> PgRunStore:
        """The run store when runs go through the queue: the queue is given only with `--state postgresql://`."""
        return cast("PgRunStore", self.store)

    def _queued(self, ctx: SkillContext, gate: StepGate | None) -> bool:
        """Whether a run started under `ctx` goes to the workers (not: one started by a worker, nor
        one stepped through: its gate asks the person at this terminal)."""
        return self.queue is not None and gate is None and not ctx.extras.get(HERE_KEY)

    async def run(
        self,
        skill: PipelineSkill,
        inputs: dict[str, Any],
        ctx: SkillContext,
        *,
        run_id: str | None = None,
        gate: StepGate | None = None,
    ) -> dict[str, Any]:
        """Run a pipeline under a new run id; failures say how to resume.

        With `gate` the run pauses after each top-level step (step-through); a stop raises
        `RunStopped` after recording the run as `stopped`.
        """
        run_id = run_id or new_run_id()
        started = ctx.extras.get(RUN_IDS_KEY)
        if isinstance(started, list):  # the caller keeps the run ids (to resume a parked call's run)
            cast("list[str]", started).append(run_id)
        artifacts = self.artifact_dir(skill.name, run_id)
        owner = str(ctx.extras.get(STARTED_BY_KEY) or LOCAL)  # whose run it is (`runs.may_see`)
        if self._queued(ctx, gate):
            source = await anyio.to_thread.run_sync(skill.body)
            needs = await anyio.to_thread.run_sync(self._needs, skill.spec)
            start = functools.partial(self._shared.start, source=source, queued=True, started_by=owner, needs=needs)
            await self._store(start, run_id, skill.name, str(skill.file), inputs, artifacts)
            return await self._here(run_id, self._through_queue(skill.name, run_id, ctx, resume=False))
        start = functools.partial(self.store.start, started_by=owner)
        await self._store(start, run_id, skill.name, str(skill.file), inputs, artifacts)
        return await self.drive(skill, inputs, ctx, run_id, resume=False, gate=gate)

    def _needs(self, spec: PipelineSpec) -> str:
        """What a queued run calls, by digest, as this process has it (a worker compares: `_needs`)."""
        from .distributed.needs import as_json, needs_of

        return as_json(needs_of(spec, self.catalog))

    def _needs_of_run(self, run_id: str) -> str | None:
        """`_needs` of a run resumed through the queue, from the YAML it recorded (the skills as
        they are now: a run resumed after a skill was fixed runs the fixed one)."""
        from .language.loader import load_spec

        source = self._shared.source(run_id)
        if source is None:
            return None
        try:
            spec, _ = load_spec(source)
        except VerificationError:
            return None
        return self._needs(spec)

    async def _through_queue(self, pipeline: str, run_id: str, ctx: SkillContext, *, resume: bool) -> dict[str, Any]:
        """Hand the run to a worker and wait for it; its progress comes back to `ctx`."""
        from .distributed.runqueue import raise_outcome

        await ctx.log("info", f"{'resuming' if resume else 'starting'} pipeline {pipeline}, run {run_id} on a worker")
        outcome = await self.queue.run(run_id, ctx.progress, ctx.extras.get("model"))  # it answers the run's asks
        if outcome.get("status") != "succeeded":
            try:
                raise_outcome(outcome)
            except SkillsError as exc:  # what the run left (outputs, summary, usage): the worker recorded it
                record = await self._store(self.store.get, run_id)
                kept: dict[str, Any] | None = record.result if record is not None else None
                summary = run_summary_in(kept)
                if kept is not None and summary is not None and summary.get("failed"):
                    raise RunPartial(kept, summary=summary, run_id=run_id, where=exc.where) from None
                if kept:
                    exc.attached = kept
                raise
        return outcome["result"]

    async def resume(
        self, run_id: str, ctx: SkillContext, *, gate: StepGate | None = None, viewer: str | None = None
    ) -> dict[str, Any]:
        """Continue a run that failed, was cancelled, was stopped or whose process died.

        With `viewer` (a client's identity) a run of another identity is "no run", word for word.
        """
        record = await self._store(self.store.get, run_id)
        if record is None or (viewer is not None and not may_see(record, viewer)):
            raise PipelineError(f"no run '{run_id}'", hint="`orchestrator runs list` shows the runs")
        if record.kind == "tool":  # a long call followed by a run handle: no checkpoints to resume from
            what = f"run {run_id} is a call of '{record.pipeline}', not a pipeline run"
            raise PipelineError(what, hint="call it again")
        if record.status == "succeeded":
            raise PipelineError(f"run {run_id} already succeeded", hint="start a new run instead")
        if record.status == "running":
            raise PipelineError(
                f"run {run_id} is still running (process {record.owner})",
                hint="wait for it, or cancel it there; a run whose process died shows as interrupted",
            )
        if self._queued(ctx, gate):
            needs = await anyio.to_thread.run_sync(self._needs_of_run, run_id)
            await self._store(self._shared.queue, run_id, needs)
            return await self._here(run_id, self._through_queue(record.pipeline, run_id, ctx, resume=True))
        skill = self._skill_of(record)
        await self._store(self.store.resumed, run_id)
        return await self.drive(skill, record.inputs, ctx, run_id, resume=True, gate=gate)

    def _skill_of(self, record: RunRecord) -> PipelineSkill:
        """The pipeline a recorded run ran: the published one if it is still that file."""
        published = self.catalog.find(record.pipeline)
        if isinstance(published, PipelineSkill) and (not record.file or str(published.file) == record.file):
            return published
        if record.file and Path(record.file).is_file():
            return self.load_file(Path(record.file))
        return self.pipeline(record.pipeline)

    async def answer(self, run_id: str, answer: Any, ctx: SkillContext, *, viewer: str | None = None) -> dict[str, Any]:
        """Answer the question a `waiting` run waits on and resume it from its checkpoint.

        A bad answer raises `AnswerError` and the run keeps waiting; with `viewer` (a client's
        identity) a run of another identity is "no run", word for word. The result is the
        resumed run's (which may wait again, on its next question)."""
        from .asking import check_answer

        record = await self._store(self.store.get, run_id)
        if record is None or (viewer is not None and not may_see(record, viewer)):
            raise PipelineError(f"no run '{run_id}'", hint="`orchestrator runs list` shows the runs")
        if record.status != "waiting" or record.asking is None:
            raise PipelineError(
                f"run {run_id} is not waiting for an answer (it is {record.status})",
                hint="only a run whose status is `waiting` takes an answer; list_runs status=waiting shows them",
            )
        asking = record.asking
        checked = check_answer(asking.get("schema") or {}, answer)
        if await self._store(self.store.answer, run_id, asking.get("key"), checked) is None:
            raise PipelineError(
                f"run {run_id} was answered meanwhile",
                hint="get_run shows where it is now; answer it if it waits again",
            )
        if self._queued(ctx, None):
            await self._store(self._shared.queue, run_id)
            return await self._here(run_id, self._through_queue(record.pipeline, run_id, ctx, resume=True))
        return await self.drive(self._skill_of(record), record.inputs, ctx, run_id, resume=True)

    async def _here(self, run_id: str, work: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        """Await `work` (a run, or the wait for a worker's run) as `run_id` of this process:
        `cancel_here` stops it, `wait_here` waits for its end (after its record says how it ended)."""
        scope, ended = anyio.CancelScope(), anyio.Event()
        self.live[run_id] = (scope, ended)
        try:
            with scope:
                return await work
            raise SkillCancelledError(
                f"run {run_id} was cancelled",
                hint=f"`orchestrator runs resume {run_id}` continues it (finished steps are kept)",
            )
        finally:
            self.live.pop(run_id, None)
            ended.set()

    def cancel_here(self, run_id: str) -> bool:
        """Cancel a run this process runs (or waits for on a worker); False when it runs elsewhere."""
        here = self.live.get(run_id)
        if here is None:
            return False
        here[0].cancel()
        return True

    async def wait_here(self, run_id: str, seconds: float) -> bool:
        """Wait up to `seconds` for a run of this process to end; False when it runs elsewhere."""
        here = self.live.get(run_id)
        if here is None:
            return False
        with anyio.move_on_after(seconds):
            await here[1].wait()
        return True

    async def drive(
        self,
        skill: PipelineSkill,
        inputs: dict[str, Any],
        ctx: SkillContext,
        run_id: str,
        *,
        resume: bool,
        gate: StepGate | None = None,
    ) -> dict[str, Any]:
        """Run or resume `skill` in this process under `run_id`, recording it (a worker's run task too)."""
        attributes = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.agent.name": skill.name, "run.id": run_id}
        with tracing.span(f"invoke_workflow {skill.name}", attributes=attributes):
            if run_id in self.live:  # a pipeline step's own run, driven inside its caller's `_here`
                return await self._drive(skill, inputs, ctx, run_id, resume=resume, gate=gate)
            return await self._here(run_id, self._drive(skill, inputs, ctx, run_id, resume=resume, gate=gate))

    async def _drive(
        self,
        skill: PipelineSkill,
        inputs: dict[str, Any],
        ctx: SkillContext,
        run_id: str,
        *,
        resume: bool,
        gate: StepGate | None = None,
    ) -> dict[str, Any]:
        """Run or resume `skill` in this process under `run_id`, recording it (a worker's run task too).

        A run succeeds only when every step did: one that went to its end with failed steps
        (`on_error: continue`, a nested run that did) is recorded `failed`, with its result and
        its summary line as the error, and raises `RunPartial` carrying that result. Whatever
        ends a run, what it spent on models is recorded (`result.usage`) and travels with its
        error (`SkillsError.attached`).
        """
        from .engine.outcomes import RunUsage
        from .engine.runtime import run_pipeline

        artifacts = self.artifact_dir(skill.name, run_id)
        await self._tell(ctx)
        await ctx.log("info", f"{'resuming' if resume else 'starting'} pipeline {skill.name}, run {run_id}")
        if resume:  # its `ask:` steps find the answers given so far (`answer_run`)
            ctx.extras[ANSWERS_KEY] = await self._store(self.store.answers, run_id)
        self._heartbeat.add(run_id)
        usage = RunUsage()

        def spent() -> dict[str, Any]:
            return {"run_id": run_id, "usage": usage.shown()}

        steps = StepLog(self.store, run_id, skill.spec)
        steps.start()
        ended = "failed"
        try:
            compiled = skill.compiled()
            async with self._savers.use() as saver:
                result = await run_pipeline(
                    compiled,
                    inputs,
                    catalog=self.catalog,
                    ctx=ctx,
                    run_id=run_id,
                    artifact_dir=artifacts,
                    checkpointer=saver,
                    resume=resume,
                    budget=self.budget(skill, ctx),
                    dispatch=self._dispatcher(ctx, run_id),
                    gate=self._timed(gate, run_id),
                    usage=usage,
                    steps=steps,
                )
                partial = partial_of(result, run_id, skill)
                if partial is None:  # succeeded: its result is in the history, no resume needs the checkpoints
                    await saver.adelete_thread(run_id)
            if self.dispatch is not None and partial is None:
                await self._store(self._shared.forget_items, run_id)
            ended = "succeeded"
        except RunWaiting as exc:  # nobody could be asked: the checkpoints stay, the run waits for its answer
            if ctx.extras.get("step"):  # a pipeline called by a step: the calling run waits (and runs it again)
                error = f"{exc.message} (the run that called it waits for the answer)"
                await self._store(functools.partial(self.store.finish, run_id, "failed", error=error))
                raise
            ended = "waiting"
            await steps.close(ended)
            await self._store(self.store.wait, run_id, exc.record())
            await ctx.log("info", f"run {run_id} waits for an answer to step '{exc.step_id}': {exc.question}")
            return waiting_result(run_id, exc.record())
        except RunStopped as exc:  # the user's choice, not a failure: the checkpoints stay for the resume
            ended = "stopped"
            await steps.close(ended)
            finish = functools.partial(self.store.finish, run_id, "stopped", result=spent(), error=str(exc))
            await self._store(finish)
            raise
        except PipelineError as exc:
            step = exc.step_id if isinstance(exc, StepFailed) else None
            failure = describe_failure(exc, run_id, skill)
            ended = "cancelled" if isinstance(exc, RunCancelled) else "failed"
            await steps.close(ended)
            finish = functools.partial(
                self.store.finish,
                run_id,
                ended,
                result=spent(),
                error=str(exc),
                failed_step=step,
                envelope=error_envelope(failure),
            )
            await self._store(finish)
            failure.attached = spent()
            raise failure from None
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise
            notice = await self._store(set_aside, self.home.state_db, exc)
            raise SkillRunError(
                f"run {run_id} stopped: {notice or f'the state database {self.home.state_db} is damaged ({exc})'}",
                hint="call it again: it runs on the new database",
            ) from None
        except anyio.get_cancelled_exc_class():
            ended = "cancelled"
            with anyio.CancelScope(shield=True):
                await steps.close(ended)
                cancelled = error_envelope(SkillCancelledError(f"run {run_id} was cancelled"))
                finish = functools.partial(
                    self.store.finish, run_id, "cancelled", result=spent(), error="cancelled", envelope=cancelled
                )
                await self._store(finish)
            raise
        except Exception as exc:  # why: whatever else stopped it, the history must not say `running` forever
            error = f"stopped by an unexpected {type(exc).__name__} (the server log has the details)"
            with anyio.CancelScope(shield=True):
                await steps.close(ended)
                finish = functools.partial(
                    self.store.finish, run_id, "failed", result=spent(), error=error, envelope=error_envelope(error)
                )
                await self._store(finish)
            if isinstance(exc, SkillsError) and not exc.attached:
                exc.attached = spent()
            raise
        finally:
            self._heartbeat.remove(run_id)
            await steps.close(ended)  # (a second close writes nothing more)
        if partial is not None:
            failed_step = (partial.summary.get("failed_steps") or [None])[0]
            finish = functools.partial(
                self.store.finish,
                run_id,
                "failed",
                result=result,
                error=partial.message,
                failed_step=failed_step,
                envelope=error_envelope(partial),
            )
            await self._store(finish)
            raise partial
        await self._store(functools.partial(self.store.finish, run_id, "succeeded", result=result))
        return result

    def _timed(self, gate: StepGate | None, run_id: str) -> StepGate | None:
        """`gate`, with the time each answer took counted as the run's pause (a person reading a
        step's output is not the run running: `RunRecord.duration`)."""
        if gate is None:
            return None
        asked = gate

        async def timed(view: StepView) -> Decision:
            began = time.monotonic()
            try:
                return await asked(view)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._store(self.store.pause, run_id, time.monotonic() - began)

        return timed

    def _dispatcher(self, ctx: SkillContext, run_id: str) -> Any:
        """Where the run's parallel items go: the queue, when a worker drives the run (not inside an item)."""
        if self.dispatch is None or ctx.extras.get(ITEM_KEY):
            return None
        return functools.partial(self.dispatch, run_id)

    def budget(self, skill: PipelineSkill, ctx: SkillContext) -> Budget:
        """The run's limits: the server's, lowered by the pipeline's; a run called by another run's
        step also spends from its caller's budget."""
        server = self.limits.current()
        limits = server.within(skill.spec.limits, timeout=skill.spec.timeout)
        parent = ctx.extras.get(BUDGET_KEY)
        parent = parent if isinstance(parent, Budget) else None
        return Budget(limits, server=server, config=self.limits.file, parent=parent)

    async def _tell(self, ctx: SkillContext) -> None:
        """Pass on what the run store had to say about the database (set aside when damaged)."""
        await self._store(self.store.ensure)
        while self.store.notices:
            await ctx.log("error", self.store.notices.pop(0))

    @staticmethod
    async def _store(fn: Any, *args: Any) -> Any:
        # In a worker thread: a write waiting on SQLite's lock must not stall the event loop,
        # or the checkpointer that holds the lock (on this loop) could never commit.
        return await anyio.to_thread.run_sync(fn, *args)

    def _saver_factory(self) -> Any:
        # reads back our own types only: a forged checkpoint is refused, never run (`_checkpoints`)
        return checkpoint_saver(self.backends.state, self.home.state_db)

    async def has_checkpoint(self, run_id: str) -> bool:
        """Whether a run left a checkpoint to resume from."""
        async with self._savers.use() as saver:
            return await saver.aget_tuple({"configurable": {"thread_id": run_id}}) is not None

    async def aclose(self) -> None:
        """Close the queue's connections (the server or command is ending)."""
        if self.queue is not None:
            await self.queue.aclose()

    async def register(self, text: str, *, overwrite: bool = False) -> PipelineSkill:
        """Validate, save into the home's pipelines/, and publish at once."""
        return await _loading.register(self, text, overwrite=overwrite)

    def runs(self, limit: int = 50, pipeline: str | None = None) -> list[RunRecord]:
        return self.store.list(limit, pipeline)

    # -- validation and registration ---------------------------------------------------------------
    def check(self, text: str, file: str = "<pipeline>") -> tuple[PipelineSpec | None, list[Issue]]:
        """Every issue of a pipeline text against this server's Catalog and pipelines."""
        from .language.verify import check_text

        return check_text(
            text, file, catalog=self.catalog, pipelines=self.specs(), models=self.known_models(), roles=self.role_book()
        )

    async def check_off_loop(self, text: str, file: str = "<pipeline>") -> tuple[PipelineSpec | None, list[Issue]]:
        """`check` in a worker thread: a client's pipeline of a megabyte takes seconds to verify,
        and every other client of the server must be answered meanwhile."""
        return await anyio.to_thread.run_sync(self.check, text, file)
