"""Running a compiled pipeline: skill calls, retries, timeouts, progress, checkpoints, resume.

`run_pipeline` opens the checkpointer, runs or resumes the graph under the run id with a
`RunContext` (`pipelines.engine.context`: what every node gets), and records the run.

Model calls: each call of a step gets its own child of the caller's `ModelAccess`, so what it
spends (tokens, cost; retries and loop items included) is summed per step in the graph's
`usage` channel, checkpointed with the rest, and returned as the result's `usage` key. Every
call also adds to the run's `RunUsage` as it ends, failed calls included, which is what a run
that fails reports (its graph never wrote the failing step's usage). An instructions skill (no
skill.yaml) is carried out by the model here, and an `agent:` step runs an agent over its
allow-list; an agent that stops before its answer (a limit, a budget, an error) fails its step.
A pipeline called as a step that ends PARTIAL (`errors.RunPartial`) gives its result as the
step's output: the calling run goes on, and its summary names the failed steps inside.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skills import Catalog, SkillContext
from skills.core.budget import AGENT_BUDGET_KEY, RunBudget

from ..asking import ASKING_KEY, Asking
from ..errors import (
    ExpressionError,
    PipelineError,
)
from ..language.expressions import render
from ..language.limits import DEFAULT_LIMITS, Budget
from ..language.spec import StepSpec
from ..language.summary import summary_key, summary_of
from ._meter import Meter, metered
from ._nodes import RECURSION_LIMIT
from ._state import add_counts
from .context import Dispatch, RunContext, loop_items
from .loops import spent_in_flight
from .outcomes import RunUsage, json_size, outputs_of, settle, usage_of
from .steplog import StepLog
from .stepping import StepGate, stream_stepwise

if TYPE_CHECKING:
    from .compiler import CompiledPipeline

__all__ = ["Dispatch", "RunContext", "loop_items", "run_pipeline"]

log = logging.getLogger("pipelines.run")


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
    budget: Budget | None = None,
    dispatch: Dispatch | None = None,
    gate: StepGate | None = None,
    usage: RunUsage | None = None,
    steps: StepLog | None = None,
) -> dict[str, Any]:
    """Run (or resume) the pipeline under `run_id`; return its outputs plus `run_id`, `summary`
    and `usage` (the summary may count failed steps: the caller decides what PARTIAL means).

    `budget` carries the run's limits (default: the built-in server limits lowered by the
    pipeline's own `limits:` and `timeout:`). With `gate`, the run pauses after each top-level
    step and the gate decides: continue, stop (`RunStopped`) or re-run the step (`_stepping`).
    `usage` is filled with what the run spends as it goes, so that a caller can report the
    usage of a run that fails (whatever stops it).
    """
    spec = compiled.spec
    if budget is None:
        budget = Budget(DEFAULT_LIMITS.within(spec.limits, timeout=spec.timeout), server=DEFAULT_LIMITS)
    ctx.extras[ASKING_KEY] = Asking.of(ctx.extras)  # who its `ask:` steps ask, and the answers given so far
    outer = ctx.extras.get(AGENT_BUDGET_KEY)  # the caller's (a pipeline step, a tool call): it bounds this run too
    agents = RunBudget.of(budget.limits, parent=outer if isinstance(outer, RunBudget) else None)
    ledger = usage if usage is not None else RunUsage()
    if dispatch is not None:
        dispatch = _recording(dispatch, ledger)
    run = RunContext(
        catalog=catalog,
        spec=spec,
        run_id=run_id,
        skill_ctx=ctx,
        artifact_dir=artifact_dir,
        budget=budget,
        agents=agents,
        dispatch=dispatch,
        usage=ledger,
        steps=steps,
    )
    graph = compiled.graph(checkpointer)
    config: dict[str, Any] = {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}
    before: dict[str, Any] | None = None
    if resume:
        payload: Any = None
        snapshot = await graph.aget_state(config)
        before = dict(snapshot.values) if snapshot and snapshot.values else None
        if before is None:
            raise PipelineError(f"run {run_id} has nothing to resume", hint="start a new run")
        done: dict[str, Any] = before.get("scope") or {}
        run.progress.restore(sum(1 for s in spec.steps if s.id in done))
        ledger.add_records(before.get("usage"))  # what earlier attempts spent (and checkpointed)
        budget.restore(add_counts(before.get("spent"), spent_in_flight(spec, before.get("fanin") or {})))
    else:
        scope = dict(inputs or {})
        scope["inputs"] = dict(inputs or {})
        try:  # initial values of state may be expressions over the inputs (verify's scope rules)
            initial = render({name: spec.state.get(name) for name in compiled.state_vars}, scope)
        except ExpressionError as exc:
            raise PipelineError(f"state: {exc.message}", hint=exc.hint) from None
        for name, value in initial.items():
            scope.setdefault(name, value)
        payload = {"scope": scope, "ctl": {}, "fanin": {}, "spent": {"bytes": json_size(inputs or {})}}
    # "sync": a step's checkpoint is committed before the next step starts, so a process killed
    # at any moment never loses a finished step (LangGraph's default writes it in the background).
    durability = "sync" if checkpointer is not None else None
    started = time.perf_counter()
    meter = Meter(budget.limits.max_state_bytes)  # what its checkpoints take in the state store
    if checkpointer is not None:
        meter.stored = await metered(checkpointer, run_id)

    def where() -> str:
        return ", ".join(run.running) or spec.steps[min(run.progress.done, len(spec.steps) - 1)].id

    async def segment(payload: Any, config: dict[str, Any], interrupt_after: list[str] | None) -> Any:
        last = None
        try:
            with meter.counting():
                async for chunk in graph.astream(
                    payload,
                    config,
                    context=run,
                    stream_mode="values",
                    durability=durability,
                    interrupt_after=interrupt_after,
                ):
                    last = chunk
                    await run.flush()
                    budget.check_stored(where(), meter.stored)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await settle(checkpointer)
            raise
        return last

    final: dict[str, Any] | None = None
    wall = budget.limits.max_wall_time or float("inf")
    if gate is None:
        with anyio.move_on_after(wall) as clock:
            final = await segment(payload, config, None)
        timed_out = clock.cancelled_caught
    else:
        if checkpointer is None:
            raise PipelineError("step-through needs the run's checkpoints", hint="run it through the orchestrator")
        final, timed_out = await stream_stepwise(segment, graph, payload, config, run, gate, wall)
    if timed_out:
        raise budget.exceeded("max_wall_time", where(), f"the run did not finish within {wall:g}s")
    await run.flush()
    final = final if final is not None else before
    if final is None:
        raise PipelineError(f"run {run_id} has nothing to resume", hint="start a new run")
    scope = final.get("scope", {})
    log.info("pipeline %s run %s finished in %.3fs", spec.id, run_id, time.perf_counter() - started)
    result = outputs_of(spec, scope)
    result[summary_key(spec)] = summary_of(spec, scope)
    result["usage"] = shown = usage_of(final.get("usage"))
    if shown["calls"]:
        await ctx.log(
            "info",
            f"pipeline {spec.id}: {shown['calls']} model call(s), {shown['total_tokens']:,} tokens, "
            f"${shown['cost_usd']:.4f}",
        )
    return {**result, "run_id": run_id}


def _recording(dispatch: Dispatch, ledger: RunUsage) -> Dispatch:
    """`dispatch` whose items' usage (spent on a worker) the run's ledger counts as they return."""

    async def dispatched(step: StepSpec, payload: dict[str, Any]) -> dict[str, Any]:
        update = await dispatch(step, payload)
        ledger.add_records(update.get("usage"))
        return update

    return dispatched
