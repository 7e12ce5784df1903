"""Running a compiled pipeline: skill calls, retries, timeouts, progress, checkpoints, resume.

`RunContext` is what every node of the graph gets from LangGraph's run context (never from
the checkpointed state): the Catalog to call skills through, the caller's progress and log
channel, the run's artifact directory and the parallelism limits. `run_pipeline` opens the
SQLite checkpointer, runs or resumes the graph under the run id, and records the run.

Model calls: each call of a step gets its own child of the caller's `ModelAccess`, so what it
spends (tokens, cost; retries and loop items included) is summed per step in the graph's
`usage` channel, checkpointed with the rest, and returned as the result's `usage` key. An
instructions skill (no skill.yaml) is carried out by the model here, and an `agent:` step runs
an agent over its allow-list.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skills import Catalog, SkillContext, SkillsError
from skills._schema import check_arguments
from skills.contract import RunSpec, SkillContract
from skills.models import Usage

from .errors import ExpressionError, PipelineError, StepFailed, failure_record
from .expressions import evaluate, render, truthy
from .spec import PipelineSpec, StepSpec

if TYPE_CHECKING:
    from .compiler import CompiledPipeline, RunState

__all__ = ["RunContext", "loop_items", "run_pipeline"]

log = logging.getLogger("pipelines.run")

RECURSION_LIMIT = 10_000_000  # loops carry their own guards (max_iterations, item counts)


def loop_items(step: StepSpec, scope: dict[str, Any]) -> list[Any]:
    """The list a `for` step loops over, rendered from its `items`."""
    assert step.for_ is not None
    try:
        items = render(step.for_.items, scope)
    except ExpressionError as exc:
        raise StepFailed(f"step '{step.id}': for.items: {exc.message}", hint=exc.hint, step_id=step.id) from None
    if isinstance(items, dict):
        items = [{"key": k, "value": v} for k, v in items.items()]
    if isinstance(items, tuple):
        items = list(items)
    if not isinstance(items, list):
        raise StepFailed(
            f"step '{step.id}': for.items gave {type(items).__name__}, not a list",
            hint='make `items` an expression that yields a list, e.g. "{{ files.paths }}"',
            step_id=step.id,
        )
    return items


@dataclass
class RunContext:
    """The run's services, handed to every node through LangGraph's run context."""

    catalog: Catalog
    spec: PipelineSpec
    run_id: str
    skill_ctx: SkillContext
    """The caller's context: progress and logs go to the MCP client that started the run."""
    artifact_dir: Path
    _done: float = 0.0
    _top: frozenset[str] = frozenset()
    _limiters: dict[str, anyio.CapacityLimiter] = field(default_factory=dict)
    _items: dict[str, int] = field(default_factory=dict)
    _last_pct: dict[str, int] = field(default_factory=dict)
    _totals: dict[str, int] = field(default_factory=dict)
    _pending: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._top = frozenset(s.id for s in self.spec.steps)

    # -- expressions -----------------------------------------------------------------------------
    def check(self, condition: str, scope: dict[str, Any], step: StepSpec) -> bool:
        try:
            return truthy(evaluate(condition, scope))
        except ExpressionError as exc:
            raise StepFailed(f"step '{step.id}': condition: {exc.message}", hint=exc.hint, step_id=step.id) from None

    def condition_holds(self, step: StepSpec, scope: dict[str, Any]) -> bool:
        return step.condition is None or self.check(step.condition, scope, step)

    def choose_branch(self, step: StepSpec, scope: dict[str, Any]) -> str:
        if not self.condition_holds(step, scope):
            return "skipped"
        for label, condition, _ in step.branches():
            if condition is None or self.check(condition, scope, step):
                return label
        return "none"

    def loop_items(self, step: StepSpec, scope: dict[str, Any]) -> list[Any]:
        items = loop_items(step, scope)
        self._totals[step.id] = len(items)
        self._items[step.id] = 0
        return items

    # -- steps -------------------------------------------------------------------------------------
    async def run_skill_step(self, step: StepSpec, state: RunState, output_key: str | None) -> dict[str, Any]:
        """Call the step's skill (a plain step, or one item of a loop when `output_key` is set)."""
        scope = state["scope"]
        if output_key is None and not self.condition_holds(step, scope):
            return self.finish_step(step, scope, None)
        spent = Usage()
        try:
            arguments = render(step.parameters, scope)
        except ExpressionError as exc:
            failure = StepFailed(f"step '{step.id}': parameters: {exc.message}", hint=exc.hint, step_id=step.id)
            if step.on_error != "continue":
                raise failure from None
            await self.skill_ctx.log("warning", f"{step.id}: failed, continuing: {failure}")
            output: Any = failure_record(step.id, str(failure))
        else:
            output = await self._call_with_policy(step, arguments, spent)
        update: dict[str, Any] = (
            {"scope": {output_key: output}} if output_key is not None else self.finish_step(step, scope, output)
        )
        if spent.calls or spent.total_tokens:
            update["usage"] = {step.id: spent.as_dict()}
        return update

    async def _call_with_policy(self, step: StepSpec, arguments: Any, spent: Usage) -> Any:
        attempts = step.retry.attempts if step.retry else 1
        backoff = step.retry.backoff if step.retry else 0.0
        for attempt in range(1, attempts + 1):
            try:
                return await self._call(step, arguments, spent)
            except (SkillsError, PipelineError) as exc:
                message = str(exc)
                if attempt < attempts:
                    await self.skill_ctx.log("warning", f"{step.id}: attempt {attempt} failed: {message}; retrying")
                    if backoff:
                        await anyio.sleep(backoff * 2 ** (attempt - 1))
                    continue
                if step.on_error == "continue":
                    await self.skill_ctx.log("warning", f"{step.id}: failed, continuing: {message}")
                    return failure_record(step.id, message)
                hint = getattr(exc, "hint", "")
                detail = getattr(exc, "message", message)
                if not detail.startswith(f"step '{step.id}'"):  # a timeout names the step already
                    detail = f"step '{step.id}' failed: {detail}"
                raise StepFailed(detail, hint=hint, step_id=step.id) from None
        raise AssertionError("unreachable")

    async def _call(self, step: StepSpec, arguments: Any, spent: Usage) -> Any:
        """One attempt of the step's call; what its model calls spend is added to `spent`."""
        if not isinstance(arguments, dict):
            raise StepFailed(f"step '{step.id}': parameters must be a mapping", step_id=step.id)
        extras = {
            **self.skill_ctx.extras,
            "step": step.id,
            "step_model": step.model,
            "pipeline_model": self.spec.model,
        }
        extras.setdefault("catalog", self.catalog)
        access = extras.get("model")
        child = access.child() if access is not None else None
        if child is not None:
            extras["model"] = child
        if step.agent is not None:
            from skills._agent import run_agent

            contract = SkillContract(run=RunSpec(agent=step.agent))
            check_arguments(f"agent step '{step.id}'", contract.inputs, arguments)
            name, work = step.id, functools.partial(run_agent, _StepAgent(step), contract, arguments)
        else:
            assert step.skill is not None
            skill = self.catalog.get(step.skill)
            name = skill.name
            if skill.kind == "instructions":  # carried out by the model; any parameters are the task
                from skills._prompt import carry_out

                work = functools.partial(carry_out, skill, arguments)
            else:
                check_arguments(skill.name, skill.input_schema, arguments)
                work = functools.partial(skill.run, arguments)
        ctx = SkillContext(
            skill=name,
            artifact_dir=self.artifact_dir,
            run_id=self.run_id,
            progress_fn=_no_progress,
            log_fn=self.skill_ctx.log_fn,
            extras=extras,
        )
        try:
            if step.timeout:
                with anyio.fail_after(step.timeout):
                    result = await work(ctx)
            else:
                result = await work(ctx)
        except TimeoutError:
            raise StepFailed(
                f"step '{step.id}' did not finish within {step.timeout:g}s",
                hint="raise the step's `timeout:`",
                step_id=step.id,
            ) from None
        finally:
            if child is not None:
                spent.add(child.usage)
        return _plain(result)

    def finish_step(
        self, step: StepSpec, scope: dict[str, Any], output: Any, restore: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The scope update of a finished step: its output, its `state:` assignments, progress."""
        update: dict[str, Any] = dict(restore or {})
        update[step.id] = output
        if step.state and output is not None:
            try:
                update.update(render(step.state, {**scope, step.id: output}))
            except ExpressionError as exc:
                raise StepFailed(f"step '{step.id}': state: {exc.message}", hint=exc.hint, step_id=step.id) from None
        if step.id in self._top:
            self._done += 1
            self._items.pop(step.id, None)
            self._progress(f"{step.id}: {'skipped' if output is None else 'done'}")
        return {"scope": update}

    async def item_done(self, step: StepSpec, done: int | None, total: int | None) -> None:
        count = self._items[step.id] = self._items.get(step.id, 0) + 1 if done is None else done
        total = self._totals.get(step.id, 0) if total is None else total
        pct = int(100 * count / total) if total else 100
        if pct == self._last_pct.get(step.id) and count != total:
            return  # at most ~100 notifications a loop, however many items
        self._last_pct[step.id] = pct
        frac = count / total if (step.id in self._top and total) else 0.0
        await self._emit(self._done + min(frac, 0.999), f"{step.id}: {count}/{total} items")

    def _progress(self, message: str) -> None:
        self._pending.append((self._done, message))

    async def flush(self) -> None:
        """Send queued progress notifications (sync code paths queue, async ones flush)."""
        pending, self._pending = self._pending, []
        for done, message in pending:
            await self._emit(done, message)

    async def _emit(self, done: float, message: str) -> None:
        await self.skill_ctx.progress(done, len(self.spec.steps), message)

    @asynccontextmanager
    async def parallel_slot(self, step: StepSpec) -> AsyncIterator[None]:
        """Hold one of the step's `max_parallel` slots while an item runs."""
        from .compiler import DEFAULT_MAX_PARALLEL

        limiter = self._limiters.get(step.id)
        if limiter is None:
            assert step.for_ is not None
            limiter = self._limiters[step.id] = anyio.CapacityLimiter(step.for_.max_parallel or DEFAULT_MAX_PARALLEL)
        async with limiter:
            yield


async def _no_progress(done: float, total: float | None, message: str | None) -> None:
    return None


class _StepAgent:
    """An `agent:` step as the Skill an agent run needs: its name, description and instructions."""

    kind = "agent"

    def __init__(self, step: StepSpec) -> None:
        self.name = step.id
        self.description = step.description or step.name or f"the agent of step {step.id}"
        self._body = step.description or ""

    def body(self) -> str:
        return self._body

    def files(self) -> list[str]:
        return []


def _plain(result: Any) -> Any:
    """A skill result as plain data for expressions and checkpoints (MCP results unwrapped)."""
    from mcp_types import CallToolResult

    if isinstance(result, CallToolResult):
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            raise StepFailed(text or "the tool reported an error")
        if result.structured_content is not None:
            return result.structured_content
        texts = [getattr(c, "text", None) for c in result.content]
        return texts[0] if len(texts) == 1 else texts
    return result


async def run_pipeline(
    compiled: CompiledPipeline,
    inputs: dict[str, Any] | None,
    *,
    catalog: Catalog,
    ctx: SkillContext,
    run_id: str,
    artifact_dir: Path,
    checkpointer: Any = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Run (or resume) the pipeline under `run_id`; return its outputs plus `run_id`."""
    spec = compiled.spec
    run = RunContext(catalog=catalog, spec=spec, run_id=run_id, skill_ctx=ctx, artifact_dir=artifact_dir)
    graph = compiled.graph(checkpointer)
    config: dict[str, Any] = {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}
    if resume:
        payload: Any = None
    else:
        scope = dict(inputs or {})
        scope["inputs"] = dict(inputs or {})
        try:  # initial values of state may be expressions over the inputs (verify's scope rules)
            initial = render({name: spec.state.get(name) for name in compiled.state_vars}, scope)
        except ExpressionError as exc:
            raise PipelineError(f"state: {exc.message}", hint=exc.hint) from None
        for name, value in initial.items():
            scope.setdefault(name, value)
        payload = {"scope": scope, "ctl": {}, "fanin": {}}
    # "sync": a step's checkpoint is committed before the next step starts, so a process killed
    # at any moment never loses a finished step (LangGraph's default writes it in the background).
    durability = "sync" if checkpointer is not None else None
    started = time.perf_counter()
    final: dict[str, Any] | None = None
    try:
        async for chunk in graph.astream(payload, config, context=run, stream_mode="values", durability=durability):
            final = chunk
            await run.flush()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _settle(checkpointer)
        raise
    await run.flush()
    if final is None:
        if resume:
            snapshot = await graph.aget_state(config)
            final = dict(snapshot.values) if snapshot and snapshot.values else None
        if final is None:
            raise PipelineError(f"run {run_id} has nothing to resume", hint="start a new run")
    scope = final.get("scope", {})
    log.info("pipeline %s run %s finished in %.3fs", spec.id, run_id, time.perf_counter() - started)
    result = outputs_of(spec, scope)
    usage = usage_of(final.get("usage") or {})
    if usage is not None:
        result["usage"] = usage
        await ctx.log(
            "info",
            f"pipeline {spec.id}: {usage['calls']} model call(s), {usage['total_tokens']:,} tokens, "
            f"${usage['cost_usd']:.4f}",
        )
    return {**result, "run_id": run_id}


def usage_of(steps: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The run's usage: totals over its steps, and the steps that called a model (None: none did)."""
    if not steps:
        return None
    total = Usage()
    for tally in steps.values():
        total.add(
            Usage(
                input_tokens=int(tally.get("input_tokens", 0)),
                output_tokens=int(tally.get("output_tokens", 0)),
                cost_usd=float(tally.get("cost_usd", 0.0)),
                calls=int(tally.get("calls", 0)),
            )
        )
    per_step = {
        step: {**tally, "cost_usd": round(float(tally.get("cost_usd", 0.0)), 6)} for step, tally in steps.items()
    }
    return {**total.as_dict(), "steps": per_step}


async def _settle(checkpointer: Any) -> None:
    """Commit what the checkpointer was writing when a failure or a cancel stopped the run.

    When one task of a step fails, LangGraph cancels the step's other work, and can cancel the
    SQLite saver between its INSERT of a finished task's writes and the COMMIT: the connection is
    left inside a transaction that holds the database's write lock (the run history then waits
    on it and fails with "database is locked") and the finished task's writes are lost. Writes
    are complete statements, so committing them is safe, and it keeps those tasks finished.
    """
    conn = getattr(checkpointer, "conn", None)
    lock = getattr(checkpointer, "lock", None)
    if conn is None or lock is None or not hasattr(conn, "commit"):
        return
    import sqlite3

    try:
        async with lock:  # the saver's own lock: never between another run's INSERT and COMMIT
            await conn.commit()
    except sqlite3.Error as exc:  # the run's own error is the one to report
        log.warning("could not commit the checkpoints of a stopped run: %s", exc)


def outputs_of(spec: PipelineSpec, scope: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's result: its `outputs` rendered, or every top-level step's output."""
    if spec.outputs is None:
        return {s.id: scope.get(s.id) for s in spec.steps}
    try:
        rendered = render(spec.outputs, scope)
    except ExpressionError as exc:
        raise PipelineError(f"outputs: {exc.message}", hint=exc.hint) from None
    return dict(rendered)
