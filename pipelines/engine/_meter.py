"""What a run's checkpoints take in the state store, held to the run's `max_state_bytes`.

`max_state_bytes` bounds a run's data as it is produced (the JSON size of its inputs, outputs
and state, `limits.Budget`); the checkpoints hold that data about once, as the writes of the
steps that made it. What the data limit does not see is the checkpoint records themselves:
LangGraph writes one per step with the versions of every channel and node of the graph (about
1 kB for a small pipeline, more for a big one) and, every few thousand steps, a snapshot of the
whole state. A long loop of tiny items could so fill the disk while its data stayed small, and
a failed run keeps all of it (for resume). The meter counts the bytes of those records as the
saver serializes them, per run, and the run stops with `limit_exceeded` (`max_state_bytes`)
once they pass the limit: a failed run leaves at most its data and that much again.

The saver is shared by the runs under way, so the meter is found through a context variable
that `run_pipeline` sets around its graph (LangGraph saves a step's checkpoint from a task that
copies that context); the serializer counts only while the saver writes a checkpoint record.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["Meter", "metered"]

_METER: ContextVar[Meter | None] = ContextVar("orchestrator_checkpoint_meter", default=None)
_WRITING: ContextVar[Meter | None] = ContextVar("orchestrator_checkpoint_record", default=None)


class Meter:
    """The bytes of one run's checkpoint records (those of an earlier attempt included)."""

    def __init__(self, limit: int | None, stored: int = 0) -> None:
        self.limit = limit
        self.stored = stored

    @property
    def over(self) -> bool:
        return self.limit is not None and self.stored > self.limit

    @contextmanager
    def counting(self) -> Generator[None]:
        """Count the checkpoint records written under this block (the run's graph runs in it)."""
        token = _METER.set(self)
        try:
            yield
        finally:
            _METER.reset(token)


class _CountingSerde:
    """The saver's serializer, adding what it writes for a checkpoint record to the run's meter."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = self.inner.dumps_typed(obj)
        meter = _WRITING.get()
        if meter is not None:
            meter.stored += len(data)
        return kind, data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def metered(saver: Any, thread_id: str) -> int:
    """Make `saver` count checkpoint records for the meters of runs (once per saver); the bytes
    of the records `thread_id` holds already (a resumed run's earlier attempts; 0 where the
    saver cannot tell)."""
    if not getattr(saver, "_orchestrator_metered", False):
        saver.serde = _CountingSerde(saver.serde)
        put: Callable[..., Any] = saver.aput

        async def aput(*args: Any, **kwargs: Any) -> Any:
            token = _WRITING.set(_METER.get())
            try:
                return await put(*args, **kwargs)
            finally:
                _WRITING.reset(token)

        saver.aput = aput
        saver._orchestrator_metered = True
    return await _stored(saver, thread_id)


async def _stored(saver: Any, thread_id: str) -> int:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    if not isinstance(saver, AsyncSqliteSaver):
        return 0  # PostgreSQL keeps a run's blobs apart: a resumed run counts from its resume
    await saver.setup()
    async with saver.lock:
        cursor = await saver.conn.execute(
            "SELECT total(length(checkpoint)) FROM checkpoints WHERE thread_id=?", (thread_id,)
        )
        row = await cursor.fetchone()
    return int(row[0]) if row else 0
