"""Run history: one row per run in `state.sqlite`, beside LangGraph's checkpoints.

The checkpoints say how far a run got; this table says which pipeline (file and id) it ran,
with which inputs, how it ended (and what it spent on models, in `result.usage`, whether it
succeeded or not), who started it (`started_by`: the identity a run belongs to,
see `may_see`), and while it runs, which process runs it (`_owner`): a run whose process died
without recording an end reads as `interrupted`, with the command that resumes it.

Checkpoints are kept while a run may still be resumed; a succeeded run needs none (its result
is here), so the service deletes them when it succeeds, and `prune` clears what is left over
and forgets runs older than a given age. A damaged database is set aside and a new one started
(`_statedb`).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Callable, Collection, Generator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ._records import PruneReport as PruneReport
from ._records import RunRecord as RunRecord
from ._records import RunStatus as RunStatus
from ._records import StepRecord as StepRecord
from ._records import StepStatus as StepStatus
from ._records import record_from_row, step_from_row
from .owner import Owner
from .statedb import is_corrupt, set_aside

__all__ = [
    "LOCAL",
    "PAUSED_UNTIL",
    "RUN_HANDLE_COLUMNS",
    "RUN_TIMING_COLUMNS",
    "STARTED_BY_KEY",
    "PruneReport",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "StepRecord",
    "StepStatus",
    "may_see",
]


LOCAL = "local"
"""The identity of this machine's own user: the command line (`orchestrator run`), and the one
client of a stdio (or in-process) server. Runs recorded before runs had owners are theirs too."""
STARTED_BY_KEY = "started_by"
"""`ctx.extras` key: the identity a run started under this context belongs to (the MCP face puts
the caller's there; absent, the run is `LOCAL`'s)."""

T = TypeVar("T")
PAUSED_UNTIL = (
    "COALESCE(paused, 0) + CASE WHEN COALESCE(ended, heartbeat) IS NULL OR COALESCE(ended, heartbeat) > ? THEN 0"
    " ELSE ? - COALESCE(ended, heartbeat) END"
)
"""SQL: `paused` plus the time from the run's last stop (its end, else its last heartbeat) until
the two `?` (now): a resumed run's pause (a clock behind the recorded stop counts nothing)."""
_LIVE = ("running", "queued", "waiting")
"""Runs that `prune` never forgets."""

RUNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS orchestrator_runs (
    run_id TEXT PRIMARY KEY,
    pipeline TEXT NOT NULL,
    file TEXT,
    status TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    inputs TEXT NOT NULL,
    result TEXT,
    error TEXT,
    failed_step TEXT,
    artifacts TEXT
)
"""
STEPS_SCHEMA = """
CREATE TABLE IF NOT EXISTS orchestrator_steps (
    run_id TEXT NOT NULL,
    path TEXT NOT NULL,
    step_id TEXT NOT NULL,
    parent TEXT,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    started REAL,
    ended REAL,
    usage TEXT,
    error TEXT,
    inputs TEXT,
    outputs TEXT,
    PRIMARY KEY (run_id, path)
)
"""
"""One row per step (and loop item) of a run (`_steplog`)."""
_STEP_COLUMNS = (
    "path",
    "step_id",
    "parent",
    "kind",
    "status",
    "started",
    "ended",
    "usage",
    "error",
    "inputs",
    "outputs",
)
_OWNER_COLUMNS = {"owner_host": "TEXT", "owner_boot": "TEXT", "owner_pid": "INTEGER", "owner_started": "INTEGER"}
RUN_OWNER_COLUMNS = {**_OWNER_COLUMNS, "heartbeat": "REAL", "started_by": "TEXT", "asking": "TEXT", "answers": "TEXT"}
"""Columns added since the first version (which process runs a run, whose run it is, the question
a waiting run waits on and the answers it was given)."""
RUN_TIMING_COLUMNS = {"paused": "REAL"}
"""Seconds the run spent not running between `started` and `ended` (stopped, failed or
interrupted before a resume, waiting at a step-through gate, queued for a worker): its
duration is the rest (`RunRecord.duration`)."""
RUN_HANDLE_COLUMNS = {"kind": "TEXT", "envelope": "TEXT", "progress": "TEXT"}
"""What kind of run (`pipeline`, or `tool`: a long tool call followed by a run handle), the error
envelope of its failure, and its latest progress (read by `get_run`, written apart from the row)."""
_COLUMNS = (
    "run_id, pipeline, file, status, started, ended, inputs, result, error, failed_step, artifacts, "
    "owner_host, owner_boot, owner_pid, owner_started, heartbeat, started_by, paused"
)
RUN_COLUMNS = _COLUMNS
"""The columns of a run's row, in order (the PostgreSQL store writes the same rows)."""
_READ = _COLUMNS + ", asking, kind, envelope, progress"


