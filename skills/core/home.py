"""The home directory (SPEC 2): where user skills, pipelines, runs and settings live.

`~/.orchestrator`, or `$ORCHESTRATOR_HOME`, or `--home DIR`. Installing is idempotent and never
overwrites a file the user changed: a manifest keeps the hash of every file we wrote, and a
file whose hash no longer matches belongs to the user.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import Skill
from .yamltext import YAML, Scalar, YAMLError, load_yaml, read_bounded

__all__ = ["BUILTIN_SKILLS_DIR", "DEFAULT_MODELS_FILE", "Home", "InstallReport"]

log = logging.getLogger("skills.home")

BUILTIN_SKILLS_DIR = Path(__file__).resolve().parent.parent / "builtin"
DEFAULT_MODELS_FILE = Path(__file__).resolve().parent.parent / "defaults" / "models.yaml"
"""The shipped model registry (SPEC 6), installed as `models/registry.yaml`."""
DEFAULT_ROLES_FILE = Path(__file__).resolve().parent.parent / "defaults" / "roles.yaml"
"""The shipped agent roles (`skills.core.roles`), installed as `agents/roles.yaml`."""
_MANIFEST = ".install-manifest.json"
_REGISTRY_HEADER = """\
# Skills known to this orchestrator home (docs/skills.md#the-registry).
# enabled: false unpublishes a skill; enabled: true switches on one that is off by default
# (shell-command, for example). source: builtin | user | created. Edit freely: installing
# again only adds entries, it never changes yours.
"""


@dataclass
class InstallReport:
    """What `install` did, file by file (paths relative to the home)."""

    created: list[str] = field(default_factory=lambda: [])
    updated: list[str] = field(default_factory=lambda: [])
    kept: list[str] = field(default_factory=lambda: [])


class Home:
    """Paths and settings files of one orchestrator home directory."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()

    @classmethod
    def resolve(cls, explicit: str | Path | None = None) -> Home:
        """`--home` if given, else `$ORCHESTRATOR_HOME`, else `~/.orchestrator`."""
        if explicit:
            return cls(Path(explicit))
        env = os.environ.get("ORCHESTRATOR_HOME")
        return cls(Path(env) if env else Path.home() / ".orchestrator")

    skills_dir = property(lambda self: self.root / "skills")
    registry_file = property(lambda self: self.root / "skills" / "registry.yaml")
    models_dir = property(lambda self: self.root / "models")
    roles_file = property(lambda self: self.root / "agents" / "roles.yaml")
    pipelines_dir = property(lambda self: self.root / "pipelines")
    servers_file = property(lambda self: self.root / "servers.json")
    state_db = property(lambda self: self.root / "state.sqlite")
    runs_dir = property(lambda self: self.root / "runs")
    cache_dir = property(lambda self: self.root / "cache")

    # -- install -------------------------------------------------------------------------
    def _defaults(self) -> dict[str, str]:
        return {
            "skills/registry.yaml": _REGISTRY_HEADER + "skills:\n" + _entry_lines(self._builtin_entries()),
            "servers.json": json.dumps({"mcpServers": {}}, indent=2) + "\n",
            "models/registry.yaml": DEFAULT_MODELS_FILE.read_text(encoding="utf-8"),
            "agents/roles.yaml": DEFAULT_ROLES_FILE.read_text(encoding="utf-8"),
        }

    def _builtin_entries(self) -> dict[str, dict[str, Any]]:
        from .folder import check_folder

        entries: dict[str, dict[str, Any]] = {}
        for folder in sorted(BUILTIN_SKILLS_DIR.iterdir()) if BUILTIN_SKILLS_DIR.is_dir() else []:
            if (folder / "SKILL.md").is_file():
                _, contract, _ = check_folder(folder)
                entries[folder.name] = {"source": "builtin", "enabled": contract is None or contract.enabled}
        return entries

    def ensure(self) -> None:
        """Create the home on first use (cheap when it already exists)."""
        if not self.registry_file.exists():
            self.install()

    def install(self) -> InstallReport:
        """Create the folders and copy missing or untouched defaults; never overwrite user edits."""
        report = InstallReport()
        for sub in ("skills", "models", "agents", "pipelines", "runs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        manifest_path = self.root / _MANIFEST
        try:
            manifest: dict[str, str] = json.loads(manifest_path.read_text())
        except (FileNotFoundError, ValueError):
            manifest = {}
        for rel, text in self._defaults().items():
            path = self.root / rel
            digest = hashlib.sha256(text.encode()).hexdigest()
            if not path.exists():
                path.write_text(text, encoding="utf-8")
                report.created.append(rel)
            else:
                current = hashlib.sha256(path.read_bytes()).hexdigest()
                if current == digest:
                    report.kept.append(rel)
                elif manifest.get(rel) == current:  # still exactly what we wrote last time
                    path.write_text(text, encoding="utf-8")
                    report.updated.append(rel)
                else:
                    report.kept.append(rel)  # the user's file now
                    if rel == "skills/registry.yaml":
                        self.add_missing_entries(self._builtin_entries())
                    continue
            manifest[rel] = digest
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        return report

    # -- registry ------------------------------------------------------------------------
    def read_registry(self) -> dict[str, dict[Scalar, YAML]]:
        """The `skills:` map of registry.yaml (empty when missing or unreadable, with a log line)."""
        try:
            data = load_yaml(read_bounded(self.registry_file)) or {}
        except FileNotFoundError:
            return {}
        except (YAMLError, UnicodeDecodeError) as exc:
            log.error("%s is not valid YAML, ignoring it: %s", self.registry_file, exc)
            return {}
        skills = data.get("skills") if isinstance(data, dict) else None
        return {str(k): v for k, v in skills.items() if isinstance(v, dict)} if isinstance(skills, dict) else {}

    def enabled_overrides(self) -> dict[str, bool]:
        """Skill name -> enabled, as the user set it in the registry."""
        return {n: bool(e["enabled"]) for n, e in self.read_registry().items() if "enabled" in e}

    def record(self, skills: Iterable[Skill]) -> None:
        """Add registry entries for skills found in the home that are not recorded yet."""
        entries: dict[str, dict[str, Any]] = {}
        for skill in skills:
            if skill.source in ("home", "created") and skill.root is not None:
                source = "created" if skill.source == "created" else "user"
                entries[skill.name] = {
                    "source": source,
                    "path": _rel(skill.root, self.root),
                    "enabled": getattr(skill, "enabled", True),
                }
        self.add_missing_entries(entries)

    def add_missing_entries(self, entries: dict[str, dict[str, Any]]) -> None:
        """Append registry entries for the skills it does not list yet (the user's lines stay as they are)."""
        current = self.read_registry()
        missing = {k: v for k, v in entries.items() if k not in current}
        if not missing:
            return
        # Appending keeps the user's comments and layout intact.
        if not self.registry_file.exists():
            self.registry_file.parent.mkdir(parents=True, exist_ok=True)
            self.registry_file.write_text(_REGISTRY_HEADER + "skills:\n", encoding="utf-8")
        text = self.registry_file.read_text(encoding="utf-8")
        if not text.endswith("\n"):
            text += "\n"
        if "skills:" not in text:
            text += "skills:\n"
        text += _entry_lines(missing)
        self.registry_file.write_text(text, encoding="utf-8")


def _entry_lines(entries: dict[str, dict[str, Any]]) -> str:
    """One flow-style line an entry (JSON is valid YAML): easy to read, diff and edit."""
    return "".join(f"  {name}: {json.dumps(entry, sort_keys=True)}\n" for name, entry in sorted(entries.items()))


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)
