"""Errors of the skills core.

Two families, kept apart on purpose: the user's mistakes (a broken SKILL.md, bad arguments)
carry a location and a hint; runtime failures say what went wrong while a skill ran.

    SkillsError                  error_type       retryable
    ├── DefinitionError          skill_failed     no    a skill folder that cannot be loaded (file, field, hint)
    ├── UnknownSkillError        unknown_tool     no    no skill of that name in the Catalog
    ├── ArgumentsError           invalid_arguments no   arguments that do not fit the input schema (names the field)
    ├── LimitExceededError       limit_exceeded   no    arguments or work over a server limit (names the limit)
    └── SkillRunError            skill_failed     no    the skill ran and failed
        ├── SkillTimeoutError    timeout          yes   killed at its timeout
        ├── SkillCancelledError  cancelled        yes   cancelled before it finished (finished work is kept)
        ├── NotConnectedError    not_connected    yes   what the skill needs is not connected now (an upstream)
        ├── OutputError          skill_failed     no    the result broke the contract (too large, not JSON, schema)
        ├── NoModelProviderError skill_failed     no    no Anthropic API key and no client sampling (core.models)
        └── UnknownModelError    skill_failed     no    a model role or id the registry does not know (core.models)

Every failed tool call reaches the client as one envelope, `{"error": {"type", "message",
"hint", "retryable", "where"}}` (SPEC 7), built by `error_envelope`. The type and the retry
advice of an error are the class attributes `error_type` and `retryable` above: this tree is
the one place that maps errors to envelope types, so a new error gets the right type by
subclassing the right class. Anything that is not a `SkillsError` is `internal`. The envelope
is open: a result may carry more keys beside `error` (a run's `usage`, its `run_id`), never
inside it.

Envelope text is plain: `error_envelope` drops terminal escapes and control characters from
every field, and `plain_text` reduces what another program wrote (an upstream server's error,
a child's stderr: rich traceback boxes, ANSI colours, Python tracebacks) to its meaningful
lines and the place the failure happened.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, cast, get_args

__all__ = [
    "ERROR_BODY_SCHEMA",
    "ERROR_ENVELOPE_SCHEMA",
    "ERROR_TYPES",
    "ArgumentsError",
    "DefinitionError",
    "ErrorEnvelope",
    "ErrorType",
    "FieldError",
    "LimitExceededError",
    "NotConnectedError",
    "OutputError",
    "PlainText",
    "Problem",
    "SkillCancelledError",
    "SkillRunError",
    "SkillTimeoutError",
    "SkillsError",
    "UnknownSkillError",
    "clip",
    "error_envelope",
    "plain",
    "plain_text",
]

ErrorType = Literal[
    "invalid_arguments",
    "unknown_tool",
    "skill_failed",
    "timeout",
    "cancelled",
    "not_connected",
    "limit_exceeded",
    "internal",
]
"""What kind of failure a tool call met (SPEC 7); a client decides on it, the message explains it."""
ERROR_TYPES: tuple[ErrorType, ...] = get_args(ErrorType)
ECHO_MAX = 200
"""Characters of a client's value that an error message may quote; the rest is cut (`clip`)."""
MESSAGE_MAX = 4000
"""Characters of an envelope's message (and of its hint and where) at most."""