class RunStore:
    """Reads and writes the run table (short transactions; safe across processes)."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.notices: list[str] = []
        """Messages about the database itself (it was damaged and set aside) for whoever reports to a user."""
        self._migrated = False

    @contextmanager
    def _connect(self) -> Generator[sqlite3.Connection]:
        self.db.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.db, timeout=30)
        try:
            with conn:
                if not self._migrated:
                    # The write lock first: two stores opening a new database at once (a server's
                    # run viewer and its pipelines, two processes) must not both add a column.
                    conn.execute("BEGIN IMMEDIATE")
                    conn.execute(RUNS_SCHEMA)
                    conn.execute(STEPS_SCHEMA)
                    have = {row[1] for row in conn.execute("PRAGMA table_info(orchestrator_runs)")}
                    for name, kind in (RUN_OWNER_COLUMNS | RUN_TIMING_COLUMNS | RUN_HANDLE_COLUMNS).items():
                        if name not in have:  # a database of an older version: add the owner columns
                            conn.execute(f"ALTER TABLE orchestrator_runs ADD COLUMN {name} {kind}")
                    self._migrated = True
                yield conn
        finally:
            conn.close()

    def _do(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` in one transaction; a damaged database is set aside and `work` runs on a new one."""
        try:
            with self._connect() as conn:
                return work(conn)
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise
            notice = set_aside(self.db, exc)
            if notice:
                self.notices.append(notice)
            self._migrated = False
            with self._connect() as conn:
                return work(conn)

    def ensure(self) -> None:
        """Open (and if need be create, migrate or replace) the database before a run uses it."""
        self._do(lambda conn: None)

    # -- writes ----------------------------------------------------------------------------------
    def start(
        self,
        run_id: str,
        pipeline: str,
        file: str | None,
        inputs: dict[str, Any],
        artifacts: Path,
        *,
        started_by: str = LOCAL,
    ) -> None:
        me = Owner.current()
        self._do(
            lambda conn: conn.execute(
                f"INSERT OR REPLACE INTO orchestrator_runs ({_COLUMNS}) VALUES (?, ?, ?, 'running', ?, NULL, ?,"
                " NULL, NULL, NULL, ?, ?, ?, ?, ?, ?, ?, 0)",
                (
                    run_id,
                    pipeline,
                    file,
                    time.time(),
                    json.dumps(inputs, default=str),
                    str(artifacts),
                    me.host,
                    me.boot,
                    me.pid,
                    me.started,
                    time.time(),
                    started_by,
                ),
            )
        )

    def resumed(self, run_id: str) -> None:
        """The run runs (again) in this process: the time since it last stopped (its end, or for a
        run whose process died or that waited in the queue, its last heartbeat) is a pause."""
        me = Owner.current()
        now = time.time()
        self._do(
            lambda conn: conn.execute(
                f"UPDATE orchestrator_runs SET status='running', ended=NULL, error=NULL, failed_step=NULL,"
                f" owner_host=?, owner_boot=?, owner_pid=?, owner_started=?, heartbeat=?, paused={PAUSED_UNTIL}"
                " WHERE run_id=?",
                (me.host, me.boot, me.pid, me.started, now, now, now, run_id),
            )
        )

    def pause(self, run_id: str, seconds: float) -> None:
        """Count `seconds` the run spent waiting while it ran (a step-through gate's question)."""
        self._do(
            lambda conn: conn.execute(
                "UPDATE orchestrator_runs SET paused=COALESCE(paused, 0) + ? WHERE run_id=?",
                (max(seconds, 0.0), run_id),
            )
        )

    def finish(
        self,
        run_id: str,
        status: RunStatus,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        failed_step: str | None = None,
        envelope: Mapping[str, Any] | None = None,
    ) -> None:
        """Record how a run ended (`envelope`: the error envelope a direct call answered with)."""
        self._do(
            lambda conn: conn.execute(
                "UPDATE orchestrator_runs SET status=?, ended=?, result=?, error=?, failed_step=?, envelope=?"
                " WHERE run_id=?",
                (
                    status,
                    time.time(),
                    None if result is None else json.dumps(result, default=str),
                    error,
                    failed_step,
                    None if envelope is None else json.dumps(envelope, default=str),
                    run_id,
                ),
            )
        )

    def put_steps(self, run_id: str, rows: list[dict[str, Any]], progress: dict[str, Any] | None = None) -> None:
        """Write step records (`_steplog`): a whole row (a step that began) replaces the step's
        record, a partial one (a step that ended) updates the columns it has; `progress`, the
        run's latest progress. One transaction."""

        def write(conn: Any) -> None:
            for row in rows:
                if "step_id" in row:
                    names = ", ".join(_STEP_COLUMNS)
                    updates = ", ".join(f"{c}=excluded.{c}" for c in _STEP_COLUMNS if c != "path")
                    conn.execute(
                        f"INSERT INTO orchestrator_steps (run_id, {names}) VALUES (?{', ?' * len(_STEP_COLUMNS)})"
                        f" ON CONFLICT (run_id, path) DO UPDATE SET {updates}",
                        (run_id, *(row.get(c) for c in _STEP_COLUMNS)),
                    )
                else:
                    changed = [c for c in _STEP_COLUMNS if c in row and c != "path"]
                    if changed:
                        conn.execute(
                            f"UPDATE orchestrator_steps SET {', '.join(f'{c}=?' for c in changed)}"
                            " WHERE run_id=? AND path=?",
                            (*(row[c] for c in changed), run_id, row["path"]),
                        )
            if progress is not None:
                conn.execute("UPDATE orchestrator_runs SET progress=? WHERE run_id=?", (json.dumps(progress), run_id))

        self._do(write)

    def set_kind(self, run_id: str, kind: str) -> None:
        """Say what kind of run a recorded run is (`tool`: a long call followed by a run handle)."""
        self._do(lambda conn: conn.execute("UPDATE orchestrator_runs SET kind=? WHERE run_id=?", (kind, run_id)))

    def wait(self, run_id: str, asking: dict[str, Any]) -> None:
        """The run waits for the person's answer to `asking` (its checkpoints stay for the resume)."""
        self._do(
            lambda conn: conn.execute(
                "UPDATE orchestrator_runs SET status='waiting', ended=?, error=NULL, failed_step=?, asking=?"
                " WHERE run_id=?",
                (time.time(), asking.get("step"), json.dumps(asking, default=str), run_id),
            )
        )

    def answer(self, run_id: str, key: str, answer: dict[str, Any]) -> dict[str, Any] | None:
        """Take the answer of the question `key` of a waiting run: the run is `running` here from
        now on (only one answer wins when two come at once). The run's answers so far, or None
        when it no longer waits on that question."""
        me = Owner.current()
        now = time.time()

        def take(conn: Any) -> dict[str, Any] | None:
            row = conn.execute(
                "SELECT status, asking, answers FROM orchestrator_runs WHERE run_id=?", (run_id,)
            ).fetchone()
            if row is None or row[0] != "waiting" or not row[1] or json.loads(row[1]).get("key") != key:
                return None
            answers: dict[str, Any] = json.loads(row[2]) if row[2] else {}
            answers[key] = answer
            cursor = conn.execute(
                "UPDATE orchestrator_runs SET status='running', ended=NULL, error=NULL, failed_step=NULL,"
                f" paused={PAUSED_UNTIL}, asking=NULL, answers=?, owner_host=?, owner_boot=?, owner_pid=?,"
                " owner_started=?, heartbeat=? WHERE run_id=? AND status='waiting'",
                (now, now, json.dumps(answers, default=str), me.host, me.boot, me.pid, me.started, now, run_id),
            )
            return answers if cursor.rowcount else None

        return self._do(take)

    def answers(self, run_id: str) -> dict[str, Any]:
        """The answers a run was given so far (its `ask:` steps find theirs when it resumes)."""
        row = self._do(
            lambda conn: conn.execute("SELECT answers FROM orchestrator_runs WHERE run_id=?", (run_id,)).fetchone()
        )
        return json.loads(row[0]) if row is not None and row[0] else {}

    def beat(self, run_ids: Collection[str]) -> None:
        """The heartbeat of runs this process runs (`_owner.Heartbeat`)."""
        marks = ",".join("?" * len(run_ids))
        self._do(
            lambda conn: conn.execute(
                f"UPDATE orchestrator_runs SET heartbeat=? WHERE status='running' AND run_id IN ({marks})",
                (time.time(), *run_ids),
            )
        )

    # -- reads -----------------------------------------------------------------------------------
    def get(self, run_id: str) -> RunRecord | None:
        row = self._do(
            lambda conn: conn.execute(f"SELECT {_READ} FROM orchestrator_runs WHERE run_id=?", (run_id,)).fetchone()
        )
        return None if row is None else record_from_row(row)

    def steps(self, run_id: str) -> list[StepRecord]:
        """The recorded steps of a run, in the order they started (empty: none yet, or no such run).

        This is the read API of the run viewer, `get_run` and `runs show`: each `StepRecord` has
        the step's `path` in the run (`fetch`, `pages[3]/fetch`, `pages[3]`), its `parent` path,
        `kind`, `status`, `started`/`ended` (Unix time) and `duration`, `usage`, the `error`
        envelope of a failure, and its bounded `inputs` and `outputs`. The records of a run in
        progress are at most `_steplog.FLUSH_EVERY` seconds behind it. A step of a run whose
        process is gone reads `interrupted` while its record says `running`. Callers check
        `may_see` on the run first: this method does not know who asks.
        """
        rows = self._do(
            lambda conn: conn.execute(
                f"SELECT {', '.join(_STEP_COLUMNS)} FROM orchestrator_steps WHERE run_id=? ORDER BY started, path",
                (run_id,),
            ).fetchall()
        )
        steps = [step_from_row(tuple(r)) for r in rows]
        if any(s.status == "running" for s in steps):
            run = self.get(run_id)
            if run is not None and run.status not in ("running", "queued", "waiting"):
                gone: StepStatus = "interrupted" if run.status == "interrupted" else "failed"
                steps = [replace(s, status=gone) if s.status == "running" else s for s in steps]
        return steps

    def list(
        self,
        limit: int = 50,
        pipeline: str | None = None,
        *,
        visible_to: str | None = None,
        status: RunStatus | None = None,
    ) -> list[RunRecord]:
        """Newest first; with `visible_to`, only the runs that identity may see (`may_see`)."""
        query = f"SELECT {_READ} FROM orchestrator_runs"
        where: list[str] = []
        args: list[Any] = []
        if pipeline:
            where.append("pipeline=?")
            args.append(pipeline)
        if status is not None and status != "interrupted":  # `interrupted` is read from `running` rows
            where.append("status=?")
            args.append(status)
        if visible_to is not None:  # the rule of `may_see`, in SQL
            where.append("COALESCE(started_by, ?) = ?")
            args += [LOCAL, visible_to]
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY started DESC LIMIT ?"
        rows = self._do(lambda conn: conn.execute(query, (*args, limit)).fetchall())
        return [record_from_row(r) for r in rows]

    # -- pruning ---------------------------------------------------------------------------------
    def prune(self, older_than: float | None = None, *, dry_run: bool = False) -> PruneReport:
        """Delete checkpoints no resume needs; with `older_than` (seconds), forget older finished runs.

        Kept: every checkpoint of a run that may be resumed (failed, cancelled, interrupted,
        running). Deleted: checkpoints of succeeded runs and of runs no longer recorded; with
        `older_than`, every run (not running) that started longer ago, with its checkpoints and
        artifacts folder. The database file is compacted afterwards (VACUUM).
        """
        before = self._bytes()
        records = self.list(10**9)
        cutoff = None if older_than is None else time.time() - older_than
        forget = [r for r in records if cutoff is not None and r.status not in _LIVE and r.started < cutoff]
        gone = {r.run_id for r in forget}
        keep = {r.run_id for r in records if r.status != "succeeded" and r.run_id not in gone}
        threads = self._do(self._checkpointed)
        drop = sorted(t for t in threads if t not in keep)
        if not dry_run:
            self._do(lambda conn: self._drop(conn, drop, sorted(gone)))
            for record in forget:
                if record.artifacts and Path(record.artifacts).is_dir():
                    shutil.rmtree(record.artifacts, ignore_errors=True)
            self._compact()
        after = self._bytes()
        return PruneReport(drop, forget, before, after)

    # What differs between the SQLite file and a shared database (`_pgruns`).
    def _checkpointed(self, conn: Any) -> set[str]:
        return _threads(conn)

    def _drop(self, conn: Any, threads: list[str], runs: list[str]) -> None:
        _delete(conn, threads, runs)

    def _bytes(self) -> int:
        return self.db.stat().st_size if self.db.exists() else 0

    def _compact(self) -> None:
        with self._connect() as conn:
            conn.execute("VACUUM")


