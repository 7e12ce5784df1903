"""The task methods on the wire, in both eras, and the shapes of a task in each.

2026-07-28 (the tasks extension, SEP-2663): `tasks/get` (status; the result, the error or the
outstanding `inputRequests` inlined), `tasks/update` (answers to `inputRequests`), `tasks/cancel`
(acknowledged empty). A client that did not declare the extension on the request gets -32021.
`tasks/result` and `tasks/list` do not exist in this era: -32601 before anything else is looked
at (extension, task id, headers). Over HTTP, `tasks/get`, `tasks/update` and `tasks/cancel` carry
the task id in the `Mcp-Name` header too (SEP-2663 "Routing Headers", so that a load balancer can
route by it); a different header is -32020 (HeaderMismatch), as the SDK answers a `tools/call`
whose `Mcp-Name` is not its tool (a missing one is tolerated: see `_check_routing_header`).

2025-11-25 (core tasks, SEP-1686): `tasks/get`, `tasks/result` (blocks until the task ends;
meanwhile the task's sampling requests are sent to the client on that request's stream, with
the `related-task` metadata; a cancelled task's result is the `cancelled` error envelope),
`tasks/list` (the requester's tasks), `tasks/cancel` (the cancelled task; a finished task is
-32602).

One handler per method serves both eras (the SDK keeps one handler per method name). An unknown
task, and a task of another identity, are the same -32602: a task's existence is not disclosed.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import anyio
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CreateMessageRequest,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequest,
    ElicitResult,
    RequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from skills import SkillCancelledError

from .._results import error_result
from ._execution import first_of
from ._target import seen_tasks
from .store import TaskRecord

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._execution import Execution
    from ._service import TaskService

__all__ = ["TASKS_EXTENSION", "TaskParams", "install", "task_wire"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
_LIST_PAGE = 50
REMOTE_POLL = 0.2
"""Seconds between reads of a task another replica runs, while `tasks/result` waits for it."""


class TaskParams(RequestParams):
    """The params of every task method (each uses what it needs)."""

    model_config = ConfigDict(extra="allow")

    task_id: str | None = Field(default=None, alias="taskId", max_length=200)
    input_responses: dict[str, Any] | None = Field(default=None, alias="inputResponses")
    cursor: str | None = Field(default=None, max_length=200)


def task_wire(record: TaskRecord, service: TaskService, *, modern: bool, detail: bool = False) -> dict[str, Any]:
    """A task as the client's era shows it (`detail`: with its result, error or input requests)."""
    from ._service import iso

    status = record.status
    if not modern and status == "completed" and record.is_error:
        status = "failed"  # 2025-11-25: a tool result with isError is a failed task
    wire: dict[str, Any] = {
        "taskId": record.task_id,
        "status": status,
        "createdAt": iso(record.created),
        "lastUpdatedAt": iso(record.updated),
        ("ttlMs" if modern else "ttl"): record.ttl_ms,
        ("pollIntervalMs" if modern else "pollInterval"): service.limits.poll_interval_ms,
    }
    if record.status_message:
        wire["statusMessage"] = record.status_message
    if record.run_id:
        wire["_meta"] = {"io.orchestrator/run-id": record.run_id}
    if detail and modern:
        if record.status == "completed" and record.result is not None:
            wire["result"] = record.result
        elif record.status == "failed":
            wire["error"] = record.error or {"code": -32603, "message": record.status_message or "failed"}
        elif record.status == "input_required":
            wire["inputRequests"] = service.pending(record.task_id)
    return wire


def install(lowlevel: Any, service: Callable[[], TaskService]) -> None:
    """Serve the task methods on a low-level server and advertise the extension (the service is
    made on the first use, keeping its imports off the start-up path)."""
    methods = _Methods(service)
    for name, handler in (
        ("tasks/get", methods.get),
        ("tasks/update", methods.update),
        ("tasks/cancel", methods.cancel),
        ("tasks/result", methods.result),
        ("tasks/list", methods.list),
    ):
        lowlevel.add_request_handler(name, TaskParams, handler)
    lowlevel.extensions[TASKS_EXTENSION] = {}


