"""The Catalog: one place that holds every skill from every source.

Sources are ordered by priority (built-in < home < each `--skills DIR` < pipelines and imported
tools); a skill of the same name from a later source (or a later folder of the same root)
overrides the earlier one, with a WARNING naming both and the winner, kept in `overrides()`
for `skills list --json` and `doctor`. The server only ever asks the Catalog.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .base import Skill
from .errors import DefinitionError, Problem, UnknownSkillError

__all__ = ["RESERVED_NAMES", "TOOL_NAME", "Catalog", "FolderProvider", "LoadProblem", "Override", "SkillProvider"]

log = logging.getLogger("skills.catalog")

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
RESERVED_NAMES = frozenset(
    {
        "validate_pipeline",
        "register_pipeline",
        "create_skill",
        "plan_and_run",
        "orchestrate",
        "spawn_agent",
        "run_pipeline",
        "list_runs",
        "get_run",
        "cancel_run",
        "find_skills",
        "read_skill",
        "call_skill",
    }
)
"""Meta tools of the server (and the catalogue mode's tools); no skill, pipeline or upstream tool
may take these names."""


@dataclass(frozen=True)
class LoadProblem:
    """A skill (or folder) that could not be published, and why."""

    source: str
    path: Path
    error: DefinitionError

    @property
    def problems(self) -> list[Problem]:
        return self.error.problems


@dataclass(frozen=True)
class Override:
    """Two sources declare the same name: the later one is served, the other is not."""

    name: str
    winner: str
    """Where the served skill comes from: its folder (or file), and the source's label."""
    loser: str
    """Where the skill that is not served comes from."""

    def __str__(self) -> str:
        return f"skill '{self.name}': {self.winner} overrides {self.loser}, which is not served"

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "served": self.winner, "not_served": self.loser}


class SkillProvider(Protocol):
    """A source of skills. `refresh()` re-reads it and says whether anything changed."""

    label: str
    """Shown in logs and `skills list` (e.g. 'builtin', 'home', a folder path)."""

    def skills(self) -> list[Skill]: ...

    def problems(self) -> list[LoadProblem]: ...

    def refresh(self) -> bool: ...

    def watch_paths(self) -> list[Path]:
        """Folders whose changes should trigger `refresh()` (live reload)."""
        ...


class FolderProvider:
    """A provider over one folder, read on first use: the shared half of skill and pipeline sources.

    Subclasses fill `_skills` / `_problems` in `refresh()`.
    """

    root: Path
    _skills: dict[Path, Any]
    _problems: list[LoadProblem]
    _loaded: bool

    def skills(self) -> list[Any]:
        if not self._loaded:
            self.refresh()
        return list(self._skills.values())

    def problems(self) -> list[LoadProblem]:
        if not self._loaded:
            self.refresh()
        return list(self._problems)

    def watch_paths(self) -> list[Path]:
        return [self.root] if self.root.is_dir() else []

    def refresh(self) -> bool:
        raise NotImplementedError


Listener = Callable[["Catalog"], Awaitable[None]]