def clip(text: str, limit: int = ECHO_MAX) -> str:
    """`text` cut to `limit` characters with a note of its full length, so that an error never
    echoes a 10 MB argument back (nor floods a log)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


@dataclass(frozen=True, slots=True)
class Problem:
    """One violation found in a skill folder: where, what, and how to fix it."""

    path: Path
    message: str
    hint: str = ""
    field: str = ""
    severity: str = "error"  # "error" | "warning"
    line: int = 0
    """1-based line in `path` (0: the file as a whole)."""
    col: int = 0

    def __str__(self) -> str:
        where = (
            f"{self.path}"
            + (f":{self.line}:{self.col}" if self.line else "")
            + (f" [{self.field}]" if self.field else "")
        )
        text = f"{where}: {self.severity}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text


class SkillsError(Exception):
    """Base of every error the skills core raises on purpose."""

    hint: str = ""
    error_type: ErrorType = "internal"
    """The envelope `type` of this class of error (see the tree in the module docstring)."""
    retryable: bool = False
    """Whether the same call may succeed if it is simply made again later."""
    where: str = ""
    """Where it went wrong: the argument field, file:line, or the pipeline step."""
    attached: dict[str, Any] | None = None
    """What the failed work leaves for its caller beside the error: a run's id, outputs, summary
    and usage (money spent before the failure is still spent). `error_envelope` puts it at the
    envelope's top level, next to `error`."""
    content: Sequence[Any] = ()
    """Content items that came with the failure (an imported tool's images or resources, as
    MCP content blocks): a client gets them after the envelope."""

    def __init__(self, message: str, *, hint: str = "", where: str = "") -> None:
        super().__init__(message)
        self.message = message
        if hint:
            self.hint = hint
        if where:
            self.where = where

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class DefinitionError(SkillsError):
    """A skill folder that cannot be loaded; `problems` lists every violation found."""

    error_type: ErrorType = "skill_failed"

    def __init__(self, path: Path, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        errors = [p for p in problems if p.severity == "error"] or problems
        first = errors[0]
        where = f"{first.path}" + (f" [{first.field}]" if first.field else "")
        super().__init__("; ".join(str(p) for p in errors), hint=first.hint, where=where)

    def __str__(self) -> str:
        return self.message


class UnknownSkillError(SkillsError):
    """No skill of the requested name is in the Catalog."""

    error_type: ErrorType = "unknown_tool"


@dataclass
class FieldError:
    """One argument that does not fit the schema."""

    field: str
    message: str


class ArgumentsError(SkillsError):
    """Arguments rejected by a skill's input schema; names every offending field."""

    error_type: ErrorType = "invalid_arguments"

    def __init__(self, skill: str, errors: list[FieldError], *, hint: str = "") -> None:
        self.skill = skill
        self.errors = errors
        detail = "; ".join(f"{e.field or '(arguments)'}: {e.message}" for e in errors)
        where = ", ".join(dict.fromkeys(e.field or "(arguments)" for e in errors))
        super().__init__(f"invalid arguments for '{skill}': {detail}", hint=hint, where=where)


class LimitExceededError(SkillsError):
    """A server limit was reached (argument depth or size, run size, ...); `limit` names it."""

    error_type: ErrorType = "limit_exceeded"

    def __init__(self, message: str, *, limit: str, hint: str = "", where: str = "") -> None:
        super().__init__(message, hint=hint, where=where)
        self.limit = limit


class SkillRunError(SkillsError):
    """The skill ran and failed. The message is safe to show a client (no traceback)."""

    error_type: ErrorType = "skill_failed"


class SkillTimeoutError(SkillRunError):
    """The skill did not finish within its timeout and was stopped."""

    error_type: ErrorType = "timeout"
    retryable = True


class SkillCancelledError(SkillRunError):
    """The work was cancelled before it finished (what was finished is kept, e.g. for resume)."""

    error_type: ErrorType = "cancelled"
    retryable = True


class NotConnectedError(SkillRunError):
    """Something the skill needs (an upstream server) is not connected now; it may be later."""

    error_type: ErrorType = "not_connected"
    retryable = True


class OutputError(SkillRunError):
    """The skill's result broke its contract (too large, not JSON, wrong shape)."""


class ErrorBody(TypedDict):
    """The inside of an error envelope (SPEC 7)."""

    type: ErrorType
    message: str
    hint: str
    retryable: bool
    where: str


class ErrorEnvelope(TypedDict):
    """`{"error": {...}}`: what every failed tool call carries, as text and structured content
    (a result may add keys beside `error`: see `ERROR_ENVELOPE_SCHEMA`)."""

    error: ErrorBody


def error_envelope(
    error: BaseException | str,
    *,
    error_type: ErrorType | None = None,
    hint: str = "",
    where: str = "",
    retryable: bool | None = None,
) -> ErrorEnvelope:
    """The envelope of one failure: a `SkillsError` brings its own type, hint, retry advice and
    place; anything else is `internal` with only the message given (never a traceback).

    Keyword arguments fill in what the error does not say (or, for a plain string, all of it).
    """
    if isinstance(error, SkillsError):
        message = error.message
        kind: ErrorType = error.error_type
        hint = error.hint or hint
        where = error.where or where
        again = error.retryable
    else:
        message = error if isinstance(error, str) else "internal error"
        kind = "internal"
        again = False
    body: ErrorBody = {
        "type": error_type or kind,
        "message": clip(plain(message), MESSAGE_MAX),
        "hint": clip(plain(hint), MESSAGE_MAX),
        "retryable": again if retryable is None else retryable,
        "where": clip(plain(where), MESSAGE_MAX),
    }
    attached = error.attached if isinstance(error, SkillsError) else None
    if attached:  # a run's outputs, summary and usage travel with its failure (see `attached`)
        return cast("ErrorEnvelope", {"error": body, **{k: v for k, v in attached.items() if k != "error"}})
    return {"error": body}


ERROR_ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The error envelope of a failed call (isError results only).",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": list(ERROR_TYPES)},
                "message": {"type": "string"},
                "hint": {"type": "string"},
                "retryable": {"type": "boolean"},
                "where": {"type": "string"},
            },
            "required": ["type", "message", "hint", "retryable", "where"],
            "additionalProperties": False,
        }
    },
    "required": ["error"],
    "additionalProperties": True,
}
"""JSON Schema of `ErrorEnvelope` (for documentation and tests): the body has exactly its five
keys; beside `error`, a result may carry more (a failed run's `usage`, `run_id`, `outputs`)."""

