"""The Catalog: one place that holds every skill from every source.

Sources are ordered by priority (built-in < home < each `--skills DIR` < pipelines and imported
tools as later issues add them); a skill of the same name from a later source overrides the
earlier one, with a log line. The server only ever asks the Catalog.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .base import Skill, SkillSource
from .contract import FrontMatter, SkillContract
from .errors import DefinitionError, Problem, UnknownSkillError
from .folder import FolderSkill, folder_stamp, load_folder

__all__ = ["RESERVED_NAMES", "TOOL_NAME", "Catalog", "FolderProvider", "FolderSource", "LoadProblem", "SkillProvider"]

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
    }
)
"""Meta tools of the server; no skill, pipeline or upstream tool may take these names."""


@dataclass(frozen=True)
class LoadProblem:
    """A skill (or folder) that could not be published, and why."""

    source: str
    path: Path
    error: DefinitionError

    @property
    def problems(self) -> list[Problem]:
        return self.error.problems


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


class FolderSource(FolderProvider):
    """Every skill folder directly under one root directory.

    With a `cache_dir`, what was parsed from each folder is kept in a JSON file keyed by the
    folders' stamps (mtime and size of SKILL.md and skill.yaml): a restart re-parses only the
    folders that changed, which is what keeps 1,000 skills loading in well under 300 ms.
    """

    def __init__(
        self, root: Path, source: SkillSource, label: str | None = None, *, cache_dir: Path | None = None
    ) -> None:
        self.root = root
        self.source: SkillSource = source
        self.label = label or source
        self._skills: dict[Path, FolderSkill] = {}
        self._problems: list[LoadProblem] = []
        self._loaded = False
        self._cache_file = _cache_file(cache_dir, root) if cache_dir is not None else None
        self._cache: dict[str, Any] | None = None

    def refresh(self) -> bool:
        """Re-scan the root; unchanged folders keep their loaded skill object."""
        self._loaded = True
        old_skills, old_problems = self._skills, self._problems
        cache = self._read_cache()
        fresh_cache: dict[str, Any] = {}
        skills: dict[Path, FolderSkill] = {}
        problems: list[LoadProblem] = []
        try:
            with os.scandir(self.root) as scan:
                entries = sorted(e.name for e in scan if e.is_dir() and not e.name.startswith((".", "_")))
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        for name in entries:
            folder = self.root / name
            stamp = folder_stamp(folder)
            if stamp[:2] == (0, 0):  # no SKILL.md
                if stamp[2:] != (0, 0):
                    err = DefinitionError(
                        folder,
                        [
                            Problem(
                                folder / "SKILL.md", "SKILL.md is missing", hint="every skill folder needs a SKILL.md"
                            )
                        ],
                    )
                    problems.append(LoadProblem(self.label, folder, err))
                continue
            previous = old_skills.get(folder)
            cached = cache.get(name)
            if previous is not None and previous.stamp == stamp:
                skills[folder] = previous
            elif cached is not None and tuple(cached["stamp"]) == stamp:
                skills[folder] = _from_cache(folder, cached, self.source, stamp)
            else:
                try:
                    skills[folder] = load_folder(folder, self.source, stamp)
                except DefinitionError as exc:
                    log.error("skill folder %s not loaded: %s", folder, exc)
                    problems.append(LoadProblem(self.label, folder, exc))
                    continue
            fresh_cache[name] = (
                cached if cached is not None and tuple(cached["stamp"]) == stamp else _cache_entry(skills[folder])
            )
        self._skills, self._problems = skills, problems
        if fresh_cache != cache:
            self._write_cache(fresh_cache)
        changed = [id(s) for s in skills.values()] != [id(s) for s in old_skills.values()]
        return changed or [p.error.message for p in problems] != [p.error.message for p in old_problems]

    def _read_cache(self) -> dict[str, Any]:
        if self._cache is not None or self._cache_file is None:
            return self._cache or {}
        try:
            data = json.loads(self._cache_file.read_text(encoding="utf-8"))
            self._cache = data if isinstance(data, dict) and data.get("version") == _CACHE_VERSION else {}
        except (OSError, ValueError):
            self._cache = {}
        return self._cache.get("folders", {}) if self._cache else {}

    def _write_cache(self, folders: dict[str, Any]) -> None:
        self._cache = {"version": _CACHE_VERSION, "root": str(self.root), "folders": folders}
        if self._cache_file is None:
            return
        try:
            self._cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._cache_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._cache), encoding="utf-8")
            tmp.replace(self._cache_file)
        except OSError as exc:  # a read-only home still serves, it just parses every start
            log.debug("skill cache not written: %s", exc)


_CACHE_VERSION = 1


def _cache_file(cache_dir: Path, root: Path) -> Path:
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]
    return cache_dir / f"skills-{digest}.json"


def _cache_entry(skill: FolderSkill) -> dict[str, Any]:
    contract = skill.contract
    return {
        "stamp": list(skill.stamp),
        "front": skill.front.model_dump(mode="json", by_alias=True, exclude_none=True),
        "contract": None if contract is None else contract.model_dump(mode="json", exclude_none=True),
    }


def _from_cache(folder: Path, entry: dict[str, Any], source: SkillSource, stamp: tuple[int, ...]) -> FolderSkill:
    front = FrontMatter.model_validate(entry["front"])
    contract = None if entry["contract"] is None else SkillContract.model_validate(entry["contract"])
    return FolderSkill(folder, front, contract, source, [], stamp)


Listener = Callable[["Catalog"], Awaitable[None]]


class Catalog:
    """Every skill the server publishes, merged from its providers by priority."""

    def __init__(self, providers: list[SkillProvider] | None = None, *, enabled: dict[str, bool] | None = None) -> None:
        self._providers: list[SkillProvider] = list(providers or [])
        self._enabled = dict(enabled or {})
        self._skills: dict[str, Skill] = {}
        self._hidden: dict[str, Skill] = {}
        self._conflicts: list[LoadProblem] = []
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

    def _merge(self) -> None:
        merged: dict[str, Skill] = {}
        origin: dict[str, str] = {}
        conflicts: list[LoadProblem] = []
        for provider in self._providers:
            for skill in provider.skills():
                name = skill.name
                if name in RESERVED_NAMES or not TOOL_NAME.match(name):
                    why = "is the name of a meta tool" if name in RESERVED_NAMES else "is not a valid tool name"
                    root = skill.root or Path(name)
                    problem = Problem(root, f"'{name}' {why}", field="name", hint="rename the skill")
                    conflicts.append(LoadProblem(provider.label, root, DefinitionError(root, [problem])))
                    continue
                if name in merged:
                    log.info("skill '%s' from %s overrides the one from %s", name, provider.label, origin[name])
                merged[name] = skill
                origin[name] = provider.label
        hidden = {}
        for name in list(merged):
            skill = merged[name]
            if not self._enabled.get(name, getattr(skill, "enabled", True)):
                hidden[name] = merged.pop(name)
        self._skills, self._hidden, self._conflicts = merged, hidden, conflicts
        self.version += 1
