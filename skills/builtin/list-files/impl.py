"""list-files: glob under a directory, pruning excluded folders while walking."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path, PurePosixPath
from typing import Any

from skills.core.regex import PatternError, compile_pattern
from skills.core.base import SkillContext
from skills.core.errors import SkillRunError
from skills.core.roots import allowed_path, roots_of

DEFAULT_EXCLUDE = ("__pycache__", "node_modules", "*.pyc")


def _segment_regex(segment: str) -> str:
    """Translate one glob segment (no '/') to a regex; `*`/`?` never cross a '/'."""
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                out.append(_class_regex(segment[i + 1 : end]))
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _class_regex(body: str) -> str:
    """A glob class `[...]` (`[!...]` negated) as an RE2 class that never matches '/'.

    RE2 has no lookahead, so '/' is cut out of the ranges instead of refused after the fact.
    """
    negate = body.startswith("!")
    if negate:
        body = body[1:]
    ranges: list[tuple[int, int]] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            ranges.append((ord(body[i]), ord(body[i + 2])))
            i += 3
        else:
            ranges.append((ord(body[i]), ord(body[i])))
            i += 1
    slash = ord("/")
    parts: list[str] = []
    for low, high in ranges:
        pieces = [(low, min(high, slash - 1)), (max(low, slash + 1), high)] if low <= slash <= high else [(low, high)]
        parts += [f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in pieces if a <= b]
    if negate:
        return "[^/" + "".join(parts) + "]"
    return "[" + "".join(parts) + "]" if parts else "[^\\x{0}-\\x{10ffff}]"  # an empty class matches nothing


def glob_regex(pattern: str) -> tuple[Any, int | None]:
    """Compile a glob to a regex over relative POSIX paths, plus the maximum folder depth
    it can match (None when it contains `**`)."""
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if not parts:
        parts = ["**", "*"]
    regex = ""
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            regex += ".+" if last else "(?:[^/]+/)*"
        else:
            regex += _segment_regex(part) + ("" if last else "/")
    depth = None if "**" in parts else len(parts) - 1
    try:
        return compile_pattern(regex), depth  # RE2: `*a*a*a...` against a long name is linear, not exponential
    except PatternError as exc:
        raise SkillRunError(f"pattern {pattern!r} cannot be used: {exc}", hint="give a shorter, simpler pattern") from None


def _check_pattern(pattern: str) -> None:
    if pattern.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", pattern):
        raise SkillRunError(
            f"pattern {pattern!r} is absolute",
            hint="give the folder as `directory` and a relative pattern such as '**/*.py'",
        )
    if ".." in PurePosixPath(pattern.replace("\\", "/")).parts:
        raise SkillRunError(
            f"pattern {pattern!r} contains '..'",
            hint="patterns stay inside `directory`; point `directory` at the parent folder instead",
        )


def list_files(
    directory: str,
    pattern: str = "**/*",
    files_only: bool = True,
    include_hidden: bool = False,
    exclude: list[str] | None = None,
    max_results: int = 1000,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    _check_pattern(pattern)
    excluded = list(DEFAULT_EXCLUDE if exclude is None else exclude)
    root = allowed_path(ctx, directory, field="directory")
    refuses, artifacts = roots_of(getattr(ctx, "extras", None)).refuses, getattr(ctx, "artifact_dir", None)
    if not root.exists():
        raise SkillRunError(
            f"directory not found: {directory}",
            hint="check the path; relative paths are resolved against the server's working directory",
        )
    if not root.is_dir():
        raise SkillRunError(
            f"not a directory: {directory}",
            hint="pass the folder that contains the file, or use read-file to read one file",
        )
    regex, max_depth = glob_regex(pattern)

    def skipped(name: str) -> bool:
        if not include_hidden and name.startswith("."):
            return True
        return any(fnmatch.fnmatchcase(name, pat) for pat in excluded)

    def refused(folder: str, name: str) -> bool:  # a credentials folder inside the root: not even its names
        return refuses(Path(folder, name), artifacts)

    matches: list[str] = []
    for current, dirnames, filenames in os.walk(root):
        rel_dir = Path(current).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        depth = 0 if not prefix else prefix.count("/")
        dirnames[:] = sorted(d for d in dirnames if not skipped(d) and not refused(current, d))
        if not files_only:
            matches.extend(prefix + d for d in dirnames if regex.fullmatch(prefix + d))
        matches.extend(
            prefix + f for f in filenames if not skipped(f) and regex.fullmatch(prefix + f) and not refused(current, f)
        )
        if max_depth is not None and depth >= max_depth:
            dirnames[:] = []

    matches.sort()
    total = len(matches)
    kept = matches[:max_results]
    return {
        "root": str(root),
        "paths": [str(root / rel) for rel in kept],
        "relative": kept,
        "count": len(kept),
        "total": total,
        "truncated": total > len(kept),
    }
