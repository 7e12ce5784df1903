"""The run history in PostgreSQL, and the results of loop items that workers ran.

`PgRunStore` is `RunStore` on the shared database: the same table and statements (see `_pg`),
plus what the distributed mode needs. A run keeps the YAML it was started with (`source`), so a
worker on another machine runs exactly that pipeline; a run handed to the workers is `queued`
until one takes it. The results of a parallel `for`'s items are kept per item (`item`,
`put_item`) by whichever worker ran them: a run resumed after its worker died takes the items
that finished from here instead of running them again, and `workers` says who ran how many.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from skills.core.budget import RunBudget
from skills.core.models import Usage

from .owner import Owner
from .pg import Connection, Postgres
from .runs import LOCAL, PAUSED_UNTIL, RUN_COLUMNS, RunStore

__all__ = ["PgRunStore", "SharedUsage"]

T = TypeVar("T")

_CHECKPOINT_TABLES = ("checkpoints", "checkpoint_writes", "checkpoint_blobs")


class PgRunStore(RunStore):
    """Run history and item results in PostgreSQL (shared by every replica and worker)."""

    def __init__(self, pg: Postgres) -> None:
        super().__init__(Path(pg.shown))
        self.pg = pg

    def _do(self, work: Callable[[Any], T]) -> T:
        with self.pg.connect() as conn:
            return work(conn)

    def ensure(self) -> None:
        self.pg.migrate()

    def start(
        self,
        run_id: str,
        pipeline: str,
        file: str | None,
        inputs: dict[str, Any],
        artifacts: Path,
        *,
        source: str | None = None,
        queued: bool = False,
        started_by: str = LOCAL,
        needs: str | None = None,
    ) -> None:
        """Record a new run: running here, or `queued` for a worker (no process runs it until one
        takes it); it belongs to `started_by` (`runs.may_see`); `needs` is what it calls, by
        digest (`_needs`), as JSON."""
        me = Owner.current()
        owner = (None, None, None, None) if queued else (me.host, me.boot, me.pid, me.started)
        now = time.time()
        self._do(
            lambda conn: conn.execute(
                f"INSERT INTO orchestrator_runs ({RUN_COLUMNS}, source, needs)"
                " VALUES (?, ?, ?, ?, ?, NULL, ?, NULL, NULL, NULL, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"
                " ON CONFLICT (run_id) DO UPDATE SET status=EXCLUDED.status, ended=NULL, paused=0,"
                " result=NULL, error=NULL, failed_step=NULL, envelope=NULL, progress=NULL,"
                " owner_host=EXCLUDED.owner_host,"
                " owner_boot=EXCLUDED.owner_boot, owner_pid=EXCLUDED.owner_pid,"
                " owner_started=EXCLUDED.owner_started, heartbeat=EXCLUDED.heartbeat,"
                " source=COALESCE(EXCLUDED.source, orchestrator_runs.source),"
                " needs=COALESCE(EXCLUDED.needs, orchestrator_runs.needs)",
                (
                    run_id,
                    pipeline,
                    file,
                    "queued" if queued else "running",
                    now,
                    json.dumps(inputs, default=str),
                    str(artifacts),
                    *owner,
                    now,
                    started_by,
                    source,
                    needs,
                ),
            )
        )

    def queue(self, run_id: str, needs: str | None = None) -> None:
        """Hand a stopped run back to the workers (resume): `queued`, no owner; `needs` (when
        given) is what it calls as the resuming side has it. The time since it stopped is a
        pause; its wait for a worker is counted when one takes it (`resumed`)."""
        now = time.time()
        self._do(
            lambda conn: conn.execute(
                "UPDATE orchestrator_runs SET status='queued', ended=NULL, error=NULL, failed_step=NULL,"
                " owner_host=NULL, owner_boot=NULL, owner_pid=NULL, owner_started=NULL,"
                f" heartbeat=?, paused={PAUSED_UNTIL}, needs=COALESCE(?, needs) WHERE run_id=?",
                (now, now, now, needs, run_id),
            )
        )

    def needs(self, run_id: str) -> str | None:
        """What the run calls, by digest, as JSON (`_needs`), where it was started or resumed."""
        row = self._do(
            lambda conn: conn.execute("SELECT needs FROM orchestrator_runs WHERE run_id=?", (run_id,)).fetchone()
        )
        return None if row is None else row[0]

    def source(self, run_id: str) -> str | None:
        row = self._do(
            lambda conn: conn.execute("SELECT source FROM orchestrator_runs WHERE run_id=?", (run_id,)).fetchone()
        )
        return None if row is None else row[0]

    # -- loop items ------------------------------------------------------------------------------
    def item(self, run_id: str, step_id: str, index: int) -> dict[str, Any] | None:
        """The recorded result of one item of a parallel loop (None: it has not finished)."""
        row = self._do(
            lambda conn: conn.execute(
                "SELECT entry FROM orchestrator_items WHERE run_id=? AND step_id=? AND idx=?", (run_id, step_id, index)
            ).fetchone()
        )
        return None if row is None else json.loads(row[0])

    def items(self, run_id: str, step_id: str) -> dict[int, dict[str, Any]]:
        """The recorded results of a parallel step's items, by index (a resumed run's finished ones)."""
        rows = self._do(
            lambda conn: conn.execute(
                "SELECT idx, entry FROM orchestrator_items WHERE run_id=? AND step_id=?", (run_id, step_id)
            ).fetchall()
        )
        return {int(idx): json.loads(entry) for idx, entry in rows}

    def put_item(self, run_id: str, step_id: str, index: int, entry: dict[str, Any], worker: str) -> bool:
        """Record an item's result; False when it was recorded already (the first one stays)."""
        cursor = self._do(
            lambda conn: conn.execute(
                "INSERT INTO orchestrator_items (run_id, step_id, idx, entry, worker, finished)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (run_id, step_id, index, json.dumps(entry, default=str), worker, time.time()),
            )
        )
        return bool(cursor.rowcount)

    def workers(self, run_id: str) -> dict[str, int]:
        """How many loop items each worker ran for this run (empty: none ran on a worker)."""

        def read(conn: Connection) -> dict[str, int]:
            row = conn.execute("SELECT workers FROM orchestrator_runs WHERE run_id=?", (run_id,)).fetchone()
            if row is not None and row[0]:
                return dict(json.loads(row[0]))
            return _live_workers(conn, run_id)

        return self._do(read)

    def forget_items(self, run_id: str) -> None:
        """A succeeded run needs its items' results no more (its result is in the history); who ran
        how many is kept with the run."""

        def forget(conn: Connection) -> None:
            counts = _live_workers(conn, run_id)
            if counts:
                conn.execute("UPDATE orchestrator_runs SET workers=? WHERE run_id=?", (json.dumps(counts), run_id))
            conn.execute("DELETE FROM orchestrator_items WHERE run_id=?", (run_id,))
            conn.execute("DELETE FROM orchestrator_agent_spend WHERE run_id=?", (run_id,))

        self._do(forget)

    # -- the agents' spending, run-wide ---------------------------------------------------------------
    def spend(self, run_id: str, usage: Usage) -> tuple[Usage, float]:
        """Add what an agent spent to the run's total; the total (every worker's agents together)
        and when the run's agents began spending (see `restart_spending`)."""

        def add(conn: Connection) -> tuple[Usage, float]:
            row = conn.execute(
                "INSERT INTO orchestrator_agent_spend (run_id, input_tokens, output_tokens, cost_usd, calls, since)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET"
                " input_tokens = orchestrator_agent_spend.input_tokens + EXCLUDED.input_tokens,"
                " output_tokens = orchestrator_agent_spend.output_tokens + EXCLUDED.output_tokens,"
                " cost_usd = orchestrator_agent_spend.cost_usd + EXCLUDED.cost_usd,"
                " calls = orchestrator_agent_spend.calls + EXCLUDED.calls"
                " RETURNING input_tokens, output_tokens, cost_usd, calls, since",
                (run_id, usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.calls, time.time()),
            ).fetchone()
            return Usage(int(row[0]), int(row[1]), float(row[2]), int(row[3])), float(row[4])

        return self._do(add)

    def spent(self, run_id: str) -> tuple[Usage, float]:
        """What the run's agents spent so far, and since when (a read: no row lock per loop item)."""
        row = self._do(
            lambda conn: conn.execute(
                "SELECT input_tokens, output_tokens, cost_usd, calls, since FROM orchestrator_agent_spend"
                " WHERE run_id=?",
                (run_id,),
            ).fetchone()
        )
        if row is None:
            return Usage(), time.time()
        return Usage(int(row[0]), int(row[1]), float(row[2]), int(row[3])), float(row[4])

    def restart_spending(self, run_id: str) -> None:
        """A worker (re)takes the run: its agents start from nothing, as a resumed run's do, and
        their time limit from now."""
        self._do(
            lambda conn: conn.execute(
                "INSERT INTO orchestrator_agent_spend (run_id, input_tokens, output_tokens, cost_usd, calls, since)"
                " VALUES (?, 0, 0, 0, 0, ?) ON CONFLICT (run_id) DO UPDATE SET input_tokens=0, output_tokens=0,"
                " cost_usd=0, calls=0, since=EXCLUDED.since",
                (run_id, time.time()),
            )
        )

    def agent_budget(self, run_id: str, limits: Any) -> RunBudget:
        """The run's agent limits counted run-wide: what every worker's agents of this run spent,
        and a time limit from when its agents began (not from this worker's part of it)."""
        budget = RunBudget.of(limits)
        spent = SharedUsage(self, run_id)
        budget.spent = spent
        if budget.max_time is not None:
            budget.deadline = time.monotonic() + (spent.since + budget.max_time - time.time())
        return budget

    # -- pruning (`RunStore.prune` on the shared tables) --------------------------------------------
    def _checkpointed(self, conn: Any) -> set[str]:
        return {row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints").fetchall()} | {
            row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoint_writes").fetchall()
        }

    def _drop(self, conn: Any, threads: list[str], runs: list[str]) -> None:
        for table in _CHECKPOINT_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE thread_id = ANY(?)", (threads,))
        conn.execute("DELETE FROM orchestrator_items WHERE run_id = ANY(?)", (threads + runs,))
        conn.execute("DELETE FROM orchestrator_agent_spend WHERE run_id = ANY(?)", (runs,))
        conn.execute("DELETE FROM orchestrator_steps WHERE run_id = ANY(?)", (runs,))
        conn.execute("DELETE FROM orchestrator_runs WHERE run_id = ANY(?)", (runs,))

    def _bytes(self) -> int:
        return self._do(_size)

    def _compact(self) -> None:
        """Nothing: PostgreSQL reclaims the space by itself (autovacuum)."""


