"""read-file: read a text file, a line range of it, up to a byte cap."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

from skills.base import SkillContext
from skills.errors import SkillRunError
from skills.roots import allowed_path

_NUL_CHECK_EXEMPT = ("utf-16", "utf16", "utf-32", "utf32")
_PIECE = 1 << 16  # read long lines in pieces so one huge line never loads whole


def _open_checked(path: str, ctx: SkillContext | None) -> Path:
    file = allowed_path(ctx, path)  # before anything is told about it, even whether it exists
    if not file.exists():
        raise SkillRunError(f"file not found: {path}", hint="check the path (list-files finds files)")
    if file.is_dir():
        raise SkillRunError(f"{path} is a directory", hint="use list-files to list a folder")
    return file


def read_file(
    path: str,
    encoding: str = "utf-8",
    errors: str = "strict",
    start_line: int = 1,
    end_line: int | None = None,
    max_bytes: int = 1_000_000,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    file = _open_checked(path, ctx)
    try:
        decoder = codecs.getincrementaldecoder(encoding)(errors)
    except LookupError:
        raise SkillRunError(
            f"unknown encoding {encoding!r}", hint="use a Python codec name such as utf-8 or latin-1"
        ) from None
    if end_line is not None and end_line < start_line:
        raise SkillRunError(
            f"end_line {end_line} is before start_line {start_line}",
            hint="end_line is inclusive and must be >= start_line",
        )
    check_nul = errors == "strict" and not encoding.lower().replace("_", "-").startswith(_NUL_CHECK_EXEMPT)

    chunks: list[bytes] = []
    kept = 0
    last_line = start_line - 1
    truncated = False
    line_no = 1
    try:
        with file.open("rb") as handle:
            while piece := handle.readline(_PIECE):
                current = line_no
                if piece.endswith(b"\n"):
                    line_no += 1
                if current < start_line:
                    continue
                if end_line is not None and current > end_line:
                    break
                if check_nul and b"\0" in piece:
                    raise SkillRunError(
                        f"{path} looks like a binary file (it contains NUL bytes)",
                        hint="read-file reads text; pass the right `encoding` if this is UTF-16/32 text",
                    )
                room = max_bytes - kept
                if len(piece) > room:
                    chunks.append(piece[:room])
                    truncated = True
                    if room:
                        last_line = current
                    break
                chunks.append(piece)
                kept += len(piece)
                last_line = current
            size = file.stat().st_size
    except PermissionError:
        raise SkillRunError(f"permission denied: {path}", hint="the server cannot read this file") from None
    try:
        content = decoder.decode(b"".join(chunks), final=not truncated)
    except UnicodeDecodeError as exc:
        raise SkillRunError(
            f"{path} is not valid {encoding} text (byte {exc.start} of the part read: {exc.reason})",
            hint="pass the right `encoding`, or `errors: replace` to read it anyway",
        ) from None
    lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return {
        "path": str(file),
        "content": content,
        "lines": lines,
        "start_line": start_line,
        "end_line": last_line,
        "size": size,
        "truncated": truncated,
        "encoding": encoding,
    }
