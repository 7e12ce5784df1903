"""A new state.sqlite opened by several stores at once (a server's run viewer and its pipelines,
two processes starting together) is created and migrated once, without an error for anyone."""

from __future__ import annotations

import threading
from pathlib import Path

from pipelines.storage.runs import RunStore


def test_stores_opening_a_new_database_at_once_all_succeed(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    for attempt in range(20):
        db = tmp_path / f"state-{attempt}.sqlite"
        start = threading.Barrier(6)

        def open_it(db: Path = db, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                RunStore(db).list(10)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, [str(e) for e in errors[:3]]
