"""Run history: one row per run in `state.sqlite`, beside LangGraph's checkpoints.

The checkpoints say how far a run got; this table says which pipeline (file and id) it ran,
with which inputs, and how it ended, so `orchestrator runs list|show|resume` and a new server
process can find and resume it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["RunRecord", "RunStatus", "RunStore"]

RunStatus = Literal["running", "succeeded", "failed", "cancelled"]

_SCHEMA = """
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


@dataclass(frozen=True)
class RunRecord:
    """One run as recorded."""

    run_id: str
    pipeline: str
    file: str | None
    status: RunStatus
    started: float
    ended: float | None
    inputs: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    failed_step: str | None
    artifacts: str | None

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class RunStore:
    """Reads and writes the run table (short transactions; safe across processes)."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def _connect(self) -> sqlite3.Connection:
        self.db.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.db, timeout=30)
        conn.execute(_SCHEMA)
        return conn

    def start(self, run_id: str, pipeline: str, file: str | None, inputs: dict[str, Any], artifacts: Path) -> None:
        with self._connect() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO orchestrator_runs (run_id, pipeline, file, status, started, inputs, artifacts)"
                " VALUES (?, ?, ?, 'running', ?, ?, ?)",
                (run_id, pipeline, file, time.time(), json.dumps(inputs, default=str), str(artifacts)),
            )

    def resumed(self, run_id: str) -> None:
        with self._connect() as conn:
            conn.execute(
                "UPDATE orchestrator_runs SET status='running', ended=NULL, error=NULL, failed_step=NULL"
                " WHERE run_id=?",
                (run_id,),
            )

    def finish(
        self,
        run_id: str,
        status: RunStatus,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        failed_step: str | None = None,
    ) -> None:
        with self._connect() as conn:
            conn.execute(
                "UPDATE orchestrator_runs SET status=?, ended=?, result=?, error=?, failed_step=? WHERE run_id=?",
                (
                    status,
                    time.time(),
                    None if result is None else json.dumps(result, default=str),
                    error,
                    failed_step,
                    run_id,
                ),
            )

    def get(self, run_id: str) -> RunRecord | None:
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM orchestrator_runs WHERE run_id=?", (run_id,)).fetchone()
        return None if row is None else _record(row)

    def list(self, limit: int = 50, pipeline: str | None = None) -> list[RunRecord]:
        query = "SELECT * FROM orchestrator_runs"
        args: tuple[Any, ...] = ()
        if pipeline:
            query += " WHERE pipeline=?"
            args = (pipeline,)
        query += " ORDER BY started DESC LIMIT ?"
        with self._connect() as conn:
            rows = conn.execute(query, (*args, limit)).fetchall()
        return [_record(r) for r in rows]


def _record(row: tuple[Any, ...]) -> RunRecord:
    run_id, pipeline, file, status, started, ended, inputs, result, error, failed_step, artifacts = row
    return RunRecord(
        run_id=run_id,
        pipeline=pipeline,
        file=file,
        status=status,
        started=started,
        ended=ended,
        inputs=json.loads(inputs),
        result=None if result is None else json.loads(result),
        error=error,
        failed_step=failed_step,
        artifacts=artifacts,
    )
