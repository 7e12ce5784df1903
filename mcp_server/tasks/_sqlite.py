"""`TaskStore` in SQLite: the table `orchestrator_tasks` of the home's `state.sqlite`.

One short transaction per call, so several server processes on one home (stdio clients each
start their own) share it safely. Which process runs an unfinished task is recorded as for runs
(`pipelines.storage.owner`): a task whose process is gone is an orphan, reported by `orphans`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pipelines.storage.owner import Owner, owner_alive

from .store import TaskRecord

__all__ = ["SqliteTaskStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS orchestrator_tasks (
    task_id TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    ttl_ms INTEGER,
    principal TEXT,
    requester TEXT NOT NULL,
    client TEXT NOT NULL,
    era TEXT NOT NULL,
    arguments TEXT NOT NULL,
    status_message TEXT,
    progress TEXT,
    run_id TEXT,
    result TEXT,
    error TEXT,
    owner_host TEXT,
    owner_boot TEXT,
    owner_pid INTEGER,
    owner_started INTEGER,
    heartbeat REAL
)
"""
_COLUMNS = (
    "task_id, tool, status, created, updated, ttl_ms, principal, requester, client, era, arguments, "
    "status_message, progress, run_id, result, error, owner_host, owner_boot, owner_pid, owner_started, heartbeat"
)
_UNFINISHED = "status IN ('working', 'input_required')"


class SqliteTaskStore:
    """Task records in one SQLite file."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._ready = False

    @contextmanager
    def _connect(self) -> Generator[sqlite3.Connection]:
        self.db.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.db, timeout=30)
        try:
            with conn:
                if not self._ready:
                    conn.execute(_SCHEMA)
                    self._ready = True
                yield conn
        finally:
            conn.close()

    def _do(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._connect() as conn:
            return work(conn)

    def create(self, record: TaskRecord) -> None:
        row = _row(record, Owner.current())
        self._do(lambda conn: conn.execute(f"INSERT INTO orchestrator_tasks ({_COLUMNS}) VALUES ({_MARKS})", row))

    def save(self, record: TaskRecord) -> None:
        row = _row(record, Owner.current())
        self._do(
            lambda conn: conn.execute(f"INSERT OR REPLACE INTO orchestrator_tasks ({_COLUMNS}) VALUES ({_MARKS})", row)
        )

    def get(self, task_id: str) -> TaskRecord | None:
        row = self._do(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM orchestrator_tasks WHERE task_id=?", (task_id,)
            ).fetchone()
        )
        return None if row is None else _record(row)

    def list(self, limit: int = 50, *, principal: str | None = None, requester: str | None = None) -> list[TaskRecord]:
        query = f"SELECT {_COLUMNS} FROM orchestrator_tasks"
        args: list[Any] = []
        where: list[str] = []
        if principal is not None:
            where.append("principal=?")
            args.append(principal)
        if requester is not None:
            where.append("requester=?")
            args.append(requester)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created DESC LIMIT ?"
        rows = self._do(lambda conn: conn.execute(query, (*args, limit)).fetchall())
        return [_record(r) for r in rows]

    def active(self, requester: str) -> int:
        row = self._do(
            lambda conn: conn.execute(
                f"SELECT COUNT(*) FROM orchestrator_tasks WHERE requester=? AND {_UNFINISHED}", (requester,)
            ).fetchone()
        )
        return int(row[0])

    def purge(self, now: float) -> int:
        cursor = self._do(
            lambda conn: conn.execute(
                f"DELETE FROM orchestrator_tasks WHERE NOT {_UNFINISHED} AND ttl_ms IS NOT NULL"
                " AND created + ttl_ms / 1000.0 < ?",
                (now,),
            )
        )
        return int(cursor.rowcount or 0)

    def orphans(self) -> list[TaskRecord]:
        rows = self._do(
            lambda conn: conn.execute(f"SELECT {_COLUMNS} FROM orchestrator_tasks WHERE {_UNFINISHED}").fetchall()
        )
        return [_record(r) for r in rows if not owner_alive(r[16], r[17], r[18], r[19], r[20])]

    def beat(self, task_ids: list[str]) -> None:
        if not task_ids:
            return
        marks = ",".join("?" * len(task_ids))
        self._do(
            lambda conn: conn.execute(
                f"UPDATE orchestrator_tasks SET heartbeat=? WHERE task_id IN ({marks})", (time.time(), *task_ids)
            )
        )


_MARKS = ", ".join("?" * len(_COLUMNS.split(", ")))


def _row(record: TaskRecord, me: Owner) -> tuple[Any, ...]:
    return (
        record.task_id,
        record.tool,
        record.status,
        record.created,
        record.updated,
        record.ttl_ms,
        record.principal,
        record.requester,
        record.client,
        record.era,
        json.dumps(record.arguments, default=str),
        record.status_message,
        None if record.progress is None else json.dumps(list(record.progress)),
        record.run_id,
        None if record.result is None else json.dumps(record.result, default=str),
        None if record.error is None else json.dumps(record.error),
        me.host,
        me.boot,
        me.pid,
        me.started,
        time.time(),
    )


def _record(row: tuple[Any, ...]) -> TaskRecord:
    progress = json.loads(row[12]) if row[12] else None
    return TaskRecord(
        task_id=row[0],
        tool=row[1],
        status=row[2],
        created=row[3],
        updated=row[4],
        ttl_ms=row[5],
        principal=row[6],
        requester=row[7],
        client=row[8],
        era=row[9],
        arguments=json.loads(row[10]),
        status_message=row[11],
        progress=(progress[0], progress[1]) if progress else None,
        run_id=row[13],
        result=json.loads(row[14]) if row[14] else None,
        error=json.loads(row[15]) if row[15] else None,
        owner=f"{row[16]}:{row[18]}" if row[16] and row[18] else None,
    )


# The same table and rows in the PostgreSQL store (`postgres`): one definition of both.
TASKS_SCHEMA, TASK_COLUMNS, TASK_MARKS, task_row, task_record = _SCHEMA, _COLUMNS, _MARKS, _row, _record
