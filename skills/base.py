"""The Skill protocol and the context a skill runs in.

Everything the server publishes is a Skill: a folder skill, a compiled pipeline, an imported
upstream tool. The server and the pipeline runtime only ever use this protocol, so a new
source of skills never needs a special case above this layer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "LogFn",
    "LogLevel",
    "ProgressFn",
    "Skill",
    "SkillContext",
    "SkillKind",
    "SkillSource",
]

SkillKind = Literal["python", "script", "instructions", "prompt", "agent", "pipeline", "remote", "meta"]
"""How a skill does its work; `remote` is an imported upstream MCP tool, `meta` a tool of the
server itself (validate_pipeline, create_skill, ...: the names in `RESERVED_NAMES`)."""

SkillSource = Literal["builtin", "home", "user", "created", "pipeline", "server"]
"""Where a skill came from: shipped, the home directory, a `--skills DIR`, made by a model, ..."""

LogLevel = Literal["debug", "info", "warning", "error"]
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]
LogFn = Callable[[LogLevel, str], Awaitable[None]]

_log = logging.getLogger("skills.run")


async def _no_progress(done: float, total: float | None, message: str | None) -> None:
    return None


async def _log_only(level: LogLevel, message: str) -> None:
    _log.log(logging.getLevelNamesMapping()[level.upper()], "%s", message)


@dataclass
class SkillContext:
    """The one object a skill gets from the outside world.

    Python skills receive it as their `ctx` parameter. Nothing else reaches for globals:
    progress and log messages go to the calling MCP client, files go to `artifact_dir`.
    """

    skill: str = ""
    """Name of the skill being run."""
    artifact_dir: Path | None = None
    """Where the skill may write files (created on first use by `artifacts()`)."""
    run_id: str = ""
    """Identifier of the run this call belongs to (pipelines set it; a bare call gets one)."""
    progress_fn: ProgressFn = _no_progress
    log_fn: LogFn = _log_only
    limits: Mapping[str, Any] = field(default_factory=lambda: {})
    """Caps the caller imposes (seconds, bytes); executors read what concerns them."""
    extras: dict[str, Any] = field(default_factory=lambda: {})
    """Room for later layers (model access, the Catalog for nested calls)."""

    async def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress to the caller (a no-op when the caller asked for none)."""
        await self.progress_fn(done, total, message)

    async def log(self, level: LogLevel, message: str) -> None:
        """Send a log message to the caller and to the server log."""
        await self.log_fn(level, message)

    async def info(self, message: str) -> None:
        await self.log("info", message)

    async def warning(self, message: str) -> None:
        await self.log("warning", message)

    def artifacts(self) -> Path:
        """The run's artifact directory, created if needed."""
        if self.artifact_dir is None:
            import tempfile

            self.artifact_dir = Path(tempfile.mkdtemp(prefix=f"orchestrator-{self.skill or 'skill'}-"))
        self.artifact_dir.mkdir(parents=True, exist_ok=True)
        return self.artifact_dir


@runtime_checkable
class Skill(Protocol):
    """What the Catalog holds and the server publishes as one MCP tool."""

    @property
    def name(self) -> str:
        """Tool name: unique in the Catalog, `^[a-zA-Z0-9_-]{1,64}$`."""
        ...

    @property
    def title(self) -> str | None: ...

    @property
    def description(self) -> str: ...

    @property
    def kind(self) -> SkillKind: ...

    @property
    def source(self) -> SkillSource: ...

    @property
    def input_schema(self) -> dict[str, Any]:
        """JSON Schema (type object) of the arguments; explicit, never inferred."""
        ...

    @property
    def output_schema(self) -> dict[str, Any] | None: ...

    @property
    def annotations(self) -> dict[str, Any] | None:
        """MCP tool annotations (readOnlyHint, idempotentHint, ...)."""
        ...

    @property
    def root(self) -> Path | None:
        """The skill folder, when the skill has one (resources are served from it)."""
        ...

    def body(self) -> str:
        """The instructions (SKILL.md body), read lazily."""
        ...

    def files(self) -> list[str]:
        """Bundled files, relative POSIX paths inside `root` (SKILL.md first)."""
        ...

    async def run(self, arguments: dict[str, Any], ctx: SkillContext) -> Any:
        """Do the work. Raise `SkillRunError` (or a subclass) with a client-safe message."""
        ...
