"""Finding skills under a root: every folder with a SKILL.md, however deep, and skill archives.

Repositories nest their skills (`skills/`, `*/skills/`, `.claude/skills/`, `.codex/skills/`),
so a root is searched recursively, not one level down. The walk is bounded (depth, folders
visited), never enters folders that hold no skills by convention (`.git`, `node_modules`,
virtual environments, caches), follows a symlinked folder only while it stays inside the root
(each real folder once: a link loop ends there), and stops at a skill folder: what is below a
SKILL.md is that skill's bundled files.

Nothing is passed over in silence: a SKILL.md link that dangles or leaves the root, a link
loop, a folder beyond the depth bound are each `Skipped` with a reason and a hint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "ARCHIVE_SUFFIXES",
    "MAX_DEPTH",
    "MAX_FOLDERS",
    "SKIP_DIRS",
    "Discovery",
    "Skipped",
    "discover",
    "is_hidden",
    "within",
]

MAX_DEPTH = 8
"""Folder levels searched below a root (`a/.claude/skills/x` is 3; deep monorepos rarely pass 6)."""
MAX_FOLDERS = 20_000
"""Folders visited in one root at most: a root pointed at `/` or a home directory ends here."""
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "site-packages",
        ".cache",
        ".idea",
        ".vscode",
    }
)
"""Folders that hold tooling, dependencies or caches, never skills: not searched, not served."""
ARCHIVE_SUFFIXES = (".zip", ".skill")
"""Skill archives (a `.skill` file is the zip that Claude exports)."""


@dataclass(frozen=True)
class Skipped:
    """A place under a root that could hold a skill but gives none, and why."""

    path: Path
    reason: str
    hint: str = ""
    severity: Literal["error", "warning"] = "warning"
    """`error` for a folder meant as a skill that is broken (a skill.yaml without SKILL.md)."""


@dataclass
class Discovery:
    """What one root holds: skill folders, archives, and what was skipped (all sorted by path)."""

    root: Path
    folders: list[Path] = field(default_factory=lambda: [])
    archives: list[Path] = field(default_factory=lambda: [])
    skipped: list[Skipped] = field(default_factory=lambda: [])
    searched: int = 0
    """Folders looked into."""


def is_hidden(rel: str) -> bool:
    """Whether a path inside a skill is kept private: a dot-file or dot-folder, or a tooling folder.

    The same rule decides what a skill's file list shows and what a resource read serves, so
    a file is either listed and readable or neither.
    """
    parts = rel.split("/")
    return any(p.startswith(".") or p in SKIP_DIRS for p in parts) or rel.endswith(".pyc")


def discover(root: Path, *, max_depth: int = MAX_DEPTH, max_folders: int = MAX_FOLDERS) -> Discovery:
    """Search `root` for skill folders and archives (see the module docstring)."""
    found = Discovery(root)
    if root.is_file():
        if root.suffix.lower() in ARCHIVE_SUFFIXES:
            found.archives.append(root)
        return found
    try:
        boundary = root.resolve(strict=True)
    except OSError:
        return found
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            st = folder.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue  # reached again through a link: its skills are already found
        seen.add((st.st_dev, st.st_ino))
        found.searched += 1
        if found.searched > max_folders:
            found.skipped.append(
                Skipped(
                    folder,
                    f"the search stopped after {max_folders:,} folders",
                    "point --skills at the folder that holds the skills, not at a whole disk or home",
                )
            )
            break
        try:
            with os.scandir(folder) as scan:
                entries = list(scan)
        except OSError as exc:
            found.skipped.append(Skipped(folder, f"cannot be read: {exc.strerror or exc}", "check its permissions"))
            continue
        skill_md = next((e for e in entries if e.name == "SKILL.md"), None)
        if skill_md is not None:
            if _skill_md_usable(skill_md, boundary, found):
                found.folders.append(folder)
            continue  # below a SKILL.md are that skill's files
        if any(e.name == "skill.yaml" for e in entries):
            found.skipped.append(
                Skipped(folder, "SKILL.md is missing", "every skill folder needs a SKILL.md", severity="error")
            )
            continue
        below: list[tuple[Path, int]] = []
        for entry in sorted(entries, key=lambda e: e.name):  # a skill folder's own files need no order
            path = Path(entry.path)
            if entry.name in SKIP_DIRS:
                continue
            if _is_dir(entry):
                if entry.is_symlink() and not within(path, boundary):
                    found.skipped.append(
                        Skipped(path, "a folder link that leads outside the root", "link to folders inside the root")
                    )
                elif depth >= max_depth:
                    found.skipped.append(
                        Skipped(
                            path,
                            f"deeper than {max_depth} levels below the root; not searched",
                            "give this folder as a --skills root of its own",
                        )
                    )
                else:
                    below.append((path, depth + 1))
            elif entry.name.lower().endswith(ARCHIVE_SUFFIXES) and _is_file(entry):
                found.archives.append(path)
        stack.extend(reversed(below))
    found.folders.sort()
    found.archives.sort()
    return found


def _skill_md_usable(entry: os.DirEntry[str], boundary: Path, found: Discovery) -> bool:
    # The directory entry knows its type: a plain SKILL.md file costs no system call here.
    if not entry.is_symlink():
        return _is_file(entry)
    skill_md = Path(entry.path)
    target = os.readlink(skill_md)
    if not skill_md.exists():
        found.skipped.append(
            Skipped(
                skill_md.parent,
                f"SKILL.md is a link to '{target}', which does not exist",
                "fix or remove the link",
            )
        )
        return False
    if not within(skill_md, boundary):
        found.skipped.append(
            Skipped(
                skill_md.parent,
                f"SKILL.md is a link to '{target}', outside the root being served",
                "copy the file in, or serve the folder it links to as a --skills root",
            )
        )
        return False
    return True


def within(path: Path | str, boundary: Path) -> bool:
    """Whether `path`, links followed, exists inside `boundary` (a resolved folder)."""
    try:
        return Path(path).resolve(strict=True).is_relative_to(boundary)
    except (OSError, RuntimeError):  # dangling, or a link loop
        return False


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False