class Catalog:
    """Every skill the server publishes, merged from its providers by priority."""

    def __init__(self, providers: list[SkillProvider] | None = None, *, enabled: dict[str, bool] | None = None) -> None:
        self._providers: list[SkillProvider] = list(providers or [])
        self._enabled = dict(enabled or {})
        self._skills: dict[str, Skill] = {}
        self._tools: dict[str, Skill] = {}
        self._hidden: dict[str, Skill] = {}
        self._conflicts: list[LoadProblem] = []
        self._overrides: list[Override] = []
        self._listeners: list[Listener] = []
        self.version = 0
        self._merge()

    # -- reading ---------------------------------------------------------------------------
    def get(self, name: str) -> Skill:
        """The skill called `name`; `UnknownSkillError` with a suggestion otherwise."""
        skill = self._skills.get(name)
        if skill is None:
            raise self.unknown(name)
        return skill

    def unknown(self, name: str) -> UnknownSkillError:
        close = difflib.get_close_matches(name, self._skills, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else "list the tools to see what exists"
        if name in self._hidden:
            hint = f"'{name}' is disabled; enable it in skills/registry.yaml (enabled: true)"
        return UnknownSkillError(f"no skill or tool named '{name}'", hint=hint)

    def find(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def tool(self, name: str) -> Skill | None:
        """The published tool called `name`: a skill, or one of the server's own tools (kind
        "meta", which `find`, iteration and `len` leave out: skills choose among skills)."""
        return self._tools.get(name)

    def tools(self) -> list[Skill]:
        """Every published tool in order: the skills, then the server's own (their source is last)."""
        return list(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._skills.values())

    def __len__(self) -> int:
        return len(self._skills)

    def names(self) -> list[str]:
        return list(self._skills)

    def disabled(self) -> list[Skill]:
        """Skills that loaded but are switched off (registry or `enabled: false`)."""
        return list(self._hidden.values())

    def problems(self) -> list[LoadProblem]:
        """Every folder or skill that could not be published, with its reasons."""
        out = [p for provider in self._providers for p in provider.problems()]
        return out + self._conflicts

    @property
    def providers(self) -> list[SkillProvider]:
        return list(self._providers)

    # -- changing --------------------------------------------------------------------------
    def add_provider(self, provider: SkillProvider) -> None:
        """Add a source with a higher priority than every existing one."""
        self.add_providers([provider])

    def add_providers(self, providers: Sequence[SkillProvider]) -> None:
        """Add sources (in rising priority) and merge once."""
        self._providers.extend(providers)
        self._merge()

    async def set_enabled(self, enabled: dict[str, bool]) -> None:
        """Apply the registry's `enabled:` switches (they beat a skill's own default)."""
        before = {n: id(s) for n, s in self._skills.items()}
        self._enabled = dict(enabled)
        self._merge()
        if before != {n: id(s) for n, s in self._skills.items()}:
            await self.notify()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` after every change of the published set; returns an unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def rebuild(self, providers: list[SkillProvider]) -> None:
        """Re-read `providers` and re-merge now, without notifying (for set-up before serving)."""
        for provider in providers:
            provider.refresh()
        self._merge()

    async def refresh(self, providers: list[SkillProvider] | None = None) -> bool:
        """Re-read the given providers (all by default); notify listeners if anything changed."""
        changed = False
        for provider in providers or self._providers:
            changed = provider.refresh() or changed
        if changed:
            before = {n: id(s) for n, s in self._skills.items()}
            self._merge()
            after = {n: id(s) for n, s in self._skills.items()}
            if before != after:
                await self.notify()
        return changed

    async def notify(self) -> None:
        """Tell every listener that the published set changed."""
        self.version += 1
        for listener in list(self._listeners):
            await listener(self)

    def overrides(self) -> list[Override]:
        """Every name declared more than once, with the skill served and the one left out."""
        return list(self._overrides)

    def _merge(self) -> None:
        merged: dict[str, Skill] = {}
        origin: dict[str, str] = {}
        conflicts: list[LoadProblem] = []
        overrides: list[Override] = []
        for provider in self._providers:
            for skill in provider.skills():
                name = skill.name
                # The reserved names belong to the server's own tools (kind "meta") and to no one else.
                if (name in RESERVED_NAMES and skill.kind != "meta") or not TOOL_NAME.match(name):
                    why = "is the name of a meta tool" if name in RESERVED_NAMES else "is not a valid tool name"
                    root = skill.root or Path(name)
                    problem = Problem(root, f"'{name}' {why}", field="name", hint="rename the skill")
                    conflicts.append(LoadProblem(provider.label, root, DefinitionError(root, [problem])))
                    continue
                here = f"{skill.root or name} ({provider.label})"
                if name in merged:
                    overrides.append(Override(name, here, origin[name]))
                merged[name] = skill
                origin[name] = here
        hidden = {}
        for name in list(merged):
            skill = merged[name]
            if not self._enabled.get(name, getattr(skill, "enabled", True)):
                hidden[name] = merged.pop(name)
        known = set(self._overrides)
        for override in overrides:
            if override not in known:  # said once, not again at every reload
                log.warning("%s (hint: rename one of them, or remove the one you do not want)", override)
        self._tools, self._hidden, self._conflicts = merged, hidden, conflicts
        self._skills = {n: s for n, s in merged.items() if s.kind != "meta"}
        self._overrides = overrides
        self.version += 1
