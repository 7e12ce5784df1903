"""The records a run store returns (private to pipelines; `pipelines.storage.runs` re-exports them): a run, a
step, what a prune did, the statuses they may have, and how a stored row becomes a record. The
SQLite store (`runs.RunStore`) and PostgreSQL's (`pgruns`) share them."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from .owner import owner_alive

RunStatus = Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled", "interrupted", "stopped"]
"""`succeeded`: every step succeeded. `failed`: a step failed and stopped the run, or the run went
to its end with failed steps (PARTIAL: `on_error: continue`, an agent stopped by a limit, a nested
run that was PARTIAL; its `result` holds the outputs and its `error` the summary line).
`interrupted`: recorded as running, but its owner process is gone (killed, crashed, rebooted).
`waiting`: an `ask:` step's question could reach nobody; the run is checkpointed and waits for
`answer_run` / `orchestrator runs answer` (its question and schema are kept in `asking`).
`stopped`: stopped by its user after a step (step-through); it resumes from the next step.
`queued`: handed to the workers of the distributed mode (`--queue`), not yet taken by one."""
StepStatus = Literal["running", "succeeded", "failed", "skipped", "cancelled", "stopped", "interrupted", "waiting"]
"""A step's status: `skipped` when its `condition:` was false; a step under way when its run
ended takes the run's end (`cancelled`, `stopped`; `failed` for a failure elsewhere);
`interrupted` is read for a `running` step of a run whose process is gone."""


@dataclass(frozen=True)
class RunRecord:
    """One run as recorded (`status` already says `interrupted` for a running run whose owner is gone)."""

    run_id: str
    pipeline: str
    file: str | None
    status: RunStatus
    started: float
    ended: float | None
    inputs: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    failed_step: str | None
    artifacts: str | None
    owner: str | None = None
    """`host:pid` of the process that runs or last ran it."""
    started_by: str | None = None
    """The identity it belongs to (see `may_see`); None: recorded before runs had owners."""
    asking: dict[str, Any] | None = None
    """A `waiting` run's question: `step`, `key`, `question`, `schema` (None otherwise)."""
    paused: float = 0.0
    """Seconds between `started` and `ended` during which it did not run (`RUN_TIMING_COLUMNS`)."""
    kind: str = "pipeline"
    """`pipeline`, or `tool`: a long call of another tool (an agent, `create_skill`...) run
    under a run id so that a run handle can follow it; `pipeline` names the tool then."""
    envelope: dict[str, Any] | None = None
    """The error envelope (`{"error": {"type", "message", "hint", "retryable", "where"}}`) of a
    run that did not succeed, as a direct call would have answered it."""
    progress: dict[str, Any] | None = None
    """The latest progress reported: `{"progress", "total", "message"}` (None: none yet)."""

    @property
    def usage(self) -> dict[str, Any] | None:
        """What the run spent on models (tokens, cost, calls): kept in `result` however it ended."""
        found: Any = (self.result or {}).get("usage")
        return cast("dict[str, Any]", found) if isinstance(found, dict) else None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @property
    def duration(self) -> float | None:
        """Seconds it actually ran (None while it has not ended): its span without the pauses."""
        return None if self.ended is None else max(self.ended - self.started - self.paused, 0.0)


@dataclass(frozen=True)
class StepRecord:
    """One step of a run (or one item of a single-skill loop) as recorded (`RunStore.steps`)."""

    path: str
    """Where it is in the run: `fetch`, `pages[3]/fetch` (a step of a loop's item), `pages[3]`
    (an item of a loop whose body is one skill call). Unique within the run."""
    step_id: str
    """The step's `id` in the pipeline (the loop's id for an item)."""
    parent: str | None
    """The path of the enclosing step (a loop, an `if`, a group); None at the top level."""
    kind: str
    """`skill`, `agent`, `for`, `while`, `if`, `group`, or `item` (a loop item)."""
    status: StepStatus
    started: float | None
    """Unix time."""
    ended: float | None
    usage: dict[str, Any] | None
    """`{input_tokens, output_tokens, total_tokens, cost_usd, calls}` of its model calls (a loop
    or group: of its inner steps); None when it called no model."""
    error: dict[str, Any] | None
    """The error envelope of its failure: `{"error": {"type", "message", "hint", "retryable", "where"}}`."""
    inputs: Any
    """Its rendered parameters (a loop item: the item), bounded: a value over
    `_steplog.VALUE_BYTES` of JSON reads `{"truncated": true, "bytes": N, "preview": "..."}`."""
    outputs: Any
    """Its output, bounded as `inputs`."""

    @property
    def duration(self) -> float | None:
        """Seconds from start to end (None while it runs)."""
        return None if self.started is None or self.ended is None else self.ended - self.started

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, `duration` included."""
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "duration": self.duration}


@dataclass
class PruneReport:
    """What `RunStore.prune` removed."""

    checkpoints_of: list[str]
    """Runs whose checkpoints were deleted (succeeded runs, or runs no longer recorded)."""
    forgotten: list[RunRecord]
    """Runs removed from the history (with their checkpoints and artifacts)."""
    bytes_before: int
    bytes_after: int


def record_from_row(row: tuple[Any, ...]) -> RunRecord:
    run_id, pipeline, file, status, started, ended, inputs, result, error, failed_step, artifacts = row[:11]
    host, boot, pid, pstart, heartbeat, started_by, paused = row[11:18]
    asking = json.loads(row[18]) if len(row) > 18 and row[18] and status == "waiting" else None
    kind, envelope, progress = row[19:22] if len(row) > 21 else (None, None, None)
    record = RunRecord(
        run_id=run_id,
        pipeline=pipeline,
        file=file,
        status=status,
        started=started,
        ended=ended,
        inputs=json.loads(inputs),
        result=None if result is None else json.loads(result),
        error=error,
        failed_step=failed_step,
        artifacts=artifacts,
        owner=f"{host}:{pid}" if host and pid else None,
        started_by=started_by,
        asking=asking,
        paused=float(paused or 0.0),
        kind=kind or "pipeline",
        envelope=None if envelope is None else json.loads(envelope),
        progress=None if progress is None else json.loads(progress),
    )
    if status == "running" and not owner_alive(host, boot, pid, pstart, heartbeat):
        return replace(record, status="interrupted", error="its process ended without recording how the run ended")
    return record


def step_from_row(row: tuple[Any, ...]) -> StepRecord:
    path, step_id, parent, kind, status, started, ended, usage, error, inputs, outputs = row
    return StepRecord(
        path=path,
        step_id=step_id,
        parent=parent,
        kind=kind,
        status=status,
        started=started,
        ended=ended,
        usage=None if usage is None else json.loads(usage),
        error=None if error is None else json.loads(error),
        inputs=None if inputs is None else json.loads(inputs),
        outputs=None if outputs is None else json.loads(outputs),
    )
