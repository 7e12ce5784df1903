"""diff-files: unified diff between two files or two texts, with change counts."""

from __future__ import annotations

import difflib
from typing import Any

from skills.base import SkillContext
from skills.errors import SkillRunError
from skills.roots import allowed_path

_MAX_FILE_BYTES = 20_000_000


def _side(
    name: str, path: str | None, text: str | None, label: str | None, encoding: str, ctx: SkillContext | None
) -> tuple[str, str]:
    if (path is None) == (text is None):
        raise SkillRunError(
            f"give exactly one of `{name}_path` and `{name}_text`",
            hint="each side of the diff is either a file or a text",
        )
    if text is not None:
        return text, label or name
    assert path is not None
    file = allowed_path(ctx, path, field=f"{name}_path")
    if not file.is_file():
        raise SkillRunError(
            f"{name}_path: file not found: {path}"
            if not file.exists()
            else f"{name}_path: {path} is not a file",
            hint="give the path of a text file",
        )
    if file.stat().st_size > _MAX_FILE_BYTES:
        raise SkillRunError(f"{name}_path: {path} is larger than 20 MB", hint="diff smaller files")
    try:
        return file.read_text(encoding=encoding), label or path
    except LookupError:
        raise SkillRunError(f"unknown encoding {encoding!r}", hint="use a codec name such as utf-8") from None
    except UnicodeDecodeError as exc:
        raise SkillRunError(
            f"{name}_path: {path} is not valid {encoding} text ({exc.reason})",
            hint="diff-files compares text files; pass the right `encoding`",
        ) from None


def diff_files(
    old_path: str | None = None,
    new_path: str | None = None,
    old_text: str | None = None,
    new_text: str | None = None,
    old_label: str | None = None,
    new_label: str | None = None,
    context: int = 3,
    ignore_whitespace: bool = False,
    encoding: str = "utf-8",
    max_lines: int = 5000,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    old, old_name = _side("old", old_path, old_text, old_label, encoding, ctx)
    new, new_name = _side("new", new_path, new_text, new_label, encoding, ctx)
    old_lines = old.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    if ignore_whitespace:
        compare_old = [" ".join(line.split()) + "\n" for line in old_lines]
        compare_new = [" ".join(line.split()) + "\n" for line in new_lines]
    else:
        compare_old, compare_new = old_lines, new_lines

    added = removed = hunks = 0
    out: list[str] = []
    for line in difflib.unified_diff(compare_old, compare_new, old_name, new_name, n=context):
        if line.startswith("@@"):
            hunks += 1
        elif line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    truncated = len(out) > max_lines
    return {
        "diff": "".join(out[:max_lines]),
        "identical": hunks == 0,
        "added": added,
        "removed": removed,
        "hunks": hunks,
        "old_label": old_name,
        "new_label": new_name,
        "truncated": truncated,
    }
