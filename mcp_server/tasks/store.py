"""What a task is on record, the small interface every task store offers, and the tasks' limits.

A task is one tool call run apart from the request that started it (MCP tasks: the tasks
extension of 2026-07-28 clients, core tasks of 2025-11-25 clients). Its record outlives the
client connection and the server process: status, progress, the result (the `CallToolResult`
a direct call would have returned), the pipeline run it drives, and who may see it.

`TaskStore` is the interface the protocol code uses; `SqliteTaskStore` (the home's
`state.sqlite`, beside the run history) implements it. A PostgreSQL store (`--state
postgresql://...`) implements the same methods; nothing else changes. Store methods are
synchronous (SQLite); the server calls them in a worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["TaskLimits", "TaskRecord", "TaskState", "TaskStore", "load_task_limits"]

log = logging.getLogger("mcp_server.tasks")

TaskState = Literal["working", "input_required", "completed", "failed", "cancelled"]
"""The states of both specs; `completed` includes a tool result with `isError` (see `TaskRecord`)."""

TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class TaskRecord:
    """One task as stored."""

    task_id: str
    """Unguessable (192 random bits): without authentication it is the only key to the task."""
    tool: str
    status: TaskState
    created: float
    updated: float
    ttl_ms: int | None
    principal: str | None = None
    """The authenticated identity that created it (None on unauthenticated transports); only the
    same identity may read or cancel it."""
    requester: str = ""
    """Who it counts against for the per-client limit (`identity_of`: the principal, else the
    client's address over HTTP, else `local`)."""
    client: str = ""
    """The client's name (clientInfo), for people reading `orchestrator runs`."""
    era: Literal["extension", "core"] = "extension"
    """How it was created: the tasks extension (2026-07-28) or core tasks (2025-11-25)."""
    arguments: dict[str, Any] = field(default_factory=dict[str, Any])
    status_message: str | None = None
    progress: tuple[float, float | None] | None = None
    run_id: str | None = None
    """The pipeline run it drives (resume it with `orchestrator runs resume RUN`)."""
    result: dict[str, Any] | None = None
    """The `CallToolResult` wire dict (completed)."""
    error: dict[str, Any] | None = None
    """The JSON-RPC error (failed: the call could not finish, e.g. the server stopped)."""
    owner: str | None = None
    """`host:pid` of the process that runs it."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def is_error(self) -> bool:
        return bool(self.result and self.result.get("isError"))

    def with_(self, **changes: Any) -> TaskRecord:
        return replace(self, **changes)


class TaskStore(Protocol):
    """Durable task records (one implementation per `--state` backend)."""

    def create(self, record: TaskRecord) -> None:
        """Store a new task; it is readable (`get`) as soon as this returns."""
        ...

    def get(self, task_id: str) -> TaskRecord | None: ...

    def save(self, record: TaskRecord) -> None:
        """Write a task's current state (status, message, progress, result, error, run id)."""
        ...

    def list(self, limit: int = 50, *, principal: str | None = None, requester: str | None = None) -> list[TaskRecord]:
        """Newest first; narrowed to one principal or requester when given."""
        ...

    def active(self, requester: str) -> int:
        """How many unfinished tasks count against `requester`."""
        ...

    def purge(self, now: float) -> int:
        """Forget finished tasks whose TTL has elapsed; how many went."""
        ...

    def orphans(self) -> list[TaskRecord]:
        """Unfinished tasks whose process is gone (killed, crashed, restarted)."""
        ...

    def beat(self, task_ids: list[str]) -> None:
        """The heartbeat of tasks this process runs."""
        ...


class TaskLimits(BaseModel):
    """`tasks:` in the home's `config.yaml`: how many tasks, for how long (defaults shown)."""

    model_config = ConfigDict(extra="forbid")

    max_per_client: int = 16
    """Unfinished tasks one client may have at once, over all its sessions: an authenticated
    identity, else (HTTP) every connection from one address, else (stdio) the one client."""
    max_total: int = 1000
    """Unfinished tasks the whole server runs at once, every client together (each holds its
    call's state in memory until it ends)."""
    max_paused_calls: int = 8
    """2026-07-28 calls of one client that may wait, parked, for their next input round at once."""
    ttl_hours: float = 24.0
    """How long a task (and its result) is kept after it was created, when the client asks for no TTL."""
    max_ttl_hours: float = 168.0
    """The longest TTL a client may ask for (2025-11-25 `task.ttl`)."""
    paused_call_expiry_s: float = 600.0
    """A parked call whose client does not come back for its next round within this is stopped."""
    poll_interval_ms: int = 500
    """The polling interval suggested to clients."""
    handle_after_s: float = 45.0
    """A long call from a client that did not ask for a task answers with a run handle once it
    has run this long (`serve --handle-after` overrides it; 0: never)."""


def load_task_limits(config: Path) -> TaskLimits:
    """`tasks:` of a home's config.yaml; a broken section is logged and the defaults apply."""
    from skills.core.yamltext import YAMLError, load_yaml

    try:
        data = load_yaml(config.read_text(encoding="utf-8")) if config.is_file() else None
    except (OSError, UnicodeDecodeError, YAMLError) as exc:
        log.error("%s cannot be read (%s); the default task limits apply", config, exc)
        return TaskLimits()
    section = cast("dict[str, Any]", data).get("tasks") if isinstance(data, dict) else None
    if section is None:
        return TaskLimits()
    try:
        return TaskLimits.model_validate(section)
    except ValidationError as exc:
        log.error("%s: `tasks:` %s; the default task limits apply", config, exc.errors()[0]["msg"])
        return TaskLimits()
