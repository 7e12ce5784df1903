"""The run meta tools: follow and stop runs from any client, era and replica.

`list_runs`, `get_run` and `cancel_run` read the run store (shared by the replicas with
`--state postgresql://`), so a client may ask any replica about a run another one started. They
serve the clients that do not speak MCP tasks: a long call answers with a run handle (`_handles`)
and the client comes back here. A client sees and cancels only its own runs (`pipelines.storage.runs.
may_see`); another's run is "no run", word for word as an unknown id.

Each tool is one function `(service, arguments, ctx) -> CallToolResult` in `RUN_META_TOOLS`; a
new one (e.g. `answer_run`) is one more function and entry.

`get_run`'s `wait` blocks on the run's end event when this process runs it (or waits for it on a
worker); a run of another replica is read again every `POLL` seconds until it ends or the wait is
over. `cancel_run` cancels a run of this process at once; in the shared state it tells the other
replicas (PostgreSQL NOTIFY on `CANCEL_CHANNEL`), and the one that runs the run stops it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp_types import CallToolResult, ToolAnnotations
from mcp_types import Tool as MCPTool

from pipelines.storage.runs import LOCAL, STARTED_BY_KEY, RunRecord, may_see
from skills.core.schema import ANY_JSON, nullable

from ._handles import HANDLES_KEY, RunHandles
from ._meta import MetaTool, structured
from ._results import error_result

if TYPE_CHECKING:
    from pipelines.service import PipelineService
    from skills import SkillContext

__all__ = ["CANCEL_CHANNEL", "MAX_WAIT", "RUN_META_TOOLS", "cancel_locally"]

MAX_WAIT = 600.0
"""The longest `get_run` wait, in seconds."""
POLL = 0.25
"""Seconds between reads of a run that another process runs (no event reaches this one)."""
CANCEL_CHANNEL = "orchestrator_cancel"
"""The PostgreSQL NOTIFY channel on which `cancel_run` tells every replica which run to stop."""
CANCEL_WAIT = 5.0
"""Seconds `cancel_run` waits for the run to record that it stopped."""
_LIVE = ("running", "queued")

_STATUS = {
    "type": "string",
    "enum": ["queued", "running", "waiting", "succeeded", "failed", "cancelled", "interrupted", "stopped"],
}
_RUN_ID = {"type": "string", "description": "The run's id (from a run handle, a pipeline's result, or list_runs)."}
_SUMMARY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string"},
        "pipeline": {"type": "string", "description": "The pipeline, or the tool of a tool run."},
        "kind": {"type": "string", "enum": ["pipeline", "tool"]},
        "status": _STATUS,
        "started": {"type": "number"},
        "ended": nullable({"type": "number"}),
        "progress": nullable({"type": "object"}),
    },
    "required": ["run_id", "pipeline", "kind", "status", "started"],
}
_STEP: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Where the step is: `id`, `loop[3]/id`, `loop[3]` (an item)."},
        "step_id": {"type": "string"},
        "kind": {"type": "string"},
        "status": {"type": "string"},
        "duration": nullable({"type": "number"}),
        "usage": nullable({"type": "object"}),
        "error": nullable({"type": "object"}),
    },
    "required": ["path", "step_id", "status"],
}


def _tool(name: str, description: str, inputs: dict[str, Any], outputs: dict[str, Any], *, read_only: bool) -> MCPTool:
    return MCPTool(
        name=name,
        description=description,
        input_schema={"type": "object", "additionalProperties": False, **inputs},
        output_schema=outputs,
        annotations=ToolAnnotations(read_only_hint=read_only, destructive_hint=not read_only, idempotent_hint=True),
    )


def _owner(ctx: SkillContext) -> str:
    return str(ctx.extras.get(STARTED_BY_KEY) or LOCAL)


def _handles(ctx: SkillContext) -> RunHandles | None:
    found = ctx.extras.get(HANDLES_KEY)
    return found if isinstance(found, RunHandles) else None


async def _visible(service: PipelineService, run_id: Any, ctx: SkillContext) -> RunRecord | CallToolResult:
    """The caller's run, or the same "no run" for an unknown id and for another client's run."""
    if not isinstance(run_id, str) or not run_id:
        return _refused("run_id must be a run id")
    record = await anyio.to_thread.run_sync(service.store.get, run_id)
    if record is None or not may_see(record, _owner(ctx)):
        return _refused(f"no run '{run_id[:64]}'")
    return record


def _refused(message: str) -> CallToolResult:
    return error_result(message, "list_runs shows your runs", error_type="invalid_arguments", where="run_id")


def _summary(record: RunRecord) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "pipeline": record.pipeline,
        "kind": record.kind,
        "status": record.status,
        "started": record.started,
        "ended": record.ended,
        "progress": record.progress,
    }


# -- list_runs ---------------------------------------------------------------------------------------
async def list_runs(service: PipelineService, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    limit = int(arguments.get("limit") or 20)
    records = await anyio.to_thread.run_sync(
        lambda: service.store.list(
            limit, arguments.get("pipeline"), visible_to=_owner(ctx), status=arguments.get("status")
        )
    )
    return structured({"runs": [_summary(r) for r in records]})


# -- get_run -----------------------------------------------------------------------------------------
async def get_run(service: PipelineService, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    run_id = arguments.get("run_id")
    record = await _visible(service, run_id, ctx)
    if isinstance(record, CallToolResult):
        return record
    wait = min(max(float(arguments.get("wait") or 0), 0.0), MAX_WAIT)
    if wait and record.status in _LIVE:
        record = await _wait(service, record, wait, ctx)
    steps = await anyio.to_thread.run_sync(service.store.steps, record.run_id)
    data = _summary(record)
    handles = _handles(ctx)
    live = handles.live.get(record.run_id) if handles is not None else None
    if live is not None and data["progress"] is None:  # a tool run handed over here: its progress is in memory
        data["progress"] = live.progress
    data["duration"] = (record.ended or time.time()) - record.started
    data["steps"] = [{k: v for k, v in s.as_dict().items() if k in _STEP["properties"] or k == "parent"} for s in steps]
    if record.status == "succeeded":
        data["outputs"] = record.result
        if isinstance(record.result, dict) and "usage" in record.result:
            data["usage"] = record.result["usage"]
    elif record.status == "waiting":  # an `ask:` step's question waits for `answer_run`
        data["asking"] = record.asking
    elif record.status not in _LIVE:
        if isinstance(record.result, dict) and "usage" in record.result:  # spent however it ended
            data["usage"] = record.result["usage"]
        data["error"] = (record.envelope or {}).get("error") or {
            "type": "cancelled" if record.status == "cancelled" else "skill_failed",
            "message": record.error or record.status,
            "hint": f"`orchestrator runs resume {record.run_id}` continues a pipeline run"
            if record.kind == "pipeline"
            else "",
            "retryable": record.status in ("cancelled", "interrupted"),
            "where": record.failed_step or "",
        }
    return structured(data)


async def _wait(service: PipelineService, record: RunRecord, seconds: float, ctx: SkillContext) -> RunRecord:
    """The run's record once it ended, or when `seconds` are over."""
    run_id = record.run_id
    handles = _handles(ctx)
    here = (handles is not None and await handles.wait(run_id, seconds)) or await service.wait_here(run_id, seconds)
    deadline = time.monotonic() + (0 if here else seconds)
    while True:
        fresh = await anyio.to_thread.run_sync(service.store.get, run_id)
        if fresh is None or fresh.status not in _LIVE or time.monotonic() >= deadline:
            return fresh or record
        await anyio.sleep(min(POLL, max(deadline - time.monotonic(), 0)))  # another process runs it


