"""Runs and loop items handed to workers through Docket on Redis (`--queue redis://...`).

Two dockets, so that waiting never starves working: `orchestrator-runs` carries whole runs (a
worker drives the run's graph and mostly waits), `orchestrator-items` carries the items of
parallel loops (a worker runs the skill). A worker takes at most `--concurrency` items at once,
however many runs it drives.

What the engine gives: a task a worker took is leased, and a worker that dies (`kill -9`, a lost
machine) stops renewing its leases, so another worker is handed the task after the redelivery
timeout. A run handed again resumes from its checkpoint (finished steps are not run again); an
item whose result was recorded (`PgRunStore.put_item`) is not run again either, and an item key
names one item of one run, so the same item is never queued twice at once.

Outcomes cross the queue as plain data (`Outcome`), never as pickled exceptions: a failure keeps
its envelope (type, message, hint, where), and the caller raises it as the same kind of error.
Everything Docket carries is our JSON (`_wire`): a task's arguments are checked against its
shape (`SHAPES`) before a worker takes it, and an outcome against `_wire.outcome_problem` before
the caller believes it; what fails is logged and dropped, never run.

With traces on (`skills.core.tracing`), a task carries the caller's W3C trace context as its last
argument (`{"traceparent", "tracestate"}`, checked strictly like the rest): the worker's spans
of the run (`invoke_workflow`, `execute_tool`) and of a loop item are children of the span that
queued it, so one trace shows a run end to end whichever worker ran it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Literal, Protocol, TypedDict, cast

import anyio
from docket import CurrentWorker, Docket, ExecutionCancelled, ExecutionState, Progress
from redis.exceptions import RedisError

from skills import SkillCancelledError, SkillRunError, SkillsError, tracing

from ..errors import PipelineError, RefusedData, RunLimitError, RunLimitExceeded, StepFailed
from . import wire as _wire
from ._completions import POLL, Completions, announce
from ._relay import Answerer, RelayProvider

__all__ = [
    "ITEMS",
    "RUNS",
    "Outcome",
    "Queue",
    "failure",
    "item_key",
    "item_slot",
    "orchestrator_item",
    "orchestrator_run",
    "pooled",
    "raise_outcome",
    "secure",
]

log = logging.getLogger("pipelines.queue")

RUNS = "orchestrator-runs"
ITEMS = "orchestrator-items"
IN_FLIGHT = 64
"""Loop items one process keeps queued at once: more than the workers can run at once gains
nothing, and fewer queued keeps the queue fair between runs."""
GIVE_UP = 120.0
"""Seconds without Redis after which the caller of a queued run stops waiting (the run goes on)."""
POOL = 512
"""Redis connections per docket and process (redis-py's default, 100, caps the runs a replica
waits for)."""


def pooled(url: str) -> str:
    """`url` with a connection pool of `POOL` unless it names its own `max_connections`."""
    if "max_connections=" in url:
        return url
    return f"{url}{'&' if '?' in url else '?'}max_connections={POOL}"


class Outcome(TypedDict, total=False):
    """What a run or an item task hands back."""

    status: Literal["succeeded", "failed", "cancelled", "done"]
    result: dict[str, Any]
    """A run's result (succeeded)."""
    update: dict[str, Any]
    """An item's result (done), in the message to the run's driver only."""
    error: dict[str, Any]
    """The failure: `type`, `message`, `hint`, `where`, `retryable`, and `limit` or `step` when known."""


def failure(exc: BaseException) -> Outcome:
    """An error as plain data for the queue (see `raise_outcome`)."""
    error: dict[str, Any] = {"type": "skill_failed", "message": str(exc), "hint": "", "where": ""}
    if isinstance(exc, SkillsError):
        error.update(type=exc.error_type, message=exc.message, hint=exc.hint, where=exc.where, retryable=exc.retryable)
    elif isinstance(exc, PipelineError):
        error.update(message=exc.message, hint=exc.hint)
    if isinstance(exc, RunLimitExceeded | RunLimitError):
        error["limit"] = exc.limit
    if isinstance(exc, StepFailed):
        error["step"] = exc.step_id
    status: Literal["failed", "cancelled"] = "cancelled" if error["type"] == "cancelled" else "failed"
    return {"status": status, "error": error}


