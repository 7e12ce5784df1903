"""PostgreSQL as the shared state of the distributed mode (`--state postgresql://...`).

One `Postgres` per URL and process: a small pool of connections for the run history, the task
records, the results of loop items and the registered pipelines (short transactions, called in
worker threads like the SQLite stores), and the schema, migrated once per process on first use.

Migrations run at start-up of every replica and worker, possibly at the same moment: they take a
PostgreSQL advisory lock, and every statement is idempotent (`CREATE TABLE IF NOT EXISTS`, `ADD
COLUMN IF NOT EXISTS`), so running them twice, or from two processes at once, changes nothing.
LangGraph's checkpoint tables are created by its own `PostgresSaver.setup()` under the same lock.

The stores share their SQL with the SQLite ones: `Connection` takes `?` placeholders as sqlite3
does and hands `%s` to psycopg, so a statement is written once for both backends.

A connection URL carries a password: `redact` is what every log line and `doctor` show.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, LiteralString, cast
from urllib.parse import urlsplit, urlunsplit

from .runs import RUN_HANDLE_COLUMNS, RUN_OWNER_COLUMNS, RUN_TIMING_COLUMNS, RUNS_SCHEMA, STEPS_SCHEMA

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import DictRow

__all__ = ["Connection", "Postgres", "is_postgres", "postgres", "redact"]

log = logging.getLogger("pipelines.state")

_LOCK_KEY = 0x6F726368  # "orch": the advisory lock that serialises migrations across processes
SCHEMA_VERSION = 1
MIGRATION_WAIT = 300.0
"""Seconds a starting process waits for another one's migrations before it gives up."""


def pg_dialect(sqlite_schema: str) -> str:
    """A `CREATE TABLE` written for SQLite, in PostgreSQL's types (one definition of each table)."""
    return sqlite_schema.replace(" REAL", " DOUBLE PRECISION").replace(" INTEGER", " BIGINT")


_MIGRATIONS: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS orchestrator_schema (version INTEGER NOT NULL)",
    pg_dialect(RUNS_SCHEMA),
    *(
        f"ALTER TABLE orchestrator_runs ADD COLUMN IF NOT EXISTS {name} {pg_dialect(' ' + kind).strip()}"
        for name, kind in (RUN_OWNER_COLUMNS | RUN_TIMING_COLUMNS | RUN_HANDLE_COLUMNS).items()
    ),
    # The pipeline's YAML as it was started: a worker on another machine runs it from here.
    "ALTER TABLE orchestrator_runs ADD COLUMN IF NOT EXISTS source TEXT",
    # Name -> digest of every skill and pipeline the run calls, where it started (`_needs`).
    "ALTER TABLE orchestrator_runs ADD COLUMN IF NOT EXISTS needs TEXT",
    # How many loop items each worker ran (kept when the items' results are dropped at success).
    "ALTER TABLE orchestrator_runs ADD COLUMN IF NOT EXISTS workers TEXT",
    "CREATE INDEX IF NOT EXISTS orchestrator_runs_started ON orchestrator_runs (started DESC)",
    # One row per step (and loop item) of a run: status, times, usage, error, bounded values.
    pg_dialect(STEPS_SCHEMA),
    """CREATE TABLE IF NOT EXISTS orchestrator_items (
        run_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        idx INTEGER NOT NULL,
        entry TEXT NOT NULL,
        worker TEXT NOT NULL,
        finished DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, step_id, idx)
    )""",
    # What the agents of a run spent, summed over every worker that ran its steps and items.
    """CREATE TABLE IF NOT EXISTS orchestrator_agent_spend (
        run_id TEXT PRIMARY KEY,
        input_tokens BIGINT NOT NULL,
        output_tokens BIGINT NOT NULL,
        cost_usd DOUBLE PRECISION NOT NULL,
        calls BIGINT NOT NULL,
        since DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS orchestrator_pipelines (
        id TEXT PRIMARY KEY,
        text TEXT NOT NULL,
        updated DOUBLE PRECISION NOT NULL
    )""",
)
"""The tables of the run history, loop items and registered pipelines; the task records' table
is added by its store (`schema`), which lives in the server's layer."""

NOTIFY_PIPELINES = "orchestrator_pipelines"
"""The LISTEN/NOTIFY channel on which a registration tells every replica and worker."""


