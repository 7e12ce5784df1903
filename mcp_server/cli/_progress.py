"""The progress display of a pipeline run: what `run` and `runs resume` show while a run is under way.

A run reports `(done, total, message)` with `total` the number of top-level steps and
messages `"<step>: started"`, `"<step>: 0/10 items"` (a loop's items are known, before it sets
them up), `"<step>: 3/10 items"`, `"<step>: done"` or `"<step>: skipped"`, plus log lines. On
an interactive terminal this becomes a `rich` live display: an overall bar, and one row per
step from the moment it starts, with its own clock (running while the step runs, its real
duration once it is done) and a bar for loop items; log lines print above it. Anywhere else
(a pipe, a log file, CI) it is one plain line per event, `[k/N]` being the step's place among
the N top-level steps (a nested step: its top-level step's), finished steps with their
duration; with `--json` only warnings and errors are printed. Everything goes to stderr:
stdout carries the result only.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._common import PROG

if TYPE_CHECKING:
    from pipelines.language.spec import PipelineSpec

__all__ = ["Display", "duration", "open_display", "step_depths", "step_places"]

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

    @contextmanager
    def paused(self) -> Generator[None]:
        """Nothing drawn while inside (step-through prints and asks on the terminal)."""
        yield


def duration(seconds: float) -> str:
    """`0.4s`, `12.3s`, `2m03s`, `1h02m`: short enough for a progress row, exact enough to compare steps."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class PlainDisplay(Display):
    """One line per event on stderr; loop items at most every 10 %; `[k/N]` is the step's place."""

    def __init__(self, places: Mapping[str, int] | None = None) -> None:
        self._tenths: dict[str, int] = {}
        self._places = places or {}
        self._started: dict[str, float] = {}

    async def progress(self, done: float, total: float | None, message: str | None) -> None:
        if not message:  # a count without an event: nothing to say on a line of its own
            return
        step, _, rest = message.partition(": ")
        items = _ITEMS.fullmatch(rest)
        if items:
            count, of = int(items[1]), int(items[2])
            tenth = 10 * count // of if of else 10
            if self._tenths.get(step) == tenth and count not in (0, of):
                return
            self._tenths[step] = tenth
        elif rest == "started":
            self._started[step] = time.monotonic()
        elif rest in ("done", "skipped") and step in self._started:
            message = f"{message} ({duration(time.monotonic() - self._started.pop(step))})"
        place = self._places.get(step)
        if place is None:  # no spec (or an unknown step): the steps done so far
            place = int(done) + (0 if rest in ("done", "skipped") else 1)
        where = f"{place}/{total:g}" if total else f"{place}"
        print(f"{PROG}: [{where}] {message}", file=sys.stderr)

    async def log(self, level: str, message: str) -> None:
        print(f"{PROG}: {level}: {message}", file=sys.stderr)


class RichDisplay(Display):
    """A live `rich` display: an overall bar and one bar per step, log lines above them."""

    _STYLES: Mapping[str, str] = {"debug": "dim", "info": "cyan", "warning": "yellow", "error": "bold red"}

    def __init__(self, console: Any, title: str, steps: int | None, depths: Mapping[str, int]) -> None:
        from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn
        from rich.text import Text

        class Count(ProgressColumn):
            """`3/10` for a loop's items (or the steps), nothing for a step without items."""

            def render(self, task: Any) -> Text:
                if task.total is None or task.fields.get("plain"):
                    return Text("")
                return Text(f"{int(task.completed)}/{int(task.total)}", style="progress.download")

        class Clock(ProgressColumn):
            """Time since the row started, frozen at its real duration once it is done."""

            def render(self, task: Any) -> Text:
                elapsed = task.finished_time if task.finished else task.elapsed
                return Text("" if elapsed is None else duration(elapsed), style="progress.elapsed")

        self._bar = Progress(
            SpinnerColumn(finished_text=Text("✓", style="green")),
            TextColumn("{task.description}"),
            BarColumn(),
            Count(),
            Clock(),
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
        if task is None:  # the row's clock starts now: at `started`, or at a nested loop's first items
            indent = "  " * (self._depths.get(step, 0) + 1)
            task = self._steps[step] = self._bar.add_task(f"{indent}{step}", total=None, plain=True)
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
            self._bar.update(task, completed=min(count, of), total=of, plain=False)
        elif rest in ("done", "skipped"):
            current = self._find(task)
            of = current.total or 1
            if rest == "skipped":
                self._bar.update(task, description=f"{current.description} [dim](skipped)[/dim]")
            self._bar.update(task, completed=of, total=of)  # finished: its clock stops at the real duration

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

    @contextmanager
    def paused(self) -> Generator[None]:
        self._bar.stop()
        try:
            yield
        finally:
            self._bar.start()


def _layout(spec: PipelineSpec | None) -> dict[str, tuple[int, int]]:
    """Each step's depth (0 at the top) and place (1-based among the top-level steps; a nested
    step has its top-level step's)."""
    out: dict[str, tuple[int, int]] = {}

    def visit(steps: Any, depth: int, place: int | None) -> None:
        for n, step in enumerate(steps, start=1):
            mine = n if place is None else place
            out.setdefault(step.id, (depth, mine))
            visit(step.children(), depth + 1, mine)

    if spec is not None:
        visit(spec.steps, 0, None)
    return out


def step_places(spec: PipelineSpec | None) -> dict[str, int]:
    """Each step's place among the top-level steps (`[k/N]` of the plain display)."""
    return {step: place for step, (_, place) in _layout(spec).items()}


def step_depths(spec: PipelineSpec | None) -> dict[str, int]:
    """How deep each step sits (0 at the top), to indent nested loops under their parents."""
    return {step: depth for step, (depth, _) in _layout(spec).items()}


def open_display(title: str, spec: PipelineSpec | None, *, as_json: bool) -> Display:
    """The display for this terminal: quiet for `--json`, live on a terminal, else plain lines."""
    if as_json:
        return Display()
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_interactive:
        return PlainDisplay(step_places(spec))
    return RichDisplay(console, title, len(spec.steps) if spec is not None else None, step_depths(spec))
