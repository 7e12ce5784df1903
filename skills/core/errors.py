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
subclassing the right class. Anything that is not a `SkillsError` is `internal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, cast, get_args

__all__ = [
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
    "Problem",
    "SkillCancelledError",
    "SkillRunError",
    "SkillTimeoutError",
    "SkillsError",
    "UnknownSkillError",
    "clip",
    "error_envelope",
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
    """`{"error": {...}}`: what every failed tool call carries, as text and structured content."""

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
        "message": clip(message, MESSAGE_MAX),
        "hint": clip(hint, MESSAGE_MAX),
        "retryable": again if retryable is None else retryable,
        "where": clip(where, MESSAGE_MAX),
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
        }
    },
    "required": ["error"],
}
"""JSON Schema of `ErrorEnvelope` (for documentation and tests)."""