# -- cancel_run --------------------------------------------------------------------------------------
def cancel_locally(service: PipelineService, handles: RunHandles | None, run_id: str) -> bool:
    """Cancel `run_id` if this process runs it (a handed-over call, or a pipeline run or its wait)."""
    return (handles is not None and handles.cancel(run_id)) or service.cancel_here(run_id)


async def cancel_run(service: PipelineService, arguments: dict[str, Any], ctx: SkillContext) -> CallToolResult:
    record = await _visible(service, arguments.get("run_id"), ctx)
    if isinstance(record, CallToolResult):
        return record
    run_id = record.run_id
    if record.status not in _LIVE:
        return structured({"run_id": run_id, "status": record.status, "cancelled": False})
    handles = _handles(ctx)
    if not cancel_locally(service, handles, run_id):
        pg = getattr(service.store, "pg", None)
        if pg is None:
            return error_result(
                f"run {run_id} runs in another process ({record.owner or 'unknown'})",
                "stop it there (Ctrl-C), or serve with --state postgresql://... to cancel across processes",
                error_type="invalid_arguments",
                where="run_id",
            )
        await anyio.to_thread.run_sync(pg.notify, CANCEL_CHANNEL, run_id)
    record = await _wait(service, record, CANCEL_WAIT, ctx)
    return structured({"run_id": run_id, "status": record.status, "cancelled": record.status == "cancelled"})


RUN_META_TOOLS: dict[str, MetaTool] = {
    "list_runs": MetaTool(
        _tool(
            "list_runs",
            "Your runs, newest first: pipeline runs and long calls answered with a run handle, with their "
            "status and progress. Filter by status or pipeline.",
            {
                "properties": {
                    "status": {**_STATUS, "description": "Only runs with this status."},
                    "pipeline": {"type": "string", "description": "Only runs of this pipeline (or tool)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 500, "default": 20},
                }
            },
            {"type": "object", "properties": {"runs": {"type": "array", "items": _SUMMARY}}, "required": ["runs"]},
            read_only=True,
        ),
        list_runs,
    ),
    "get_run": MetaTool(
        _tool(
            "get_run",
            "A run's status, progress and steps (status, duration, usage, error); its outputs once it "
            "succeeded, or its error. `wait`: seconds to wait for it to end first (at most 600; keep it "
            "under your client's own time limit, e.g. 30).",
            {
                "properties": {
                    "run_id": _RUN_ID,
                    "wait": {"type": "number", "minimum": 0, "maximum": MAX_WAIT, "default": 0},
                },
                "required": ["run_id"],
            },
            {
                "type": "object",
                "properties": {
                    **_SUMMARY["properties"],
                    "duration": {"type": "number"},
                    "steps": {"type": "array", "items": _STEP},
                    "outputs": {**ANY_JSON, "description": "The run's outputs (once it succeeded)."},
                    "usage": {"type": "object"},
                    "error": {"type": "object", "description": "The error envelope's body (once it failed)."},
                    "asking": {"type": "object", "description": "A waiting run's question (answer_run answers it)."},
                },
                "required": ["run_id", "status", "steps"],
            },
            read_only=True,
        ),
        get_run,
    ),
    "cancel_run": MetaTool(
        _tool(
            "cancel_run",
            "Stop one of your runs (a pipeline run keeps its finished steps: `orchestrator runs resume` continues it).",
            {"properties": {"run_id": _RUN_ID}, "required": ["run_id"]},
            {
                "type": "object",
                "properties": {"run_id": {"type": "string"}, "status": _STATUS, "cancelled": {"type": "boolean"}},
                "required": ["run_id", "status", "cancelled"],
            },
            read_only=False,
        ),
        cancel_run,
    ),
}
"""The run meta tools by name (`answer_run` joins them here)."""