def may_see(run: RunRecord, viewer: str) -> bool:
    """Whether the identity `viewer` may know of `run`: only the identity that started it.

    An identity is what `mcp_server.tasks.identity_of` calls the owner of a request: an
    authenticated principal (`principal:...`), a handshake-era HTTP session (`session:...`), a
    request with neither (`request:...`, which no later request shares), or `LOCAL` (the command
    line and the client of a stdio server; runs recorded before owners were are `LOCAL`'s). The
    run id alone is no key: to anyone else the run does not exist, and every surface (completion,
    `run://` resources, resume, listings) must answer exactly as for an unknown id. The command
    line's own `runs` commands are the operator's and see every run.
    """
    return (run.started_by or LOCAL) == viewer


def _threads(conn: sqlite3.Connection) -> set[str]:
    try:
        return {row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")} | {
            row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM writes")
        }
    except sqlite3.OperationalError:  # no checkpoint tables: nothing was ever checkpointed here
        return set()


def _delete(conn: sqlite3.Connection, threads: list[str], runs: list[str]) -> None:
    for thread in threads:
        conn.execute("DELETE FROM checkpoints WHERE thread_id=?", (thread,))
        conn.execute("DELETE FROM writes WHERE thread_id=?", (thread,))
    for run_id in runs:
        conn.execute("DELETE FROM orchestrator_runs WHERE run_id=?", (run_id,))
        conn.execute("DELETE FROM orchestrator_steps WHERE run_id=?", (run_id,))
