"""Registered pipelines in the shared state: every replica and worker publishes the same ones.

With `--state postgresql://...`, `register_pipeline` stores the pipeline's YAML in the table
`orchestrator_pipelines` instead of one replica's disk, and says so on the PostgreSQL channel
`orchestrator_pipelines` (LISTEN/NOTIFY). `SharedPipelineSource` mirrors the table into a local
folder and is otherwise an ordinary `PipelineSource` (verified, positions, compiled on first
run); `listen` refreshes it on every notification, so the new tool reaches every replica's
clients with `tools/list_changed`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from .source import PipelineSource
from .storage.pg import NOTIFY_PIPELINES, Postgres

__all__ = ["SharedPipelineSource"]


class SharedPipelineSource(PipelineSource):
    """The pipelines of the table `orchestrator_pipelines`, as a folder source."""

    def __init__(self, pg: Postgres, cache: Path) -> None:
        digest = hashlib.sha256(pg.url.encode()).hexdigest()[:12]
        super().__init__(cache / f"shared-pipelines-{digest}", "home", label=f"registered pipelines ({pg.shown})")
        self.pg = pg

    def refresh(self) -> bool:
        self._mirror()
        return super().refresh()

    def _mirror(self) -> None:
        """Write the table's pipelines into the folder (changed ones only) and drop the others."""
        with self.pg.connect() as conn:
            rows = conn.execute("SELECT id, text FROM orchestrator_pipelines").fetchall()
        self.root.mkdir(parents=True, exist_ok=True)
        wanted = {f"{pipeline_id}.yaml": text for pipeline_id, text in rows}
        for name, text in wanted.items():
            file = self.root / name
            if not file.is_file() or file.read_text(encoding="utf-8") != text:
                tmp = file.with_suffix(".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(file)
        for file in self.root.glob("*.yaml"):
            if file.name not in wanted:
                file.unlink(missing_ok=True)

    def exists(self, pipeline_id: str) -> bool:
        with self.pg.connect() as conn:
            row = conn.execute("SELECT 1 FROM orchestrator_pipelines WHERE id=?", (pipeline_id,)).fetchone()
        return row is not None

    def save(self, pipeline_id: str, text: str) -> Path:
        """Store (or replace) a pipeline and tell every process that shares the state."""
        with self.pg.connect() as conn:
            conn.execute(
                "INSERT INTO orchestrator_pipelines (id, text, updated) VALUES (?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET text=EXCLUDED.text, updated=EXCLUDED.updated",
                (pipeline_id, text, time.time()),
            )
            conn.execute("SELECT pg_notify(?, ?)", (NOTIFY_PIPELINES, pipeline_id))
        return self.root / f"{pipeline_id}.yaml"

    async def listen(self, changed: Callable[[], Awaitable[None]]) -> None:
        """Call `changed` whenever any process registers a pipeline (until cancelled); also on
        every (re)connection, in case a registration happened while nobody listened."""

        async def heard(_: str | None) -> None:
            await changed()

        await self.pg.listen(NOTIFY_PIPELINES, heard)
