"""Per-step records of a run, written to the run store as the run goes (`RunStore.steps` reads them).

Every step a run starts gets a record under its *path*: a top-level step is its id (`fetch`); a
step inside a loop's body carries the loop and the item (`pages[3]/fetch`, nested loops
repeat it: `pages[3]/links[0]/get`); an item of a single-skill loop is the loop and its index
(`pages[3]`). A record holds the status (`running`, then `succeeded`, `failed`, `skipped`, or
the run's own end for a step it stopped: `cancelled`, `stopped`, `interrupted`), the start and
end times, what the step spent on models (a loop or group: what its inner steps spent), the
error envelope of a failure, and its inputs and outputs bounded to `VALUE_BYTES` each (a larger
value is replaced by `{"truncated": true, "bytes": N, "preview": "<its first part>"}`).

Recording costs the run a few dictionary writes per step: the records wait in memory and a
background pump writes them in one transaction at most every `FLUSH_EVERY` seconds (and once
more when the run ends), with the run's latest progress (`RunStore.progress`), so a client of
any replica follows a run within a fraction of a second without the run waiting on the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Generator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from ..language.spec import PipelineSpec, StepSpec
    from ..storage.runs import RunStore

__all__ = ["FLUSH_EVERY", "VALUE_BYTES", "StepLog", "bounded", "nested_under", "step_error"]

log = logging.getLogger("pipelines.run")

VALUE_BYTES = 8192
"""The most bytes of JSON kept of a step's inputs, and as much again of its outputs."""
PREVIEW_CHARS = 1024
FLUSH_EVERY = 0.25
"""Seconds between two writes of a run's records (at most)."""

_PREFIX: ContextVar[str] = ContextVar("orchestrator_step_prefix", default="")
"""The path of the loop item whose body runs in this task (`loop[i]/`), for nested steps."""


def bounded(value: Any, limit: int = VALUE_BYTES) -> str:
    """`value` as JSON text of at most about `limit` bytes (a larger one: a truncation marker)."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):  # a value that is not JSON: its text
        text = json.dumps(str(value), ensure_ascii=False)
    size = len(text.encode())
    if size <= limit:
        return text
    return json.dumps({"truncated": True, "bytes": size, "preview": text[:PREVIEW_CHARS]}, ensure_ascii=False)


def step_error(step_id: str, exc: BaseException | str) -> dict[str, Any]:
    """The error envelope of a step's failure: the type and retry advice of the skill error
    that failed it (a timeout is a `timeout`), `limit_exceeded` for a run limit, else
    `skill_failed` (`cancelled` when the run was cancelled)."""
    from skills.core.errors import SkillsError, error_envelope

    from ..errors import RunLimitExceeded

    if isinstance(exc, str):
        return dict(error_envelope(exc, error_type="skill_failed", where=f"step '{step_id}'"))
    if isinstance(exc, anyio.get_cancelled_exc_class()) or _being_cancelled():
        return dict(error_envelope("cancelled", error_type="cancelled", where=f"step '{step_id}'", retryable=True))
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, SkillsError):
        cause = cause.__context__
    kind = cause.error_type if isinstance(cause, SkillsError) else "skill_failed"
    if isinstance(exc, RunLimitExceeded):
        kind = "limit_exceeded"
    message = str(getattr(exc, "message", "") or exc)
    return dict(
        error_envelope(
            message,
            error_type=kind,
            hint=str(getattr(exc, "hint", "") or ""),
            where=f"step '{step_id}'",
            retryable=cause.retryable if isinstance(cause, SkillsError) else False,
        )
    )


def _being_cancelled() -> bool:
    """Whether this task is being cancelled (the run is): a step's failure then is the cancel."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


@contextlib.contextmanager
def nested_under(prefix: str) -> Generator[None]:
    """Steps started in this block (a loop item's body, a loop run whole) are recorded under `prefix`."""
    token = _PREFIX.set(prefix)
    try:
        yield
    finally:
        _PREFIX.reset(token)


def _enclosing(spec: PipelineSpec) -> tuple[dict[str, str], dict[str, str]]:
    """(step id -> its nearest enclosing loop's id, step id -> its direct parent's id)."""
    loops: dict[str, str] = {}
    parents: dict[str, str] = {}

    def walk(steps: list[StepSpec], loop: str | None, parent: str | None) -> None:
        for step in steps:
            if loop is not None:
                loops[step.id] = loop
            if parent is not None:
                parents[step.id] = parent
            inner = step.id if step.kind in ("for", "while") else loop
            walk(step.children(), inner, step.id)

    walk(spec.steps, None, None)
    return loops, parents


