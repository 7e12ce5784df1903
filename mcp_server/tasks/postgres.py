"""`TaskStore` in PostgreSQL (`--state postgresql://...`): task records every replica reads.

The table and statements are those of `SqliteTaskStore` (`pipelines.storage.pg` hands psycopg the same
SQL), so a task created through one replica is polled, cancelled and fetched through another.
Two differences: writes are upserts, and a finished task stays as it finished: a replica that
cancelled a task is not overwritten by the replica whose call was still winding down.

A task runs in the replica that created it (its body, and the model calls that wait in its
inbox, live in that process), but the client may come back through any replica. So the store
also carries what crosses between them:

- the running replica publishes a waiting task's outstanding input requests (`put_requests`),
  which another replica shows in `tasks/get` (`requests`);
- another replica's answers (`tasks/update`) and cancel requests (`tasks/cancel`) are written to
  `orchestrator_task_messages` and announced on the channel `orchestrator_tasks` (LISTEN/NOTIFY,
  payload: the task id); the running replica takes them (`take`) and hands them to the task.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
import anyio.to_thread

from pipelines.storage.owner import Owner
from pipelines.storage.pg import Connection, Postgres, pg_dialect

from ._execution import first_of
from ._sqlite import TASK_COLUMNS, TASK_MARKS, TASKS_SCHEMA, SqliteTaskStore, task_row
from .store import TaskRecord

if TYPE_CHECKING:
    from ._execution import Execution

__all__ = ["NOTIFY_TASKS", "Message", "PostgresTaskStore", "Relay"]

log = logging.getLogger("mcp_server.tasks")

T = TypeVar("T")

_UPDATE = ", ".join(f"{c}=EXCLUDED.{c}" for c in TASK_COLUMNS.split(", ") if c != "task_id")

NOTIFY_TASKS = "orchestrator_tasks"
"""The LISTEN/NOTIFY channel on which a replica tells the others that a task has a message."""

_TABLES = (
    """CREATE TABLE IF NOT EXISTS orchestrator_task_inputs (
        task_id TEXT PRIMARY KEY,
        requests TEXT NOT NULL,
        updated DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS orchestrator_task_messages (
        id BIGSERIAL PRIMARY KEY,
        task_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS orchestrator_task_messages_task ON orchestrator_task_messages (task_id)",
)

MessageKind = Literal["answer", "cancel"]
Message = tuple[str, MessageKind, dict[str, Any]]
"""(task id, kind, body): answers to input requests (by key), or a cancel request (empty)."""

MESSAGE_TTL = 3600.0
"""Seconds a message no replica took is kept (its task's replica is gone)."""


class PostgresTaskStore(SqliteTaskStore):
    """Task records in the shared PostgreSQL database."""

    def __init__(self, pg: Postgres) -> None:  # pyright: ignore[reportMissingSuperCall]  # no SQLite file here
        self.pg = pg
        self._ready = False

    def _do(self, work: Callable[[Any], T]) -> T:
        if not self._ready:  # the table of SqliteTaskStore, in PostgreSQL's types (once per process)
            self.pg.migrate()
            self.pg.schema(pg_dialect(TASKS_SCHEMA), *_TABLES)
            self._ready = True
        with self.pg.connect() as conn:
            return work(conn)

    def save(self, record: TaskRecord) -> None:
        row = task_row(record, Owner.current())
        self._do(
            lambda conn: conn.execute(
                f"INSERT INTO orchestrator_tasks ({TASK_COLUMNS}) VALUES ({TASK_MARKS}) ON CONFLICT (task_id) DO UPDATE"
                f" SET {_UPDATE} WHERE orchestrator_tasks.status IN ('working', 'input_required')",
                row,
            )
        )

    def purge(self, now: float) -> int:
        """Finished tasks past their TTL, and what crossed between replicas for tasks that ended."""

        def tidy(conn: Connection) -> None:
            conn.execute(
                "DELETE FROM orchestrator_task_inputs WHERE task_id NOT IN"
                " (SELECT task_id FROM orchestrator_tasks WHERE status IN ('working', 'input_required'))"
            )
            conn.execute("DELETE FROM orchestrator_task_messages WHERE created < ?", (now - MESSAGE_TTL,))

        self._do(tidy)
        return super().purge(now)

    # -- what crosses between replicas -----------------------------------------------------------
    def put_requests(self, task_id: str, requests: dict[str, dict[str, Any]]) -> None:
        """The input requests a task waits on now (its running replica writes them)."""
        self._do(
            lambda conn: conn.execute(
                "INSERT INTO orchestrator_task_inputs (task_id, requests, updated) VALUES (?, ?, ?)"
                " ON CONFLICT (task_id) DO UPDATE SET requests=EXCLUDED.requests, updated=EXCLUDED.updated",
                (task_id, json.dumps(requests), time.time()),
            )
        )

    def requests(self, task_id: str) -> dict[str, dict[str, Any]]:
        """The input requests a task that runs in another replica waits on (wire dicts by key)."""
        row = self._do(
            lambda conn: conn.execute(
                "SELECT requests FROM orchestrator_task_inputs WHERE task_id=?", (task_id,)
            ).fetchone()
        )
        return dict(json.loads(row[0])) if row is not None else {}

    def send(self, task_id: str, kind: MessageKind, body: dict[str, Any]) -> None:
        """Leave a message for the replica that runs the task, and wake it.

        Answers also leave the outstanding requests at once (and, when none is left, the task is
        `working` again): a client polling any replica must not be shown, and answer again, a
        request it answered while the running replica has not taken the answer yet.
        """

        def post(conn: Connection) -> None:
            if kind == "answer":
                row = conn.execute(
                    "SELECT requests FROM orchestrator_task_inputs WHERE task_id=? FOR UPDATE", (task_id,)
                ).fetchone()
                left = {k: v for k, v in json.loads(row[0]).items() if k not in body} if row is not None else {}
                conn.execute(
                    "UPDATE orchestrator_task_inputs SET requests=?, updated=? WHERE task_id=?",
                    (json.dumps(left), time.time(), task_id),
                )
                if not left:
                    conn.execute(
                        "UPDATE orchestrator_tasks SET status='working', status_message='answered; working'"
                        " WHERE task_id=? AND status='input_required'",
                        (task_id,),
                    )
            conn.execute(
                "INSERT INTO orchestrator_task_messages (task_id, kind, body, created) VALUES (?, ?, ?, ?)",
                (task_id, kind, json.dumps(body, default=str), time.time()),
            )
            conn.execute("SELECT pg_notify(?, ?)", (NOTIFY_TASKS, task_id))

        self._do(post)

    def take(self, task_ids: list[str]) -> list[Message]:
        """The messages for these tasks (the ones this replica runs), oldest first; taken once."""
        if not task_ids:
            return []
        rows = self._do(
            lambda conn: conn.execute(
                "DELETE FROM orchestrator_task_messages WHERE task_id = ANY(?) RETURNING id, task_id, kind, body",
                (task_ids,),
            ).fetchall()
        )
        return [(row[1], row[2], json.loads(row[3])) for row in sorted(rows)]

    async def listen(self, heard: Callable[[str | None], Awaitable[None]]) -> None:
        """`heard(task_id)` for each message announced (None: look at every task), until cancelled."""
        await anyio.to_thread.run_sync(self._do, _nothing)  # the tables exist before anyone listens
        await self.pg.listen(NOTIFY_TASKS, heard)

    def relay(self, changed: Callable[[str, Execution], None], live: Mapping[str, Execution]) -> Relay:
        return Relay(self, changed, live)


def _nothing(conn: Connection) -> None:
    return None


CANCEL_WAIT = 10.0
"""Seconds a replica waits for the replica that runs a task to confirm its cancel (after that it
records the task cancelled itself: that replica is gone or stuck)."""


class Relay:
    """One replica's side of the tasks whose client comes back through another replica.

    For the tasks it runs: it publishes their input requests when they wait, and hands them the
    answers and cancels other replicas leave. For tasks another replica runs: it shows their
    input requests and leaves the client's answers and cancels for that replica.
    """

    def __init__(
        self,
        store: PostgresTaskStore,
        changed: Callable[[str, Execution], None],
        live: Mapping[str, Execution],
    ) -> None:
        self.store = store
        self._changed = changed
        """Write a task's current record (`TaskService._changed`)."""
        self._live = live
        """The executions of the tasks this replica runs, by task id (`TaskService.tasks`)."""
        self.remote: dict[str, dict[str, dict[str, Any]]] = {}
        """Input requests of tasks other replicas run, as last read (by task id)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._listening = False

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run `work` until the relay closes (a failure is logged)."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    # -- tasks this replica runs -----------------------------------------------------------------
    def started(self, task_id: str, execution: Execution) -> None:
        """A task started here: listen for messages (once per process) and publish its waits."""
        if not self._listening:
            self._listening = True
            self.spawn(self.store.listen(self._heard), "listen for task messages")
        if execution.inbox is not None:
            self.spawn(self._watch(task_id, execution), f"publish the waits of task {task_id[:8]}")

    async def _watch(self, task_id: str, execution: Execution) -> None:
        """Publish the task's input requests each time it starts waiting for the client."""
        inbox = execution.inbox
        assert inbox is not None
        while not execution.finished.is_set():
            asked = inbox.next_request()
            if execution.waiting:
                await inbox.settle()  # parallel model calls join the same round
                if execution.waiting:
                    await self._publish(task_id, execution)
            await first_of(execution.finished.wait, asked.wait)

    async def _publish(self, task_id: str, execution: Execution) -> None:
        assert execution.inbox is not None
        requests = {
            key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, request in execution.inbox.pending.items()
        }
        await anyio.to_thread.run_sync(self.store.put_requests, task_id, requests)
        self._changed(task_id, execution)  # then `input_required` (the requests are readable first)

    async def answer_here(self, task_id: str, execution: Execution, responses: dict[str, Any]) -> None:
        """Hand answers to a task that runs here; its record says `working` again once it goes on."""
        if execution.inbox is None:
            return
        execution.inbox.answer(responses)
        await execution.inbox.settle()  # the answered requests leave the inbox
        if not execution.finished.is_set() and not execution.waiting:  # (a new wait: `_watch` writes it)
            self._changed(task_id, execution)

    async def _heard(self, task_id: str | None) -> None:
        """A message was announced (None: after a reconnection, look for all of ours)."""
        if task_id is not None and self._live.get(task_id) is None:
            return  # another replica runs it
        ids = [task_id] if task_id is not None else list(self._live)
        for tid, kind, body in await anyio.to_thread.run_sync(self.store.take, ids):
            execution = self._live.get(tid)
            if execution is None:
                continue
            if kind == "cancel":
                log.info("task %s: cancelled through another replica", tid[:8])
                execution.cancel()
            else:
                await self.answer_here(tid, execution, body)

    # -- tasks another replica runs --------------------------------------------------------------
    async def refresh(self, task_id: str) -> bool:
        """Read the input requests of a task another replica runs (before showing them); False:
        there are none (yet: its status can be written before them)."""
        found = self.remote[task_id] = await anyio.to_thread.run_sync(self.store.requests, task_id)
        while len(self.remote) > 1000:
            self.remote.pop(next(iter(self.remote)))
        return bool(found)

    async def answer(self, task_id: str, responses: dict[str, Any]) -> None:
        await anyio.to_thread.run_sync(self.store.send, task_id, "answer", responses)

    async def cancel(self, task_id: str) -> TaskRecord | None:
        """Ask the replica that runs the task to stop it; the record once it has (None: no answer)."""
        nothing: dict[str, Any] = {}
        await anyio.to_thread.run_sync(self.store.send, task_id, "cancel", nothing)
        with anyio.move_on_after(CANCEL_WAIT):
            while True:
                record = await anyio.to_thread.run_sync(self.store.get, task_id)
                if record is None or record.terminal:
                    return record
                await anyio.sleep(0.05)  # another process writes it: no event reaches this one
        return None

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
