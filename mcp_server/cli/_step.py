"""`run --step` / `runs resume --step`: after each step, show its output and ask what to do.

The gate of `pipelines._stepping` on a terminal: the live display pauses, the step's output is
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
    from pipelines._stepping import Decision, StepView

    from ._progress import Display

__all__ = ["SHOWN_CHARS", "TerminalGate"]

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
                line = await self._line()
                if line is None:
                    print(file=sys.stderr)
                    return "stop"
                if not os.isatty(self.fd):  # typed ahead or piped in: show the answer a terminal would echo
                    print(line, file=sys.stderr)
                choice = _CHOICES.get(line.strip().lower())
                if choice is not None:
                    return choice
                _say(f"'{line.strip()}' is not an answer: type c, s or r and Enter")

    async def _line(self) -> str | None:
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


def _say(text: str, *, prefix: bool = True) -> None:
    print(f"{PROG}: {text}" if prefix else text, file=sys.stderr, flush=True)


def _shown(output: Any) -> str:
    if output is None:
        return "  (none: the step was skipped)"
    text = json.dumps(output, indent=2, ensure_ascii=False, default=str)
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"\n... ({len(text) - SHOWN_CHARS} more characters in the run's result)"
    return "  " + text.replace("\n", "\n  ")