class _Methods:
    def __init__(self, service: Callable[[], TaskService]) -> None:
        self._service = service

    @property
    def service(self) -> TaskService:
        return self._service()

    async def _task(self, ctx: Any, params: TaskParams) -> tuple[TaskRecord, bool]:
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if modern:
            from mcp.server.mcpserver.server import require_client_extension

            require_client_extension(ctx, TASKS_EXTENSION)
            _check_routing_header(ctx, params)
        if not params.task_id:
            raise MCPError(code=INVALID_PARAMS, message="taskId is required")
        record = await self.service.find(params.task_id, SimpleNamespace(request_context=ctx))
        if record is None:
            raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")
        seen_tasks(ctx).add(record.task_id)
        return record, modern

    async def get(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        record, modern = await self._task(ctx, params)
        return task_wire(record, self.service, modern=modern, detail=True)

    async def update(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        record, modern = await self._task(ctx, params)
        if not modern:
            raise MCPError(code=-32601, message="Method not found", data="tasks/update")
        responses = (params.input_responses or {}).items()
        answers = {k: cast("dict[str, Any]", v) for k, v in responses if isinstance(v, dict)}
        await self.service.answer(record.task_id, answers)
        return {}

    async def cancel(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        record, modern = await self._task(ctx, params)
        if record.terminal:
            if modern:
                return {}
            raise MCPError(
                code=INVALID_PARAMS, message=f"Cannot cancel task: already in terminal status '{record.status}'"
            )
        cancelled = await self.service.cancel(record.task_id)
        if modern:
            return {}
        return task_wire(cancelled.with_(status="cancelled"), self.service, modern=False)

    async def list(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise _removed("tasks/list")
        requester = SimpleNamespace(request_context=ctx)
        from ._target import identity_of

        principal = identity_of(requester).principal
        records = await self.service.in_thread(lambda: self.service.store.list(500, principal=principal))
        seen = seen_tasks(ctx)
        if principal is None:  # no identity: the tasks this connection made or was given the id of
            records = [r for r in records if r.task_id in seen]
        start = int(params.cursor) if params.cursor and params.cursor.isdigit() else 0
        page = records[start : start + _LIST_PAGE]
        found = [await self.service.find(r.task_id, requester) or r for r in page]
        out: dict[str, Any] = {"tasks": [task_wire(r, self.service, modern=False) for r in found]}
        if start + _LIST_PAGE < len(records):
            out["nextCursor"] = str(start + _LIST_PAGE)
        return out

    def _output_schema(self, tool: str) -> dict[str, Any] | None:
        """The tool's outputSchema, which a failure's structured content must not break."""
        target = self.service.targets(tool) if self.service.targets is not None else None
        return getattr(target, "output_schema", None)

    async def result(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise _removed("tasks/result")  # whatever the id: the method is not there to look it up
        record, _ = await self._task(ctx, params)
        execution = self.service.execution(record.task_id)
        while execution is not None and not execution.finished.is_set():
            asked = execution.inbox.next_request() if execution.inbox is not None else None
            if execution.waiting:
                await _ask_client(ctx, execution, record.task_id)
            else:
                await first_of(execution.finished.wait, asked.wait if asked is not None else None)
        while execution is None and not record.terminal and self.service.relay is not None:
            # another replica runs it: wait for its record to end, asking this client its requests
            if record.status == "input_required":
                await _ask_client_for(ctx, self.service, record.task_id)
            else:
                await anyio.sleep(REMOTE_POLL)  # the record changes in another process: no event here
            record, _ = await self._task(ctx, params)
        record, _ = await self._task(ctx, params)
        related = {RELATED_TASK: {"taskId": record.task_id}}
        if record.result is not None:
            return {**record.result, "_meta": {**(record.result.get("_meta") or {}), **related}}
        if record.status == "cancelled":  # the client still gets a result: the call's `cancelled` envelope
            return {**_cancelled(record, self._output_schema(record.tool)), "_meta": related}
        error = record.error or {"code": -32603, "message": record.status_message or f"task {record.status}"}
        raise MCPError(code=int(error.get("code", -32603)), message=str(error.get("message")), data=error.get("data"))


def _removed(method: str) -> MCPError:
    """A task method the 2026-07-28 tasks extension removed (SEP-2663)."""
    return MCPError(code=METHOD_NOT_FOUND, message=f"Method not found: {method}", data=method)


def _check_routing_header(ctx: Any, params: TaskParams) -> None:
    """Over HTTP, an `Mcp-Name` header must name the task the body names (SEP-2663): a proxy
    routed the request by it, so a different one means the client disagrees with itself. A
    request without the header is served: clients in the field (fastmcp 4.1) send none, and
    nothing was routed by a header that is not there."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    given = headers.get(MCP_NAME_HEADER) if headers is not None else None
    if given is not None and decode_header_value(given) != params.task_id:
        raise MCPError(
            code=HEADER_MISMATCH,
            message=f"the Mcp-Name header does not match the request body's taskId; {ctx.method} must carry "
            "Mcp-Name: <taskId> (SEP-2663)",
        )


def _cancelled(record: TaskRecord, output_schema: dict[str, Any] | None) -> dict[str, Any]:
    """The result of a cancelled task: the `cancelled` error envelope, naming the run that resumes it."""
    resume = f"`orchestrator runs resume {record.run_id}` continues its run" if record.run_id else "call it again"
    why = (record.status_message or "cancelled").split(";")[0]
    error = SkillCancelledError(f"the task of '{record.tool}' stopped before it finished: {why}", hint=resume)
    result = error_result(error, output_schema=output_schema)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def _ask_client(ctx: Any, execution: Execution, task_id: str) -> None:
    """Send the task's outstanding sampling requests to the client on this request's stream."""
    inbox = execution.inbox
    assert inbox is not None
    related = ServerMessageMetadata(related_request_id=ctx.request_id)

    async def ask(key: str, request: CreateMessageRequest | ElicitRequest) -> None:
        try:
            answer = await _send(ctx, request, task_id, related)
        except MCPError as exc:
            inbox.refuse(key, exc.error.message)
            return
        inbox.answer({key: answer})

    async with anyio.create_task_group() as tg:
        for key, request in list(inbox.pending.items()):
            tg.start_soon(ask, key, request)


async def _ask_client_for(ctx: Any, service: TaskService, task_id: str) -> None:
    """`_ask_client` for a task another replica runs: its requests from the store, the answers
    back through it."""
    related = ServerMessageMetadata(related_request_id=ctx.request_id)
    answers: dict[str, Any] = {}
    for key, wire in service.pending(task_id).items():
        request = (
            ElicitRequest.model_validate(wire)
            if wire.get("method") == "elicitation/create"
            else CreateMessageRequest.model_validate(wire)
        )
        answer = await _send(ctx, request, task_id, related)
        answers[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
    await service.answer(task_id, answers)


async def _send(
    ctx: Any, request: CreateMessageRequest | ElicitRequest, task_id: str, related: ServerMessageMetadata
) -> CreateMessageResult | CreateMessageResultWithTools | ElicitResult:
    """One input request of a task sent to the client on this request's stream (naming the task)."""
    meta = {"meta": {RELATED_TASK: {"taskId": task_id}}}
    if isinstance(request, ElicitRequest):
        params = request.params.model_copy(update=meta)
        return await ctx.session.send_request(ElicitRequest(params=params), ElicitResult, metadata=related)
    sampling = request.params.model_copy(update=meta)
    shape = CreateMessageResultWithTools if sampling.tools or sampling.tool_choice else CreateMessageResult
    return await ctx.session.send_request(CreateMessageRequest(params=sampling), shape, metadata=related)
