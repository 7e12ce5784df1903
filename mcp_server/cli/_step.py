"""`run --step` / `runs resume --step`: after each step, show its output and ask what to do;
and `TerminalAsker`: a pipeline's `ask:` steps asked at the terminal (`orchestrator run`).

The gate of `pipelines.engine.stepping` on a terminal: the live display pauses, the step's output is
printed (cut past `SHOWN_CHARS`), and one line is read from stdin: `c`/Enter continue, `s`
stop (the run is kept as `stopped`; `runs resume` continues it), `r` re-run the step. The end
of input counts as stop. Everything goes to stderr; stdout still carries the result only.

Reading waits on the descriptor (not in a thread), so Ctrl-C at the prompt stops the run at
once, and what was typed ahead (several answers piped in) is kept for the next prompts.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import anyio

from ._common import PROG

if TYPE_CHECKING:
    from pipelines.engine.stepping import Decision, StepView

    from ._progress import Display

__all__ = ["SHOWN_CHARS", "TerminalAsker", "TerminalGate"]

SHOWN_CHARS = 4000
"""Characters of a step's output shown at the prompt (the whole output is in the run's result)."""
_CHOICES: dict[str, Decision] = {
    "": "continue",
    "c": "continue",
    "continue": "continue",
    "s": "stop",
    "stop": "stop",
    "q": "stop",
    "r": "rerun",
    "rerun": "rerun",
    "re-run": "rerun",
}


class TerminalGate:
    """Asks on stderr, reads answers from stdin."""

    def __init__(self, display: Display, fd: int | None = None) -> None:
        self.display = display
        self.fd = sys.stdin.fileno() if fd is None else fd
        self._pending = b""

    async def __call__(self, view: StepView) -> Decision:
        with self.display.paused():
            _say(f"step {view.place}/{view.total} '{view.step_id}' finished; its output:")
            _say(_shown(view.output), prefix=False)
            question = "[c]ontinue (finish the run), [r]e-run the step? " if view.last else None
            question = question or "[c]ontinue, [s]top (resume later), [r]e-run the step? "
            while True:
                print(f"{PROG}: {question}", end="", file=sys.stderr, flush=True)
                line = await self.read_line()
                if line is None:
                    print(file=sys.stderr)
                    return "stop"
                if not os.isatty(self.fd):  # typed ahead or piped in: show the answer a terminal would echo
                    print(line, file=sys.stderr)
                choice = _CHOICES.get(line.strip().lower())
                if choice is not None:
                    return choice
                _say(f"'{line.strip()}' is not an answer: type c, s or r and Enter")

    async def read_line(self) -> str | None:
        """One line of input; None at its end."""
        while b"\n" not in self._pending:
            try:
                await anyio.wait_readable(self.fd)
            except (OSError, ValueError):  # a regular file or /dev/null cannot be polled: reading never blocks
                pass
            chunk = os.read(self.fd, 4096)
            if not chunk:
                rest, self._pending = self._pending, b""
                return rest.decode(errors="replace") if rest else None
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode(errors="replace")


class TerminalAsker:
    """An `ask:` step's question on stderr, one line read per field of its schema (typed as the
    field says: numbers, yes/no, one of the choices). An empty line leaves an optional field out;
    the end of input declines."""

    def __init__(self, display: Display, fd: int | None = None) -> None:
        self.lines = TerminalGate(display, fd)
        self.display = display

    async def __call__(self, question: str, schema: dict[str, Any]) -> dict[str, Any]:
        properties: dict[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        answer: dict[str, Any] = {}
        with self.display.paused():
            _say(question)
            for name, prop in properties.items():
                value = await self._field(name, prop, name in required)
                if value is _DECLINED:
                    return {"action": "decline", "content": {}}
                if value is not _SKIPPED:
                    answer[name] = value
        return {"action": "accept", "content": answer}

    async def _field(self, name: str, prop: dict[str, Any], required: bool) -> Any:
        kind = prop.get("type")
        choices = prop.get("enum")
        label = prop.get("title") or name
        about = f" ({prop['description']})" if prop.get("description") else ""
        shape = f" [{'/'.join(map(str, choices))}]" if choices else " [yes/no]" if kind == "boolean" else ""
        while True:
            print(f"{PROG}:   {label}{about}{shape}: ", end="", file=sys.stderr, flush=True)
            line = await self.lines.read_line()
            if line is None:
                print(file=sys.stderr)
                return _DECLINED
            if not os.isatty(self.lines.fd):
                print(line, file=sys.stderr)
            text = line.strip()
            if not text:
                if not required:
                    return _SKIPPED
                _say(f"'{label}' is required")
                continue
            value, problem = _typed(text, kind, choices)
            if problem is None:
                return value
            _say(problem)


_DECLINED: Any = object()
_SKIPPED: Any = object()
_YES_NO = {"y": True, "yes": True, "true": True, "n": False, "no": False, "false": False}


def _typed(text: str, kind: Any, choices: Any) -> tuple[Any, str | None]:
    """The typed line, or why it is not one."""
    if kind == "boolean":
        value = _YES_NO.get(text.lower())
        return (value, None) if value is not None else (None, "answer yes or no")
    if kind in ("integer", "number"):
        try:
            number = int(text) if kind == "integer" else float(text)
        except ValueError:
            return None, f"'{text}' is not {'a whole number' if kind == 'integer' else 'a number'}"
        return number, None
    if choices and text not in [str(c) for c in choices]:
        return None, f"choose one of {', '.join(map(str, choices))}"
    return text, None


def _say(text: str, *, prefix: bool = True) -> None:
    print(f"{PROG}: {text}" if prefix else text, file=sys.stderr, flush=True)


def _shown(output: Any) -> str:
    if output is None:
        return "  (none: the step was skipped)"
    text = json.dumps(output, indent=2, ensure_ascii=False, default=str)
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"\n... ({len(text) - SHOWN_CHARS} more characters in the run's result)"
    return "  " + text.replace("\n", "\n  ")
