"""Reading `skill://<name>/<path>`: only files inside the skill folder, never a path escape."""

from __future__ import annotations

import mimetypes
from pathlib import Path
from urllib.parse import unquote

from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

__all__ = ["MAX_RESOURCE_BYTES", "read_skill_file"]

MAX_RESOURCE_BYTES = 5_000_000


def read_skill_file(root: Path, rel: str) -> tuple[str | bytes, str]:
    """Content and MIME type of `rel` inside `root`; refuses anything outside the folder."""
    rel = unquote(rel)
    if rel.startswith("/") or "\\" in rel or any(part == ".." for part in rel.split("/")):
        raise ResourceError(f"refused: '{rel}' escapes the skill folder; use a path relative to the skill")
    base = root.resolve()
    target = (base / rel).resolve()
    if not target.is_relative_to(base):
        raise ResourceError(f"refused: '{rel}' leads outside the skill folder")
    if not target.is_file():
        raise ResourceNotFoundError(f"no file '{rel}' in skill folder (list it with the skill's tool)")
    size = target.stat().st_size
    if size > MAX_RESOURCE_BYTES:
        raise ResourceError(f"'{rel}' is {size} bytes, over the {MAX_RESOURCE_BYTES} byte limit for resources")
    data = target.read_bytes()
    mime = mimetypes.guess_type(target.name)[0]
    if target.suffix in (".md", ".markdown"):
        mime = "text/markdown"
    try:
        return data.decode("utf-8"), mime or "text/plain"
    except UnicodeDecodeError:
        return data, mime or "application/octet-stream"
