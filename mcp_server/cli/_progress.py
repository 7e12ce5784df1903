"""The progress display of a pipeline run: what `run` and `runs resume` show while a run is under way.

A run reports `(done, total, message)` with `total` the number of top-level steps and
messages `"<step>: done"`, `"<step>: skipped"` or `"<step>: 3/10 items"`, plus log lines. On
an interactive terminal this becomes a `rich` live display, one bar per step (and loop items)
under an overall bar, with log lines printed above it; anywhere else (a pipe, a log file, CI)
it is one plain line per event so nothing is lost; with `--json` only warnings and errors
are printed, and nothing else reaches stderr. Everything goes to stderr: stdout carries the
result only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._common import PROG

if TYPE_CHECKING:
    from pipelines.spec import PipelineSpec

__all__ = ["Display", "open_display", "step_depths"]

_ITEMS = re.compile(r"(\d+)/(\d+) items")
_QUIET_LEVELS = frozenset({"warning", "error"})


class Display:
    """The `--json` display: no progress, warnings and errors on stderr; the base of the others."""

    def __enter__(self) -> Display:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    async def progress(self, done: float, total: float | None, message: str | None) -> None:
        return None

    async def log(self, level: str, message: str) -> None:
        if level in _QUIET_LEVELS:
            print(f"{PROG}: {level}: {message}", file=sys.stderr)

    def succeeded(self) -> None:
        """The run finished: show it complete (a resumed run never hears of the steps done before)."""


class PlainDisplay(Display):
    """One line per event on stderr; loop items at most every 10 %."""

    def __init__(self) -> None:
        self._tenths: dict[str, int] = {}

    async def progress(self, done: float, total: float | None, message: str | None) -> None:
        step, _, rest = (message or "").partition(": ")
        items = _ITEMS.fullmatch(rest)
        if items:
            count, of = int(items[1]), int(items[2])
            tenth = 10 * count // of if of else 10
            if self._tenths.get(step) == tenth and count != of:
                return
            self._tenths[step] = tenth
        where = f"{int(done)}/{total:g}" if total else f"{int(done)}"
        print(f"{PROG}: [{where}] {message or ''}".rstrip(), file=sys.stderr)

    async def log(self, level: str, message: str) -> None:
        print(f"{PROG}: {level}: {message}", file=sys.stderr)


class RichDisplay(Display):
    """A live `rich` display: an overall bar and one bar per step, log lines above them."""

    _STYLES: Mapping[str, str] = {"debug": "dim", "info": "cyan", "warning": "yellow", "error": "bold red"}

    def __init__(self, console: Any, title: str, steps: int | None, depths: Mapping[str, int]) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.text import Text

        self._bar = Progress(
            SpinnerColumn(finished_text=Text("✓", style="green")),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,  # stray prints of in-process skills land above the bars, not in stdout
        )
        self._overall = self._bar.add_task(title, total=steps)
        self._steps: dict[str, Any] = {}
        self._depths = depths

    def __enter__(self) -> Display:
        self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._bar.stop()

    def _task(self, step: str) -> Any:
        task = self._steps.get(step)
        if task is None:
            indent = "  " * (self._depths.get(step, 0) + 1)
            task = self._steps[step] = self._bar.add_task(f"{indent}{step}", total=None)
        return task

    async def progress(self, done: float, total: float | None, message: str | None) -> None:
        self._bar.update(self._overall, completed=done, total=total or None)
        step, _, rest = (message or "").partition(": ")
        if not step or not rest:
            return
        task = self._task(step)
        items = _ITEMS.fullmatch(rest)
        if items:
            count, of = int(items[1]), int(items[2])
            self._bar.update(task, completed=min(count, of), total=of)
        elif rest in ("done", "skipped"):
            current = self._find(task)
            of = current.total or 1
            if rest == "skipped":
                self._bar.update(task, description=f"{current.description} [dim](skipped)[/dim]")
            self._bar.update(task, completed=of, total=of)

    def _find(self, task: Any) -> Any:
        return next(t for t in self._bar.tasks if t.id == task)

    async def log(self, level: str, message: str) -> None:
        from rich.text import Text

        line = Text.assemble((f"{level}: ", self._STYLES.get(level, "")), message)
        self._bar.console.print(line, highlight=False)

    def succeeded(self) -> None:
        total = self._find(self._overall).total
        if total is not None:
            self._bar.update(self._overall, completed=total)


def step_depths(spec: PipelineSpec | None) -> dict[str, int]:
    """How deep each step sits (0 at the top), to indent nested loops under their parents."""
    depths: dict[str, int] = {}
    if spec is None:
        return depths

    def visit(steps: Any, depth: int) -> None:
        for step in steps:
            depths.setdefault(step.id, depth)
            visit(step.children(), depth + 1)

    visit(spec.steps, 0)
    return depths


def open_display(title: str, spec: PipelineSpec | None, *, as_json: bool) -> Display:
    """The display for this terminal: quiet for `--json`, live on a terminal, else plain lines."""
    if as_json:
        return Display()
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_interactive:
        return PlainDisplay()
    return RichDisplay(console, title, len(spec.steps) if spec is not None else None, step_depths(spec))
