"""A state database that is not one: set it aside, start a new one, say so, keep serving.

A `state.sqlite` overwritten with garbage, truncated or damaged on disk made every pipeline
fail with a bare "file is not a database". Runs cannot go on without a database, and the
damaged one cannot be repaired in place, so it is renamed to `state.sqlite.corrupt-<time>`
(kept for whoever wants to look into it) and a new, empty one is created on the next connect.
The run history and checkpoints it held are gone from `runs list`; artifacts stay on disk.

Two processes may find the damage at once: the renaming happens under a lock file, after
checking again that the file at the path is still the damaged one.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Generator
from pathlib import Path

__all__ = ["is_corrupt", "set_aside"]

log = logging.getLogger("pipelines.runs")

_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_SIDE_FILES = ("-wal", "-shm", "-journal")


def is_corrupt(exc: BaseException) -> bool:
    """Whether a sqlite3 error says the file is damaged or not a database (not: locked, busy, full)."""
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _CORRUPT
    text = str(exc)
    return "file is not a database" in text or "malformed" in text


def _still_corrupt(db: Path) -> bool:
    try:
        conn = sqlite3.connect(db, timeout=30)
    except sqlite3.Error as exc:
        return is_corrupt(exc)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        conn.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as exc:
        return is_corrupt(exc)
    finally:
        conn.close()
    return False


@contextlib.contextmanager
def _locked(db: Path) -> Generator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, the re-check still guards most races
        yield
        return
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def set_aside(db: Path, error: BaseException) -> str | None:
    """Move a damaged `db` aside; the message logged (None when another process did it already)."""
    with _locked(db):
        if not db.exists() or not _still_corrupt(db):
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = db.with_name(f"{db.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = db.with_name(f"{db.name}.corrupt-{stamp}-{n}")
        db.rename(target)
        for suffix in _SIDE_FILES:
            side = db.with_name(db.name + suffix)
            if side.exists():
                side.rename(target.with_name(target.name + suffix))
    message = (
        f"the state database {db} is damaged ({error}): moved it aside to {target} and started a new, empty "
        f"one; the runs recorded before are gone from `orchestrator runs list` and cannot be resumed "
        f"(their artifacts stay in pipelines/<id>/runs/)"
    )
    log.error("%s", message)
    return message
