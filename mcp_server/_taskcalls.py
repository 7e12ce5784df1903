"""Tasks at the server's edge (private to mcp_server): the 2025-11-25 `tools/call` that asks for a
task, and the server's task service (records in the home's state.sqlite, or PostgreSQL shared by
the replicas). Kept apart from app.py's handlers; `OrchestratorServer.tasks` makes the service on
first use."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from skills import SkillsError
from skills.core.errors import clip
from skills.core.schema import check_arguments

from ._calls import client_logger, wire_of
from ._results import error_result

if TYPE_CHECKING:
    from ._host import Host
    from .tasks import TaskService


async def core_task_call(server: Host, ctx: Any, call_next: Any) -> Any:
    """2025-11-25 `tools/call` with `task`: answered with the task (core tasks, SEP-1686).

    A middleware, not the handler: the SDK checks a handler's `tools/call` result against
    `CallToolResult` in that era, and a task is another shape.
    """
    params: dict[str, Any] = ctx.params or {}
    if ctx.method != "tools/call" or "task" not in params or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return await call_next(ctx)
    from mcp_types import CallToolRequestParams

    try:
        call = CallToolRequestParams.model_validate(params, by_name=False)
    except ValueError:
        return await call_next(ctx)
    target = server.target(call.name)
    if isinstance(target, CallToolResult) or not target.may_task:
        raise MCPError(
            code=-32601,
            message=f"'{clip(call.name, 64)}' cannot run as a task (its execution.taskSupport is not 'optional')",
        )
    mcp_server = server if isinstance(server, MCPServer) else None  # it is one (app.OrchestratorServer)
    context = Context(request_context=ctx, mcp_server=mcp_server, input_params=call)
    arguments = call.arguments or {}
    try:
        check_arguments(call.name, target.skill.input_schema, arguments)
    except SkillsError as exc:
        return wire_of(error_result(exc, output_schema=target.output_schema))
    ttl = call.task.ttl if call.task is not None else None
    started = await server.start_task(target, arguments, context, era="core", ttl_ms=ttl)
    return wire_of(started) if isinstance(started, CallToolResult) else started


def task_service(server: Host, log_levels: weakref.WeakKeyDictionary[Any, int]) -> TaskService:
    """The server's tasks and parked calls (made on first use)."""
    from .tasks import SqliteTaskStore, TaskService, TaskStore, load_task_limits

    assert server.home is not None
    state = server.pipelines.backends.state if server.pipelines is not None else None
    store: TaskStore
    if state:  # shared by the replicas: a task made through one is polled and fetched through another
        from pipelines.storage.pg import postgres

        from .tasks.postgres import PostgresTaskStore

        store = PostgresTaskStore(postgres(state))
    else:
        store = SqliteTaskStore(server.home.state_db)
    service = TaskService(
        store,
        load_task_limits(server.home.root / "config.yaml"),
        pipelines=server.pipelines,
        sinks=lambda context, name: (context.report_progress, client_logger(context, name, log_levels)),
        targets=server.target,
    )
    service.handles = server.handles
    return service