def _live_workers(conn: Connection, run_id: str) -> dict[str, int]:
    rows = conn.execute(
        "SELECT worker, count(*) FROM orchestrator_items WHERE run_id=? GROUP BY worker ORDER BY worker", (run_id,)
    ).fetchall()
    return {worker: int(count) for worker, count in rows}


def _size(conn: Connection) -> int:
    tables = ("orchestrator_runs", "orchestrator_steps", "orchestrator_items", *_CHECKPOINT_TABLES)
    row = conn.execute(
        "SELECT COALESCE(sum(pg_total_relation_size(t::regclass)), 0) FROM unnest(?::text[]) AS t", (list(tables),)
    ).fetchone()
    return int(row[0])


class SharedUsage(Usage):
    """A run's agent spending as every worker sees it: each charge adds to the run's row in the
    shared state and takes back the run-wide total (one short statement per model call), so the
    limits see what the agents on other workers spent up to this worker's last charge."""

    def __init__(self, store: PgRunStore, run_id: str) -> None:
        super().__init__()
        self._store, self._run_id = store, run_id
        total, self.since = store.spent(run_id)  # what was spent before this part began
        self._take(total)

    def add(self, other: Usage) -> Usage:
        self.estimated = self.estimated or other.estimated
        self._take(self._store.spend(self._run_id, other)[0])
        return self

    def _take(self, total: Usage) -> None:
        self.input_tokens, self.output_tokens = total.input_tokens, total.output_tokens
        self.cost_pico, self.calls = total.cost_pico, total.calls