class StepLog:
    """The step records of one run (or one resume): kept in memory, written by `pump`."""

    def __init__(self, store: RunStore, run_id: str, spec: PipelineSpec) -> None:
        self.store = store
        self.run_id = run_id
        self._loops, self._parents = _enclosing(spec)
        self._pending: dict[str, dict[str, Any]] = {}
        self._open: dict[str, dict[str, float]] = {}
        """Paths under way -> what their inner steps spent so far (a loop's usage is theirs)."""
        self._progress: dict[str, Any] | None = None
        self._dirty = anyio.Event()
        self._stop = anyio.Event()
        self._pump: asyncio.Task[None] | None = None

    # -- paths -----------------------------------------------------------------------------------
    def path(self, step: StepSpec, scope: dict[str, Any]) -> str:
        """Where `step` is in the run: its id under the loop items it runs in (see the module doc)."""
        prefix = _PREFIX.get()
        loop = self._loops.get(step.id)
        if loop is not None:
            info: dict[str, Any] | None = scope.get("loop")
            index = info.get("index0") if info else None
            if isinstance(index, int):
                segment = f"{loop}[{index}]/"
                if not prefix.endswith(segment):
                    prefix += segment
        return prefix + step.id

    def _parent_path(self, path: str, step_id: str) -> str | None:
        parent = self._parents.get(step_id)
        if parent is None:
            return None
        head = path[: -len(step_id)]
        if parent == self._loops.get(step_id) and head.endswith("]/"):
            return head[: head.rindex("[")]  # `loop[i]/step` -> `loop`
        return head + parent

    # -- events ----------------------------------------------------------------------------------
    def begin(self, path: str, step: StepSpec, *, kind: str | None = None, inputs: Any = None) -> None:
        row: dict[str, Any] = {
            "path": path,
            "step_id": step.id,
            "parent": path[: path.rindex("[")] if kind == "item" else self._parent_path(path, step.id),
            "kind": kind or step.kind,
            "status": "running",
            "started": time.time(),
            "ended": None,
            "usage": None,
            "error": None,
            "inputs": None if inputs is None else bounded(inputs),
            "outputs": None,
        }
        self._pending[path] = row
        self._open[path] = {}
        self._dirty.set()

    def inputs(self, path: str, inputs: Any) -> None:
        """The step's inputs once known (a skill step's rendered parameters)."""
        row = self._pending.setdefault(path, {"path": path})
        row["inputs"] = bounded(inputs)

    def usage(self, path: str, usage: dict[str, Any]) -> None:
        """What a step spent, before it ends (its end adds it to the steps around it)."""
        if path in self._open:
            self._open[path] = {k: usage.get(k) or 0 for k in ("input_tokens", "output_tokens", "cost_usd", "calls")}

    def end(
        self,
        path: str,
        status: str,
        *,
        outputs: Any = None,
        error: dict[str, Any] | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        spent = self._open.pop(path, None)
        if usage is None and spent:
            usage = {**spent, "total_tokens": int(spent.get("input_tokens", 0) + spent.get("output_tokens", 0))}
        if usage:
            self._charge(path, usage)
        row = self._pending.setdefault(path, {"path": path})
        row.update(status=status, ended=time.time(), usage=None if not usage else json.dumps(usage))
        if error is not None:
            row["error"] = json.dumps(error)
        if outputs is not None:
            row["outputs"] = bounded(outputs)
        self._dirty.set()

    def _charge(self, path: str, usage: dict[str, Any]) -> None:
        """Add a finished step's usage to every enclosing step under way."""
        for other, spent in self._open.items():
            if path.startswith(other + "[") or path.startswith(other + "/"):
                for key in ("input_tokens", "output_tokens", "cost_usd", "calls"):
                    spent[key] = spent.get(key, 0) + (usage.get(key) or 0)

    def progress(self, done: float, total: float | None, message: str | None) -> None:
        self._progress = {"progress": done, "total": total, "message": message}
        self._dirty.set()

    # -- writing ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Write the records in the background from now on (until `close`)."""
        self._pump = asyncio.get_running_loop().create_task(self._run(), name=f"step records {self.run_id}")

    async def _run(self) -> None:
        """Write what changed, at most every `FLUSH_EVERY` seconds, until `close` (which waits for
        a write under way: a write abandoned half way could land after the run's last one)."""
        while not self._stop.is_set():
            await self._dirty.wait()
            self._dirty = anyio.Event()
            if self._stop.is_set():
                return
            await self.flush()
            with anyio.move_on_after(FLUSH_EVERY):  # what happens meanwhile is written in one go
                await self._stop.wait()

    async def flush(self) -> None:
        rows, self._pending = list(self._pending.values()), {}
        progress, self._progress = self._progress, None
        if not rows and progress is None:
            return
        try:
            await anyio.to_thread.run_sync(self.store.put_steps, self.run_id, rows, progress)
        except Exception as exc:  # why: a record lost is no reason to fail the run it describes
            log.warning("run %s: could not record its steps: %s", self.run_id, exc)

    async def close(self, status: str) -> None:
        """The run ended with `status`: steps still under way end with it; everything is written."""
        with anyio.CancelScope(shield=True):
            pump, self._pump = self._pump, None
            if pump is not None:
                self._stop.set()
                self._dirty.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
            ended = "failed" if status == "succeeded" else status
            for path in list(self._open):
                self.end(path, ended)
            await self.flush()
