"""write-file: write text inside the run's artifact directory, and nowhere else."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

from skills.base import SkillContext
from skills.errors import SkillRunError


def safe_target(base: Path, path: str) -> Path:
    """Resolve `path` inside `base`, refusing absolute paths, '..' and symlink escapes."""
    normalised = path.replace("\\", "/")
    if normalised.startswith("/") or re.match(r"^[A-Za-z]:", normalised):
        raise SkillRunError(
            f"path {path!r} is absolute",
            hint="give a path relative to the run's artifact directory, e.g. 'report.md'",
        )
    parts = PurePosixPath(normalised).parts
    if ".." in parts:
        raise SkillRunError(
            f"path {path!r} leaves the artifact directory ('..')",
            hint="files can only be written inside the run's artifact directory",
        )
    if not [p for p in parts if p != "."]:
        raise SkillRunError(f"path {path!r} names no file", hint="give a file name such as 'out.txt'")
    root = base.resolve()
    target = (root / Path(*parts)).resolve()
    if not target.is_relative_to(root):
        raise SkillRunError(
            f"path {path!r} leads out of the artifact directory (through a symbolic link)",
            hint="write to a plain path inside the artifact directory",
        )
    if target.is_dir():
        raise SkillRunError(f"path {path!r} is a directory", hint="give a file name inside it")
    return target


def write_file(
    path: str,
    content: str,
    append: bool = False,
    encoding: str = "utf-8",
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    context = ctx or SkillContext(skill="write-file")
    base = context.artifacts().resolve()
    target = safe_target(base, path)
    try:
        data = content.encode(encoding)
    except LookupError:
        raise SkillRunError(f"unknown encoding {encoding!r}", hint="use a codec name such as utf-8") from None
    except UnicodeEncodeError as exc:
        raise SkillRunError(
            f"the content cannot be encoded as {encoding}: {exc.reason} at character {exc.start}",
            hint="use encoding utf-8",
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("ab" if append else "wb") as handle:
        handle.write(data)
    return {
        "path": str(target),
        "relative": target.relative_to(base).as_posix(),
        "bytes": len(data),
        "artifact_dir": str(base),
    }
