"""Errors of the skills core.

Two families, kept apart on purpose: the user's mistakes (a broken SKILL.md, bad arguments)
carry a location and a hint; runtime failures say what went wrong while a skill ran.

    SkillsError
    ├── DefinitionError          a skill folder that cannot be loaded (file, field, hint)
    ├── UnknownSkillError        no skill of that name in the Catalog
    ├── ArgumentsError           arguments that do not fit the input schema (names the field)
    └── SkillRunError            the skill ran and failed
        ├── SkillTimeoutError    killed at its timeout
        ├── OutputError          the result broke the contract (too large, not JSON, schema)
        ├── NoModelProviderError no Anthropic API key and no client sampling (skills.models)
        ├── UnknownModelError    a model role or id the registry does not know (skills.models)
        └── LimitExceededError   a run limit of the server was reached (steps, items, data, time)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ArgumentsError",
    "DefinitionError",
    "FieldError",
    "LimitExceededError",
    "OutputError",
    "Problem",
    "SkillRunError",
    "SkillTimeoutError",
    "SkillsError",
    "UnknownSkillError",
]


@dataclass(frozen=True, slots=True)
class Problem:
    """One violation found in a skill folder: where, what, and how to fix it."""

    path: Path
    message: str
    hint: str = ""
    field: str = ""
    severity: str = "error"  # "error" | "warning"

    def __str__(self) -> str:
        where = f"{self.path}" + (f" [{self.field}]" if self.field else "")
        text = f"{where}: {self.severity}: {self.message}"
        return f"{text} (hint: {self.hint})" if self.hint else text


class SkillsError(Exception):
    """Base of every error the skills core raises on purpose."""

    hint: str = ""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        if hint:
            self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class DefinitionError(SkillsError):
    """A skill folder that cannot be loaded; `problems` lists every violation found."""

    def __init__(self, path: Path, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        errors = [p for p in problems if p.severity == "error"] or problems
        first = errors[0]
        super().__init__("; ".join(str(p) for p in errors), hint=first.hint)

    def __str__(self) -> str:
        return self.message


class UnknownSkillError(SkillsError):
    """No skill of the requested name is in the Catalog."""


@dataclass
class FieldError:
    """One argument that does not fit the schema."""

    field: str
    message: str


class ArgumentsError(SkillsError):
    """Arguments rejected by a skill's input schema; names every offending field."""

    def __init__(self, skill: str, errors: list[FieldError], *, hint: str = "") -> None:
        self.skill = skill
        self.errors = errors
        detail = "; ".join(f"{e.field or '(arguments)'}: {e.message}" for e in errors)
        super().__init__(f"invalid arguments for '{skill}': {detail}", hint=hint)


class SkillRunError(SkillsError):
    """The skill ran and failed. The message is safe to show a client (no traceback)."""


class SkillTimeoutError(SkillRunError):
    """The skill did not finish within its timeout and was stopped."""


class OutputError(SkillRunError):
    """The skill's result broke its contract (too large, not JSON, wrong shape)."""


class LimitExceededError(SkillRunError):
    """A limit of the server was reached (a pipeline run's steps, loop items, data or wall time).

    `limit` names it (`max_steps`, `max_loop_items`, `max_state_bytes`, `max_wall_time`); a
    client sees the error type `limit_exceeded`.
    """

    def __init__(self, message: str, *, limit: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.limit = limit
