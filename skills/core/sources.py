"""`FolderSource`: the skills of one root (a `--skills DIR`, the home's `skills/`, the built-ins).

A root is searched recursively (`skills.core.discovery`); archives found in it are unpacked into the
home's cache (`skills.core._archive`) and their skills served like folders. What is parsed from each
skill folder is kept in a JSON file keyed by the folder's stamp (mtime and size of SKILL.md and
skill.yaml), warnings included: a restart re-parses only the folders that changed, and says
everything a cold start says.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._archive import ArchiveError, unpack
from .base import SkillSource
from .catalog import FolderProvider, LoadProblem
from .contract import FrontMatter, SkillContract
from .discovery import Skipped, discover
from .errors import DefinitionError, Problem
from .folder import FolderSkill, folder_stamp, load_folder
from .jsontext import JSON

__all__ = ["FolderSource", "RootReport", "report_roots"]

log = logging.getLogger("skills.catalog")

_CACHE_VERSION = 3


@dataclass(frozen=True)
class RootReport:
    """What one root gave at its last scan: said at start-up, and a WARNING when it is nothing."""

    label: str
    root: Path
    skills: int
    archives: int
    skipped: int
    searched: int

    def line(self) -> str:
        parts = [f"{self.skills} skill(s)"]
        if self.archives:
            parts.append(f"{self.archives} archive(s)")
        if self.skipped:
            parts.append(f"{self.skipped} skipped (see `orchestrator skills list`)")
        return f"skills root {self.root}: " + ", ".join(parts)


class FolderSource(FolderProvider):
    """Every skill folder (and skill archive) found under one root, however deep."""

    def __init__(
        self, root: Path, source: SkillSource, label: str | None = None, *, cache_dir: Path | None = None
    ) -> None:
        self.root = root
        self.source: SkillSource = source
        self.label = label or source
        self._skills: dict[Path, FolderSkill] = {}
        self._problems: list[LoadProblem] = []
        self._loaded = False
        self._cache_dir = cache_dir
        self._cache_file = _cache_file(cache_dir, root) if cache_dir is not None else None
        self._cache: dict[str, Any] | None = None
        self.report: RootReport | None = None

    def refresh(self) -> bool:
        """Re-scan the root; unchanged folders keep their loaded skill object."""
        self._loaded = True
        old_skills, old_problems = self._skills, self._problems
        cache = self._read_cache()
        fresh_cache: dict[str, Any] = {}
        skills: dict[Path, FolderSkill] = {}
        found = discover(self.root)
        problems = [self._skipped(s) for s in found.skipped]
        folders = [(folder, self.root) for folder in found.folders]
        for archive in found.archives:
            folders += self._unpacked(archive, problems)
        for folder, boundary in folders:
            key = str(folder)
            stamp = folder_stamp(folder)
            previous = old_skills.get(folder)
            cached = cache.get(key)
            if previous is not None and previous.stamp == stamp:
                skills[folder] = previous
            elif cached is not None and tuple(cached["stamp"]) == stamp:
                skills[folder] = _from_cache(folder, cached, self.source, stamp, boundary)
            else:
                try:
                    skills[folder] = load_folder(folder, self.source, stamp, boundary)
                except DefinitionError as exc:
                    log.error("skill folder %s not loaded: %s", folder, exc)
                    problems.append(LoadProblem(self.label, folder, exc))
                    continue
            fresh_cache[key] = (
                cached if cached is not None and tuple(cached["stamp"]) == stamp else _cache_entry(skills[folder])
            )
        self._skills, self._problems = skills, problems
        self.report = RootReport(self.label, self.root, len(skills), len(found.archives), len(problems), found.searched)
        if fresh_cache != cache:
            self._write_cache(fresh_cache)
        changed = [id(s) for s in skills.values()] != [id(s) for s in old_skills.values()]
        return changed or [p.error.message for p in problems] != [p.error.message for p in old_problems]

    def _skipped(self, skipped: Skipped) -> LoadProblem:
        problem = Problem(skipped.path, skipped.reason, hint=skipped.hint, severity=skipped.severity)
        return LoadProblem(self.label, skipped.path, DefinitionError(skipped.path, [problem]))

    def _unpacked(self, archive: Path, problems: list[LoadProblem]) -> list[tuple[Path, Path]]:
        """The skill folders of one archive (unpacked into the cache), or a problem saying why none."""
        cache_dir = self._cache_dir or Path(tempfile.gettempdir()) / "orchestrator-cache"
        try:
            folder = unpack(archive, cache_dir)
        except ArchiveError as exc:
            problems.append(self._skipped(Skipped(archive, f"archive refused: {exc}", exc.hint)))
            return []
        except OSError as exc:
            problems.append(self._skipped(Skipped(archive, f"archive not unpacked: {exc}", "check the cache folder")))
            return []
        inner = discover(folder)
        if not inner.folders:
            reason = "the archive holds no SKILL.md"
            problems.append(self._skipped(Skipped(archive, reason, "a skill archive holds <name>/SKILL.md")))
        problems += [self._skipped(s) for s in inner.skipped]
        return [(f, folder) for f in inner.folders]

    def _read_cache(self) -> dict[str, Any]:
        if self._cache is not None or self._cache_file is None:
            return (self._cache or {}).get("folders", {})
        try:
            data: JSON = json.loads(self._cache_file.read_text(encoding="utf-8"))
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


def _cache_file(cache_dir: Path, root: Path) -> Path:
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]
    return cache_dir / f"skills-{digest}.json"


def _cache_entry(skill: FolderSkill) -> dict[str, Any]:
    contract = skill.contract
    return {
        "stamp": list(skill.stamp),
        "front": skill.front.model_dump(mode="json", by_alias=True, exclude_none=True),
        "contract": None if contract is None else contract.model_dump(mode="json", exclude_none=True),
        "warnings": [[str(w.path), w.message, w.hint, w.field, w.severity, w.line, w.col] for w in skill.warnings],
    }


def _from_cache(
    folder: Path, entry: dict[str, Any], source: SkillSource, stamp: tuple[int, ...], boundary: Path
) -> FolderSkill:
    front = FrontMatter.model_validate(entry["front"])
    contract = None if entry["contract"] is None else SkillContract.model_validate(entry["contract"])
    warnings = [
        Problem(Path(p), m, hint=h, field=f, severity=s, line=line, col=col)
        for p, m, h, f, s, line, col in entry.get("warnings", [])
    ]
    for warning in warnings:  # what a cold start says, a warm one says too
        log.warning("%s", warning)
    return FolderSkill(folder, front, contract, source, warnings, stamp, boundary)


def report_roots(providers: list[Any]) -> list[str]:
    """Say what each skills root gave: an INFO line each, a WARNING with a hint for a `--skills`
    root that gave nothing (the home's may well be empty). Returns the warnings (for the CLI)."""
    warnings: list[str] = []
    for provider in providers:
        report = getattr(provider, "report", None)
        if not isinstance(report, RootReport):
            continue
        if report.skills or provider.source != "user":
            log.info("%s", report.line())
            continue
        if report.skipped:  # there were skills, none loaded: the reasons are what to read
            text = (
                f"skills root {report.root} gave no skill: {report.skipped} skill folder(s) could not be loaded "
                "(hint: the errors above say what to fix; `orchestrator skills validate DIR` checks them)"
            )
        else:
            text = (
                f"skills root {report.root} gave no skill: no SKILL.md in the {report.searched} folder(s) searched "
                "(hint: point --skills at a folder that holds skill folders (a skill is a folder with a "
                "SKILL.md), or at a .zip/.skill archive)"
            )
        log.warning("%s", text)
        warnings.append(text)
    return warnings