def is_postgres(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """`url` with its password (and a `password=` query value) replaced by `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that does not parse>"
    netloc = parts.netloc
    if "@" in netloc:
        who, _, where = netloc.rpartition("@")
        user, sep, _ = who.partition(":")
        netloc = f"{user}{':***' if sep else ''}@{where}"
    query = "&".join(
        f"{k}=***" if k.lower() == "password" else f"{k}{'=' if sep else ''}{v}"
        for k, sep, v in (p.partition("=") for p in parts.query.split("&") if p)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class Connection:
    """A psycopg connection that takes sqlite3's `?` placeholders (our SQL never quotes a `?`)."""

    def __init__(self, conn: Any) -> None:
        self.raw = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(sql.replace("?", "%s"), tuple(params))


class Postgres:
    """The shared state database of one URL: a connection pool and a migrated schema."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown = redact(url)
        self._pool: Any = None
        self._lock = threading.Lock()
        self._migrated = False

    def _open(self) -> Any:
        with self._lock:
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                self.migrate()
                # Pooled connections; each store call is one short transaction.
                self._pool = ConnectionPool(self.url, min_size=1, max_size=8, open=True, name="orchestrator")
            return self._pool

    @contextmanager
    def connect(self) -> Generator[Connection]:
        """One transaction (committed when the block ends without an error)."""
        with self._open().connection() as conn:
            yield Connection(conn)

    def migrate(self) -> None:
        """Create or update the schema (idempotent; serialised across processes by an advisory lock)."""
        if self._migrated:
            return
        self.schema(*_MIGRATIONS, langgraph=True)
        self._migrated = True
        log.info("state database %s is ready (schema %d)", self.shown, SCHEMA_VERSION)

    def schema(self, *statements: str, langgraph: bool = False) -> None:
        """Run idempotent DDL under the migrations' lock (two processes creating one table at once
        would collide in PostgreSQL's catalogue); `langgraph`: also LangGraph's checkpoint tables."""
        import psycopg
        from psycopg.rows import DictRow, dict_row

        # rows as dicts: LangGraph's `setup` reads its own rows by column name
        with psycopg.Connection[DictRow].connect(self.url, autocommit=True, row_factory=dict_row) as conn:
            _lock_migrations(conn)
            try:
                for statement in statements:
                    conn.execute(cast("LiteralString", statement))  # our own constant DDL
                if langgraph:
                    from langgraph.checkpoint.postgres import PostgresSaver

                    row = conn.execute("SELECT max(version) AS v FROM orchestrator_schema").fetchone()
                    if row is None or row["v"] is None:
                        conn.execute("INSERT INTO orchestrator_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
                    elif row["v"] < SCHEMA_VERSION:
                        conn.execute("UPDATE orchestrator_schema SET version = %s", (SCHEMA_VERSION,))
                    PostgresSaver(conn).setup()  # LangGraph's checkpoint tables, its own migrations
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))

    def notify(self, channel: str, payload: str) -> None:
        with self.connect() as conn:
            conn.execute("SELECT pg_notify(?, ?)", (channel, payload))

    async def listen(self, channel: str, heard: Callable[[str | None], Awaitable[None]]) -> None:
        """Call `heard(payload)` for every notification on `channel` (until cancelled).

        `heard(None)` comes first on every (re)connection: whatever was notified while nobody
        listened must be looked up again. A lost connection is opened again after a pause.
        """
        import anyio
        import psycopg
        from psycopg import sql

        pause = 1.0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    pause = 1.0
                    await heard(None)
                    async for note in conn.notifies():
                        await heard(note.payload)
            except psycopg.Error as exc:
                log.warning("lost the state database %s (%s); listening again in %gs", self.shown, exc, pause)
            await anyio.sleep(pause)
            pause = min(pause * 2, 30.0)

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


def _lock_migrations(conn: psycopg.Connection[DictRow]) -> None:
    """Take the migrations' advisory lock, polling: a session blocked inside `pg_advisory_lock`
    is a transaction that LangGraph's `CREATE INDEX CONCURRENTLY` (run by the holder) waits for,
    a deadlock PostgreSQL breaks by failing one process's start."""
    deadline = time.monotonic() + MIGRATION_WAIT
    while not (conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (_LOCK_KEY,)).fetchone() or {}).get("got"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"another process has been migrating the state database for {MIGRATION_WAIT:g}s")
        time.sleep(0.1)  # another process migrates (a second or so); no event to wait on across processes


@functools.cache
def postgres(url: str) -> Postgres:
    """The process's `Postgres` for `url` (one pool per database, whoever asks)."""
    return Postgres(url)
