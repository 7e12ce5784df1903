"""Long work done right: MCP tasks (both eras) and 2026-07-28 input rounds that continue.

- `TaskStore` / `SqliteTaskStore`: durable task records (a PostgreSQL store implements the same
  interface later).
- `TaskService`: parked executions and tasks of one server; `continue_in_rounds` runs one round
  of a 2026-07-28 call that may pause for the client's model; `install` serves the task methods.
"""

from ._calls import continue_in_rounds
from ._methods import TASKS_EXTENSION, install, task_wire
from ._service import TaskService
from ._sqlite import SqliteTaskStore
from ._target import RUN_IDS_KEY, CallTarget, Identity, identity_of, share_of
from .store import TaskLimits, TaskRecord, TaskStore, load_task_limits

__all__ = [
    "RUN_IDS_KEY",
    "TASKS_EXTENSION",
    "CallTarget",
    "Identity",
    "SqliteTaskStore",
    "TaskLimits",
    "TaskRecord",
    "TaskService",
    "TaskStore",
    "continue_in_rounds",
    "identity_of",
    "install",
    "load_task_limits",
    "share_of",
    "task_wire",
]
