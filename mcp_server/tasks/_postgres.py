"""`TaskStore` in PostgreSQL (`--state postgresql://...`): task records every replica reads.

The table and statements are those of `SqliteTaskStore` (`pipelines._pg` hands psycopg the same
SQL), so a task created through one replica is polled, cancelled and fetched through another.
Two differences: writes are upserts, and a finished task stays as it finished: a replica that
cancelled a task is not overwritten by the replica whose call was still winding down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pipelines._owner import Owner
from pipelines._pg import Postgres, pg_dialect

from ._sqlite import _COLUMNS, _MARKS, _SCHEMA, SqliteTaskStore, _row
from .store import TaskRecord

__all__ = ["PostgresTaskStore"]

T = TypeVar("T")

_UPDATE = ", ".join(f"{c}=EXCLUDED.{c}" for c in _COLUMNS.split(", ") if c != "task_id")


class PostgresTaskStore(SqliteTaskStore):
    """Task records in the shared PostgreSQL database."""

    def __init__(self, pg: Postgres) -> None:
        self.pg = pg
        self._ready = False

    def _do(self, work: Callable[[Any], T]) -> T:
        if not self._ready:  # the table of SqliteTaskStore, in PostgreSQL's types (once per process)
            self.pg.migrate()
            self.pg.schema(pg_dialect(_SCHEMA))
            self._ready = True
        with self.pg.connect() as conn:
            return work(conn)

    def save(self, record: TaskRecord) -> None:
        row = _row(record, Owner.current())
        self._do(
            lambda conn: conn.execute(
                f"INSERT INTO orchestrator_tasks ({_COLUMNS}) VALUES ({_MARKS}) ON CONFLICT (task_id) DO UPDATE"
                f" SET {_UPDATE} WHERE orchestrator_tasks.status IN ('working', 'input_required')",
                row,
            )
        )
