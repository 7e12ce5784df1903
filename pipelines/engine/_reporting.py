"""Progress of a run as the caller sees it: which top-level step runs, loop items, steps done.

Messages (the CLI's display and any MCP client read them):

- `<step>: started` when a top-level step begins (a row with a running clock in the CLI);
- `<step>: k/n items` for loops, the first one `0/n` as soon as the items are known (before
  a large fan-out is set up), then at most ~100 per loop however many items;
- `<step>: done` or `<step>: skipped` when a top-level step ends.

The progress value is the number of top-level steps finished (plus the fraction of a running
top-level loop) out of their count, and it never goes down within a call: nested loops and
parallel items report in any order, and a resumed run starts from the steps it had finished.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skills import SkillContext

__all__ = ["RunProgress"]


class RunProgress:
    """Progress notifications of one run (or one resume) to the caller's `SkillContext`."""

    def __init__(self, ctx: SkillContext, top: list[str]) -> None:
        self.ctx = ctx
        self.top = frozenset(top)
        self.total = len(top)
        self.done = 0
        self._high = 0.0
        self._items: dict[str, int] = {}
        self._last_pct: dict[str, int] = {}
        self._totals: dict[str, int] = {}
        self._pending: list[tuple[float, str]] = []
        self.listener: Callable[[float, float | None, str | None], None] | None = None
        """Told every progress sent too (the run's step records keep the latest)."""

    def restore(self, done: int) -> None:
        """A resumed run: `done` top-level steps had finished before."""
        self.done = done

    async def started(self, step_id: str) -> None:
        if step_id in self.top:
            await self.flush()  # a step's `done` (queued) goes out before the next one's `started`
            await self._emit(self.done, f"{step_id}: started")

    async def items(self, step_id: str, total: int) -> None:
        """A loop knows its items: say so before setting them up (a large fan-out takes a moment)."""
        self._totals[step_id] = total
        self._items[step_id] = 0
        self._last_pct.pop(step_id, None)
        if step_id in self.top and total:
            await self.flush()
            await self._emit(self.done, f"{step_id}: 0/{total} items")

    def finished(self, step_id: str, skipped: bool) -> None:
        """A step ended (sync code paths queue; `flush` sends)."""
        if step_id in self.top:
            self.done += 1
            self._items.pop(step_id, None)
            self._pending.append((self.done, f"{step_id}: {'skipped' if skipped else 'done'}"))

    async def item_done(self, step_id: str, done: int | None, total: int | None) -> None:
        count = self._items[step_id] = self._items.get(step_id, 0) + 1 if done is None else done
        total = self._totals.get(step_id, 0) if total is None else total
        pct = int(100 * count / total) if total else 100
        if pct == self._last_pct.get(step_id) and count != total:
            return  # at most ~100 notifications a loop, however many items
        self._last_pct[step_id] = pct
        frac = count / total if (step_id in self.top and total) else 0.0
        await self._emit(self.done + min(frac, 0.999), f"{step_id}: {count}/{total} items")

    async def flush(self) -> None:
        """Send queued notifications."""
        pending, self._pending = self._pending, []
        for done, message in pending:
            await self._emit(done, message)

    async def _emit(self, value: float, message: str) -> None:
        self._high = max(self._high, value)  # a nested loop's items report the steps done so far
        if self.listener is not None:
            self.listener(self._high, self.total, message)
        await self.ctx.progress(self._high, self.total, message)