def raise_outcome(outcome: Outcome, *, item: bool = False) -> None:
    """Raise the error an outcome carries, as the kind of error it was where it happened."""
    error = outcome.get("error") or {"message": f"the worker answered {outcome.get('status')!r}"}
    message, hint, where = error.get("message", ""), error.get("hint", ""), error.get("where", "")
    if item:  # inside the run that waits for the item: the step failed (or hit a limit)
        if error.get("limit"):
            raise RunLimitExceeded(message, limit=error["limit"], hint=hint, step_id=error.get("step") or "")
        raise StepFailed(message, hint=hint, step_id=error.get("step") or "")
    if error.get("limit"):
        raise RunLimitError(message, limit=error["limit"], hint=hint, where=where)
    kind = SkillCancelledError if error.get("type") == "cancelled" else SkillRunError
    exc = kind(message, hint=hint, where=where)
    if error.get("type") in ("timeout", "not_connected") and kind is SkillRunError:
        exc.error_type, exc.retryable = error["type"], bool(error.get("retryable"))
    raise exc


# -- the tasks (run by `orchestrator worker`; the names are what the queue carries) ---------------
class Host(Protocol):
    """What the tasks below need from the process that runs them (`pipelines.distributed.worker.WorkerHost`)."""

    async def run(self, run_id: str, progress: Any) -> Outcome: ...

    async def item(self, run_id: str, step_id: str, payload: dict[str, Any]) -> Outcome: ...


HOSTS: weakref.WeakKeyDictionary[object, Host] = weakref.WeakKeyDictionary()
"""The host of each running Docket worker: its tasks find it through `CurrentWorker()`."""


def _host(worker: object) -> Host:
    host = HOSTS.get(worker)
    if host is None:
        raise RuntimeError("this task runs in `orchestrator worker` only")
    return host


# Docket's dependencies are declared as defaults (its idiom): the worker fills them in per call.
async def orchestrator_run(
    run_id: str,
    trace: dict[str, str] | None = None,
    *,
    worker: Any = CurrentWorker(),  # noqa: B008
    progress: Any = Progress(),  # noqa: B008
) -> Outcome:
    """Drive one run (start it, or resume it from its checkpoint) on this worker, in the trace of
    the caller that queued it (`trace`: its W3C context, when traces are on)."""
    with tracing.continued(trace):
        return await _host(worker).run(run_id, progress)


async def orchestrator_item(
    run_id: str,
    step_id: str,
    payload: dict[str, Any],
    trace: dict[str, str] | None = None,
    *,
    worker: Any = CurrentWorker(),  # noqa: B008
) -> Outcome:
    """Run one item of a parallel loop on this worker, record its result and tell the run's driver
    (the message carries the result; Docket keeps the outcome without it); in the trace of the
    run that queued it."""
    with tracing.continued(trace):
        outcome = await _host(worker).item(run_id, step_id, payload)
    await announce(worker.docket, run_id, item_key(run_id, step_id, payload), dict(outcome))
    outcome.pop("update", None)
    return outcome


def _is_id(value: Any) -> bool:
    """A run or step id as we make them: short text, no path separators, no control characters."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= 200
        and value.isprintable()
        and not any(c in value for c in "/\\")
        and ".." not in value
    )


_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]{0,512}")


def _is_trace(value: Any) -> bool:
    """A W3C trace context as `tracing.carrier()` makes it: a `traceparent`, maybe a `tracestate`,
    nothing else (what a worker hands to the OpenTelemetry propagator, so checked first)."""
    if not isinstance(value, dict):
        return False
    found = cast("dict[Any, Any]", value)
    if not set(found) <= {"traceparent", "tracestate"}:
        return False
    parent, state = found.get("traceparent"), found.get("tracestate", "")
    return (
        isinstance(parent, str)
        and _TRACEPARENT.fullmatch(parent) is not None
        and isinstance(state, str)
        and _TRACESTATE.fullmatch(state) is not None
    )


def _traced(args: tuple[Any, ...], count: int) -> tuple[Any, ...] | None:
    """A task's `count` arguments without the trace context that may follow them (None: the
    arguments are not that many, or what follows is not a trace context)."""
    if len(args) == count + 1 and _is_trace(args[-1]):
        return args[:-1]
    return args if len(args) == count else None


def _run_shape(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    own = _traced(args, 1)
    if kwargs or own is None or not _is_id(own[0]):
        return "orchestrator_run takes one run id (and the caller's trace context)"
    return None


def _item_shape(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    own = _traced(args, 3)
    if kwargs or own is None or not (_is_id(own[0]) and _is_id(own[1]) and isinstance(own[2], dict)):
        return "orchestrator_item takes a run id, a step id and an item (and the caller's trace context)"
    args = own
    payload = cast("dict[str, Any]", args[2])
    index, round_ = payload.get("index"), payload.get("round", 0)
    if type(index) is not int or index < 0 or type(round_) is not int or not isinstance(payload.get("scope", {}), dict):
        return "orchestrator_item's item has no index, or a round or scope of the wrong type"
    return None


SHAPES: dict[str, _wire.Shape] = {"orchestrator_run": _run_shape, "orchestrator_item": _item_shape}
"""What each task's arguments look like: a message whose arguments do not fit is refused."""