ERROR_BODY_SCHEMA: dict[str, Any] = ERROR_ENVELOPE_SCHEMA["properties"]["error"]
"""JSON Schema of `ErrorBody`: a meta tool's output schema declares it as its optional `error`
property, so that its failure report carries the envelope's body in structured content too."""


# -- plain text ----------------------------------------------------------------------------------
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # two-character escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BOX = re.compile(r"^[\s\u2500-\u259f\u2771\u276f\u2770]*$")
"""A line made only of box drawing (rich's panel borders, rules), block elements or rich's ❱ marker."""
_IN_BOX = re.compile(r"^\s*[\u2500-\u257f]")
_PY_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\S+))?')
_RICH_FRAME = re.compile(r"(?P<file>[^\s\u2500-\u257f\u2771:]+\.\w+):(?P<line>\d+) in (?P<func>[\w.<>]+)")
_CHAINED = (
    "During handling of the above exception",
    "The above exception was the direct cause",
    "Traceback (most recent call last)",
    "Exception Group Traceback (most recent call last)",
)


def plain(text: str) -> str:
    """`text` without terminal escapes (colours, cursor moves) and control characters; a carriage
    return keeps what was drawn last on its line (a progress bar's final state)."""
    if "\x1b" in text or "\x9b" in text:
        text = _ESCAPES.sub("", text)
    if "\r" in text:
        text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n"))
    return _CONTROLS.sub("", text) if _CONTROLS.search(text) else text


@dataclass(frozen=True, slots=True)
class PlainText:
    """Text from another program reduced to what a person reads (`plain_text`)."""

    lines: tuple[str, ...]
    """The meaningful lines, in order: no escapes, no box drawing, no traceback frames, no blank lines."""
    where: str = ""
    """The innermost place of a traceback (`file.py:213 in func`), or ""."""
    traceback: bool = False
    """Whether the text held a traceback (Python's or rich's boxed one)."""

    @property
    def message(self) -> str:
        """The text as one message: with a traceback, its first line and the exception's line
        (the last one); otherwise every meaningful line (the program's own words)."""
        if not self.traceback or len(self.lines) < 2:
            return "\n".join(self.lines)
        first, last = self.lines[0], self.lines[-1]
        return f"{first} {last}" if first.endswith(":") else f"{first}: {last}"

    def joined(self, sep: str = " | ") -> str:
        """Every meaningful line on one line, and the place of the failure when there was one."""
        text = sep.join(self.lines)
        return f"{text} (at {self.where})" if self.where else text


def plain_text(text: str) -> PlainText:
    """What another program wrote (an upstream's error text, a child's stderr), as plain lines:
    terminal escapes removed, rich's traceback boxes and Python's traceback frames dropped, the
    innermost frame kept as `where`."""
    lines: list[str] = []
    where = ""
    traceback = False
    in_traceback = False
    for raw in plain(text).split("\n"):
        line = raw.rstrip()
        if not line.strip():
            continue
        if _BOX.match(line) or _IN_BOX.match(line):  # rich's boxed traceback (and any other box)
            found = _RICH_FRAME.search(line)
            if found:
                traceback = True
                where = _place(found["file"], found["line"], found["func"])
            continue
        head = line.lstrip(" +|")
        marker = next((m for m in _CHAINED if m in head), None)
        if marker is not None:  # a traceback starts (maybe after words of its own: "Error ...: Traceback")
            traceback = in_traceback = True
            before = head[: head.index(marker)].strip().rstrip(":").strip()
            if before:
                lines.append(before)
            continue
        if in_traceback and line[:1].isspace():  # a frame and its source line, or a caret line
            found = _PY_FRAME.match(line)
            if found:
                where = _place(found["file"], found["line"], found["func"])
            continue
        in_traceback = False
        lines.append(line.strip())
    return PlainText(tuple(lines), where, traceback)


def _place(file: str, line: str, func: str | None) -> str:
    name = file.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name}:{line}" + (f" in {func}" if func else "")
