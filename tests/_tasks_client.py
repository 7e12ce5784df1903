"""The Python SDK client speaking MCP tasks with raw requests (the SDK 2.3 has no task support).

2026-07-28: a `ClientExtension` declares `io.modelcontextprotocol/tasks` (so the server may
answer a call with a task) and claims the `resultType: "task"` shape; `tasks/get`,
`tasks/update` and `tasks/cancel` are plain requests. 2025-11-25: `tools/call` with `task`
goes out as a raw request (the SDK would check its answer against `CallToolResult`), and
`tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` are plain requests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import RequestParams, Result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"


class CreatedTask(Result):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class TaskState(Result):
    """`tasks/get` (both eras) and `tasks/cancel` (2025-11-25): the task, with what it carries."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    task_id: str = Field(alias="taskId")
    status: str
    status_message: str | None = Field(default=None, alias="statusMessage")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


class AnyResult(Result):
    model_config = ConfigDict(extra="allow")


class TaskIdParams(RequestParams):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(serialization_alias="taskId")
    input_responses: dict[str, Any] | None = Field(default=None, serialization_alias="inputResponses")


class PageParams(RequestParams):
    cursor: str | None = None


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"  # Mcp-Name over HTTP (SEP-2663 routing header)


class UpdateTask(types.Request[TaskIdParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: TaskIdParams
    name_param = "taskId"  # Mcp-Name over HTTP (SEP-2663 routing header)


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"  # Mcp-Name over HTTP (SEP-2663 routing header)


class TaskResult(types.Request[TaskIdParams, Literal["tasks/result"]]):
    method: Literal["tasks/result"] = "tasks/result"
    params: TaskIdParams


class ListTasks(types.Request[PageParams, Literal["tasks/list"]]):
    method: Literal["tasks/list"] = "tasks/list"
    params: PageParams


async def _not_resolved(result: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    raise AssertionError("these tests drive tasks themselves (session.call_tool(..., allow_claimed=True))")


class TasksExtension(ClientExtension):
    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [
            ResultClaim(
                result_type="task",
                model=CreatedTask,
                resolve=_not_resolved,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            )
        ]


async def start(client: Client, tool: str, arguments: dict[str, Any]) -> CreatedTask:
    """2026-07-28: call `tool`; the server answers with a task."""
    await client.list_tools()
    created = await client.session.call_tool(tool, arguments, allow_claimed=True)
    assert isinstance(created, CreatedTask), created
    return created


async def start_core(client: Client, tool: str, arguments: dict[str, Any], ttl: int = 600_000) -> dict[str, Any]:
    """2025-11-25: `tools/call` with `task`; the raw `{task: {...}}` answer."""
    params = {"name": tool, "arguments": arguments, "task": {"ttl": ttl}}
    return await client.session._dispatcher.send_raw_request("tools/call", params, {})  # type: ignore[attr-defined]


async def get(client: Client, task_id: str) -> TaskState:
    return await client.session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), TaskState)


async def update(client: Client, task_id: str, responses: dict[str, Any]) -> None:
    await client.session.send_request(
        UpdateTask(params=TaskIdParams(task_id=task_id, input_responses=responses)), AnyResult
    )


async def cancel(client: Client, task_id: str) -> AnyResult:
    return await client.session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)), AnyResult)


async def result(client: Client, task_id: str) -> types.CallToolResult:
    return await client.session.send_request(TaskResult(params=TaskIdParams(task_id=task_id)), types.CallToolResult)


async def listing(client: Client) -> AnyResult:
    return await client.session.send_request(ListTasks(params=PageParams()), AnyResult)


Model = Callable[[Any, types.CreateMessageRequestParams], Awaitable[Any]]


async def drive(
    client: Client,
    task_id: str,
    model: Model | None = None,
    *,
    seen: list[TaskState] | None = None,
    until: Callable[[TaskState], bool] | None = None,
    timeout: float = 60,
) -> TaskState:
    """Poll `tasks/get` (a task has no completion event the client can wait on) until the task
    ends (or `until` holds), answering its input requests with `model` through `tasks/update`."""
    with anyio.fail_after(timeout):
        while True:
            state = await get(client, task_id)
            if seen is not None:
                seen.append(state)
            if until is not None and until(state):
                return state
            if state.status in ("completed", "failed", "cancelled"):
                return state
            if state.status == "input_required" and state.input_requests and model is not None:
                answers = {}
                for key, request in state.input_requests.items():
                    params = types.CreateMessageRequestParams.model_validate(request["params"])
                    answer = await model(None, params)
                    answers[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
                await update(client, task_id, answers)
                continue
            await anyio.sleep(0.02)