def secure() -> None:
    """Docket carries our JSON and checks what it reads (fails closed: see `_wire.install`)."""
    _wire.install(SHAPES)


def item_slot(step_id: str, payload: dict[str, Any]) -> str:
    """Which run of a parallel step an item belongs to: the step's id, and its round when the step
    runs more than once in a run (inside a sequential `for` or a `while`)."""
    round_ = payload.get("round")
    return f"{step_id}@{round_}" if round_ else step_id


def item_key(run_id: str, step_id: str, payload: dict[str, Any]) -> str:
    """The queue's key of one item: one item of one round of one step of one run."""
    return f"item:{run_id}:{item_slot(step_id, payload)}:{payload['index']}"


# -- the side that hands work out -------------------------------------------------------------------
class Queue:
    """The dockets of one Redis URL, opened on first use in the running event loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._open: tuple[Any, dict[str, Docket], AsyncExitStack, Completions] | None = None
        self._lock = anyio.Lock()
        self._in_flight = anyio.CapacityLimiter(IN_FLIGHT)
        self.detached = False
        """Set when the process stops to hand its runs over (`detach`): their waits end, the runs go on."""

    async def docket(self, name: str) -> Docket:
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._open is None or self._open[0] is not loop:
                secure()
                stack = AsyncExitStack()
                dockets = {
                    n: await stack.enter_async_context(Docket(name=n, url=pooled(self.url))) for n in (RUNS, ITEMS)
                }
                dockets[RUNS].register(orchestrator_run)
                dockets[ITEMS].register(orchestrator_item)
                done = Completions(dockets[ITEMS])
                stack.push_async_callback(done.aclose)
                self._open = (loop, dockets, stack, done)
            return self._open[1][name]

    async def _completions(self) -> Completions:
        await self.docket(ITEMS)
        assert self._open is not None
        return self._open[3]

    async def release(self, run_id: str) -> None:
        """The run is no longer driven here (its items' messages go elsewhere)."""
        if self._open is not None:
            await self._open[3].release(run_id)

    async def aclose(self) -> None:
        opened, self._open = self._open, None
        if opened is not None:
            with anyio.CancelScope(shield=True):
                await opened[2].aclose()

    async def run(
        self,
        run_id: str,
        progress: Callable[[float, float | None, str | None], Awaitable[None]],
        model: Any = None,
    ) -> Outcome:
        """Hand a run to the workers and wait for its outcome, passing its progress on, and
        answering its requests for the client's model with `model` (the call's access) meanwhile.

        Cancelled (the caller gave up): the run's task is cancelled too, and the worker records
        the run as cancelled (resumable).
        """
        runs = await self.docket(RUNS)
        async with AsyncExitStack() as stack:
            if model is not None:
                await stack.enter_async_context(Answerer(runs, run_id, model).serving())
            return await self._run(runs, run_id, progress)

    def detach(self) -> None:
        """The process is stopping and hands its runs over (another replica adopts their tasks):
        a wait cancelled from now on leaves its run to the workers instead of cancelling it."""
        self.detached = True

    def relay(self, run_id: str) -> RelayProvider:
        """A worker's way to the client's model of `run_id` (the replica that started it answers)."""
        return RelayProvider(functools.partial(self.docket, RUNS), run_id)

    async def _run(
        self, runs: Docket, run_id: str, progress: Callable[[float, float | None, str | None], Awaitable[None]]
    ) -> Outcome:
        key = f"run:{run_id}:{uuid.uuid4().hex[:8]}"
        trace = tracing.carrier()  # the worker's spans of the run continue this trace
        execution = await runs.add(orchestrator_run, key=key)(run_id, *([trace] if trace else []))
        lost: float | None = None  # since when Redis has been unreachable
        said: str | None = None  # the last message passed on
        try:
            while True:
                try:
                    async for event in execution.subscribe():  # (it reads the state first: no end is missed)
                        lost = None
                        kind = event.get("type")
                        if kind == "progress" and event.get("current") is not None:
                            report = _progress_of(event)
                            # One report of the run is up to three events (total, count, message:
                            # `worker._Progress`), the message last: pass that one on, once.
                            if report is not None and report[2] and report[2] != said:
                                said = report[2]
                                await progress(*report)
                        elif kind == "state" and _ended(event.get("state")):
                            break
                    return await _result(execution)
                except RedisError as exc:  # a fail-over, a network blip: the run goes on on its worker
                    lost = lost or time.monotonic()
                    if time.monotonic() - lost > GIVE_UP:
                        raise SkillRunError(
                            f"lost the queue for {GIVE_UP:.0f} s ({exc}); run {run_id} goes on on its worker",
                            hint=f"`orchestrator runs show {run_id}` shows how it ends",
                        ) from None
                    log.warning("run %s: lost its events (%s); listening again", run_id, exc)
                    await anyio.sleep(0.5)
        except anyio.get_cancelled_exc_class():
            if not self.detached:  # the caller gave up (not: this process hands the run over)
                with anyio.CancelScope(shield=True):
                    await runs.cancel(key)
            raise

    async def item(self, run_id: str, step_id: str, payload: dict[str, Any]) -> Outcome:
        """Hand one loop item to the workers (once: its key names it) and wait for its outcome
        (`update`: its result, when the message carried it)."""
        items = await self.docket(ITEMS)
        done = await self._completions()
        key = item_key(run_id, step_id, payload)
        async with self._in_flight:
            heard = await done.expect(run_id, key)
            try:
                trace = tracing.carrier()
                execution = await items.add(orchestrator_item, key=key)(
                    run_id, step_id, payload, *([trace] if trace else [])
                )
                while True:
                    with anyio.move_on_after(POLL):  # (shielded: a timed-out await cancels the future)
                        return cast("Outcome", await asyncio.shield(heard))
                    try:  # no message yet: ask Docket (a lost message costs this)
                        await execution.sync()
                        if ExecutionState(execution.state) in _ENDED:
                            return await _result(execution)
                    except RedisError as exc:  # unreachable for now: the item goes on on its worker
                        log.warning("item %s: %s; waiting on", key, exc)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await items.cancel(key)
                raise
            finally:
                done.forget(run_id, key)

    @asynccontextmanager
    async def session(self) -> AsyncGenerator[Queue]:
        """Closed when left (a command that runs one pipeline)."""
        try:
            yield self
        finally:
            await self.aclose()


_ENDED = (ExecutionState.COMPLETED, ExecutionState.FAILED, ExecutionState.CANCELLED)


def _ended(state: Any) -> bool:
    """Whether a state event's state (an `ExecutionState`, or its text) is an end."""
    try:
        return ExecutionState(state) in _ENDED
    except ValueError:
        log.warning("ignored a state event of an unknown state %r", state)
        return False


def _progress_of(event: Any) -> tuple[float, float | None, str | None] | None:
    """A progress event's (current, total, message); None (logged) when it is not of that shape."""
    current, total, message = event.get("current"), event.get("total"), event.get("message")
    numbers = all(type(v) in (int, float) for v in (current, total or 0))
    if not numbers or not isinstance(message, str | None):
        log.warning("ignored a progress event of an unknown shape on task %s", event.get("key"))
        return None
    return float(current or 0), float(total) if total else None, message


async def _result(execution: Any) -> Outcome:
    try:
        outcome = await execution.get_result()
    except RedisError:
        raise  # the queue, not the task: the caller listens again
    except RefusedData as exc:  # what Redis held under the task's result is not ours
        return _refused(execution.key, exc.message)
    except ExecutionCancelled:
        return {"status": "cancelled", "error": {"type": "cancelled", "message": "cancelled", "hint": ""}}
    except Exception as exc:  # why: a task that raised (a bug or a lost worker); its text is the failure
        log.warning("queued task %s failed: %s", execution.key, exc)
        return {"status": "failed", "error": {"type": "skill_failed", "message": str(exc), "hint": ""}}
    if outcome is None:
        return {"status": "failed", "error": {"type": "skill_failed", "message": "a worker answered nothing"}}
    problem = _wire.outcome_problem(outcome)
    if problem is not None:
        return _refused(execution.key, problem)
    return cast("Outcome", outcome)  # what orchestrator_run/orchestrator_item return


def _refused(key: str, problem: str) -> Outcome:
    log.warning("refused the outcome of queued task %s: %s", key, problem)
    message = f"the queue held an outcome of task {key} that is not the orchestrator's ({problem})"
    hint = "something other than the orchestrator writes to its Redis: docs/distributed.md#trust-model"
    return {"status": "failed", "error": {"type": "skill_failed", "message": message, "hint": hint}}
