"""The context every node of a run's graph runs in: `RunContext`, and what its nodes share.

`RunContext` is what every node gets from LangGraph's run context (never from the checkpointed
state): the Catalog to call skills through, the caller's progress and log channel, the run's
artifact directory, its limits and budgets, and the parallelism limits. It calls skills (with
retries, timeouts, model access per call, usage and step records) and runs `agent:`, `prompt:`
and `ask:` steps. The compiler, the loops and step-through need its type and the runtime builds
it, so it lives below all of them: `runtime` (which runs a compiled graph) imports it, never
the other way round.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio

from skills import Catalog, SkillContext, SkillsError, tracing
from skills.core.budget import AGENT_BUDGET_KEY, RunBudget
from skills.core.contract import RunSpec, SkillContract
from skills.core.models import ModelAccess, Usage
from skills.core.schema import check_arguments

from ..asking import RunWaiting
from ..errors import (
    ExpressionError,
    PipelineError,
    RunLimitError,
    RunLimitExceeded,
    RunPartial,
    StepFailed,
    failure_record,
    is_failure_record,
)
from ..language.expressions import evaluate, render, truthy
from ..language.limits import BUDGET_KEY, Budget, RunLimits
from ..language.spec import PipelineSpec, StepSpec
from ._agent_step import StepAgent, agent_answered
from ._nodes import DEFAULT_MAX_PARALLEL
from ._reporting import RunProgress
from ._state import add_counts
from .outcomes import RunUsage, json_size, plain_result
from .steplog import StepLog, nested_under, step_error

if TYPE_CHECKING:
    pass

__all__ = ["Dispatch", "RunContext", "loop_items"]

log = logging.getLogger("pipelines.run")

Dispatch = Callable[[StepSpec, dict[str, Any]], Awaitable[dict[str, Any]]]
"""Runs one parallel item elsewhere: (the loop step, its `Send` payload) -> the item's graph update."""

_NOTHING: Any = object()


def loop_items(step: StepSpec, scope: dict[str, Any]) -> list[Any]:
    """The list a `for` step loops over, rendered from its `items`."""
    assert step.for_ is not None
    try:
        items: object = render(step.for_.items, scope)
    except ExpressionError as exc:
        raise StepFailed(f"step '{step.id}': for.items: {exc.message}", hint=exc.hint, step_id=step.id) from None
    if isinstance(items, dict):
        items = [{"key": k, "value": v} for k, v in cast("dict[Any, Any]", items).items()]
    elif isinstance(items, tuple):
        items = list(cast("tuple[Any, ...]", items))
    if not isinstance(items, list):
        raise StepFailed(
            f"step '{step.id}': for.items gave {type(items).__name__}, not a list",
            hint='make `items` an expression that yields a list, e.g. "{{ files.paths }}"',
            step_id=step.id,
        )
    return cast("list[Any]", items)


async def _no_progress(done: float, total: float | None, message: str | None) -> None:
    return None


@dataclass
class RunContext:
    """The run's services, handed to every node through LangGraph's run context."""

    catalog: Catalog
    spec: PipelineSpec
    run_id: str
    skill_ctx: SkillContext
    """The caller's context: progress and logs go to the MCP client that started the run."""
    artifact_dir: Path
    budget: Budget = field(default_factory=lambda: Budget(RunLimits()))
    """What the run may spend (steps, loop items, data) and has spent."""
    agents: RunBudget = field(default_factory=RunBudget)
    """What all agents of the run may spend together (tokens, cost, time)."""
    progress: RunProgress = field(init=False)
    _limiters: dict[str, anyio.CapacityLimiter] = field(default_factory=dict[str, anyio.CapacityLimiter])
    running: dict[str, float] = field(default_factory=dict[str, float])
    """Top-level steps under way and when they started (named when the run's time is up)."""
    dispatch: Dispatch | None = None
    """Hands one item of a parallel `for` to the workers and returns its graph update (the
    distributed mode); None: items run here."""
    last_finished: str | None = None
    """The top-level step that finished last (step-through shows it to its gate)."""
    usage: RunUsage = field(default_factory=RunUsage)
    """What the run's calls spent so far, failed ones included (a failed run reports it)."""

    steps: StepLog | None = None
    """The run's per-step records (None: not recorded, e.g. a run without a store)."""

    def __post_init__(self) -> None:
        self.progress = RunProgress(self.skill_ctx, [s.id for s in self.spec.steps])
        if self.steps is not None:
            self.progress.listener = self.steps.progress

    def here(self) -> RunContext:
        """This run's context for work that runs whole in this process (a unit: `_loops.unit_node`),
        whose parallel items are never handed to workers: their record would be keyed by a loop
        round that starts again with each unit."""
        if self.dispatch is None:
            return self
        local = copy.copy(self)  # the same progress, budget and limiters
        local.dispatch = None
        return local

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

    async def loop_items(self, step: StepSpec, scope: dict[str, Any]) -> list[Any]:
        """The loop's items, refused before anything runs when they do not fit the run's limits."""
        items = loop_items(step, scope)
        self.budget.check_items(step.id, len(items))
        await self.progress.items(step.id, len(items))
        return items

    # -- limits ----------------------------------------------------------------------------------
    def charge(self, step: StepSpec, update: dict[str, Any], *, steps: int = 0, data: Any = _NOTHING) -> None:
        """Count work against the run's limits, and add it to `update` so checkpoints keep the count."""
        nbytes = 0 if data is _NOTHING else json_size(data)
        self.budget.charge(step.id, steps, nbytes)
        spent = dict(update.get("spent") or {})
        if steps:
            spent["steps"] = spent.get("steps", 0) + steps
        if nbytes:
            spent["bytes"] = spent.get("bytes", 0) + nbytes
        if spent:
            update["spent"] = spent

    async def check_artifacts(self, step: StepSpec) -> None:
        """After a step: the run fails once its artifact directory holds more than its limit."""
        if self.budget.limits.max_artifact_bytes is None:
            return
        try:
            with os.scandir(self.artifact_dir) as entries:
                if next(entries, None) is None:
                    return  # most runs write no file: no thread hop
        except OSError:
            return  # not made yet
        await anyio.to_thread.run_sync(self.budget.check_artifacts, step.id, self.artifact_dir)

    # -- steps -------------------------------------------------------------------------------------
    async def step_started(self, step: StepSpec, scope: dict[str, Any]) -> None:
        if step.id in self.progress.top:
            self.running[step.id] = time.monotonic()
        if self.steps is not None:
            self.steps.begin(self.steps.path(step, scope), step)
        await self.progress.started(step.id)

    def item_path(self, step: StepSpec, outer: dict[str, Any], index: int) -> str | None:
        """The record path of item `index` of loop `step` (`outer`: the scope around the loop)."""
        return None if self.steps is None else f"{self.steps.path(step, outer)}[{index}]"

    def nested(self, prefix: str | None) -> Any:
        """Steps started in this block are recorded under `prefix` (a loop item's path + `/`)."""
        return nested_under(prefix) if prefix is not None and self.steps is not None else _NO_BLOCK

    async def run_skill_step(
        self, step: StepSpec, scope: dict[str, Any], output_key: str | None, item: str | None = None
    ) -> dict[str, Any]:
        """Call the step's skill (a plain step, or one item of a loop when `output_key` is set,
        recorded under `item` when the caller knows the item's path)."""
        path: str | None = None
        if output_key is None:
            await self.step_started(step, scope)
            if not self.condition_holds(step, scope):
                return self.finish_step(step, scope, None)
        if self.steps is not None:
            if output_key is None:
                path = self.steps.path(step, scope)
            else:
                info: dict[str, Any] = scope.get("loop") or {}
                path = item or f"{self.steps.path(step, {})}[{info.get('index0', 0)}]"
                self.steps.begin(path, step, kind="item")
        spent = Usage()
        try:
            output = await self._record_call(step, scope, spent, path)
        except BaseException as exc:
            if path is not None and self.steps is not None:
                usage = spent.as_dict() if spent.spent else None
                if isinstance(exc, RunWaiting):  # its question waits for an answer (`answer_run`)
                    self.steps.end(path, "waiting", usage=usage)
                else:
                    error = step_error(step.id, exc)
                    status = "cancelled" if error["error"]["type"] == "cancelled" else "failed"
                    self.steps.end(path, status, error=error, usage=usage)
            raise
        if path is not None and self.steps is not None:
            usage = spent.as_dict() if spent.spent else None
            if is_failure_record(output):  # failed, and the run continues (`on_error: continue`)
                self.steps.end(path, "failed", error=step_error(step.id, str(output.get("error"))), usage=usage)
            elif output_key is not None:  # a loop item (a plain step ends in `finish_step`)
                self.steps.end(path, "succeeded", outputs=output, usage=usage)
            elif usage is not None:
                self.steps.usage(path, usage)
        await self.check_artifacts(step)
        nbytes = json_size(output)
        self.budget.charge(step.id, 0, nbytes)
        update: dict[str, Any] = (
            {"scope": {output_key: output}} if output_key is not None else self.finish_step(step, scope, output)
        )
        update["spent"] = add_counts(update.get("spent"), {"steps": 1, "bytes": nbytes})
        if spent.spent:
            update["usage"] = {step.id: spent.record()}
        return update

    async def _record_call(self, step: StepSpec, scope: dict[str, Any], spent: Usage, path: str | None) -> Any:
        """Render the step's parameters (its recorded inputs) and call it under its policy."""
        self.budget.charge(step.id, 1)  # before the call: a run at its limit calls nothing more
        try:
            arguments = render(step.templates(), scope)
        except ExpressionError as exc:
            what = "parameters" if step.prompt is None and step.ask is None else step.kind
            failure = StepFailed(f"step '{step.id}': {what}: {exc.message}", hint=exc.hint, step_id=step.id)
            if step.on_error != "continue":
                raise failure from None
            await self.skill_ctx.log("warning", f"{step.id}: failed, continuing: {failure}")
            return failure_record(step.id, str(failure))
        if path is not None and self.steps is not None:
            self.steps.inputs(path, arguments)
        try:
            return await self._call_with_policy(step, arguments, spent)
        finally:  # spent whether the step succeeds or fails the run
            self.usage.add(step.id, spent)

    async def _call_with_policy(self, step: StepSpec, arguments: Any, spent: Usage) -> Any:
        attempts = step.retry.attempts if step.retry else 1
        backoff = step.retry.backoff if step.retry else 0.0
        for attempt in range(1, attempts + 1):
            try:
                return await self._call(step, arguments, spent)
            except (
                RunLimitExceeded,
                RunWaiting,
            ):  # bounds the whole run / waits for the person: never retried nor skipped
                raise
            except RunLimitError as exc:  # a pipeline this step called spent this run's limit too
                raise RunLimitExceeded(
                    f"step '{step.id}': {exc.message}", limit=exc.limit, hint=exc.hint, step_id=step.id
                ) from None
            except (SkillsError, PipelineError) as exc:
                message = str(exc)
                if attempt < attempts:
                    await self.skill_ctx.log("warning", f"{step.id}: attempt {attempt} failed: {message}; retrying")
                    if backoff:
                        await anyio.sleep(backoff * 2 ** (attempt - 1))
                    continue
                if step.on_error == "continue":
                    await self.skill_ctx.log("warning", f"{step.id}: failed, continuing: {message}")
                    kept: dict[str, Any] = (exc.attached if isinstance(exc, SkillsError) else None) or {}
                    # ^ an agent's result, a failed run's id and usage: kept in the failure record
                    return {**kept, **failure_record(step.id, message)}
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
        arguments = cast("dict[str, Any]", arguments)
        extras: dict[str, Any] = {
            **self.skill_ctx.extras,
            "step": step.id,
            "step_model": step.model,
            "pipeline_model": self.spec.model,
        }
        extras.setdefault("catalog", self.catalog)
        extras[BUDGET_KEY] = self.budget  # a pipeline called by this step spends from this run's limits too
        extras[AGENT_BUDGET_KEY] = self.agents  # every agent of the run shares one budget, parallel ones too
        access: ModelAccess | None = extras.get("model")
        child = access.child() if access is not None else None
        if child is not None:
            extras["model"] = child
        if step.prompt is not None or step.ask is not None:
            from ._inline import ask_step, prompt_step

            name, kind, work = (
                step.id,
                "prompt" if step.prompt is not None else "ask",
                functools.partial(prompt_step if step.prompt is not None else ask_step, step, arguments),
            )
        elif step.agent is not None:
            from skills.executors.agent import run_agent

            contract = SkillContract(run=RunSpec(agent=step.agent))
            check_arguments(f"agent step '{step.id}'", contract.inputs, arguments)
            name, work = step.id, functools.partial(run_agent, StepAgent(step), contract, arguments)
            kind = "agent"
        else:
            assert step.skill is not None
            skill = self.catalog.get(step.skill)
            name, kind = skill.name, skill.kind
            if skill.kind == "instructions":  # carried out by the model; any parameters are the task
                from skills.executors.prompt import carry_out

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
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "pipeline.step": step.id}
        try:
            with tracing.span(f"execute_tool {name}", attributes=attributes):
                if step.timeout:
                    with anyio.fail_after(step.timeout):
                        result = await work(ctx)
                else:
                    result = await work(ctx)
        except RunPartial as partial:  # a pipeline that went to its end with failed steps: it rolls up
            result = partial.result
        except TimeoutError:
            raise StepFailed(
                f"step '{step.id}' did not finish within {step.timeout:g}s",
                hint="raise the step's `timeout:`",
                step_id=step.id,
            ) from None
        finally:
            if child is not None:
                spent.add(child.usage)
        if step.agent is not None or kind == "agent":
            agent_answered(step, result)
        return plain_result(result)

    def finish_step(
        self, step: StepSpec, scope: dict[str, Any], output: Any, restore: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The scope update of a finished step: its output, its `state:` assignments, progress."""
        update: dict[str, Any] = dict(restore or {})
        update[step.id] = output
        result: dict[str, Any] = {"scope": update}
        if step.state and output is not None:
            try:
                assigned = render(step.state, {**scope, step.id: output})
            except ExpressionError as exc:
                raise StepFailed(f"step '{step.id}': state: {exc.message}", hint=exc.hint, step_id=step.id) from None
            self.charge(step, result, data=assigned)
            update.update(assigned)
        self.running.pop(step.id, None)
        if step.id in self.progress.top:
            self.last_finished = step.id
        self.progress.finished(step.id, skipped=output is None)
        if self.steps is not None:
            path = self.steps.path(step, scope)
            if not is_failure_record(output):  # (a failed step continued: its failure is recorded)
                self.steps.end(path, "skipped" if output is None else "succeeded", outputs=output)
        return result

    async def item_done(self, step: StepSpec, done: int | None, total: int | None) -> None:
        await self.progress.item_done(step.id, done, total)

    async def flush(self) -> None:
        """Send queued progress notifications (sync code paths queue, async ones flush)."""
        await self.progress.flush()

    @asynccontextmanager
    async def parallel_slot(self, step: StepSpec) -> AsyncGenerator[None]:
        """Hold one of the step's `max_parallel` slots while an item runs."""
        limiter = self._limiters.get(step.id)
        if limiter is None:
            assert step.for_ is not None
            limiter = self._limiters[step.id] = anyio.CapacityLimiter(step.for_.max_parallel or DEFAULT_MAX_PARALLEL)
        async with limiter:
            yield


_NO_BLOCK = contextlib.nullcontext()
