"""Reading `skill://<name>/<path>`: only files inside the skill folder, never a path escape.

Failures are JSON-RPC errors with the message (SPEC 7): a refused path (an escape, a file over
the size limit) is the client's mistake, -32602; an unknown resource is -32002 for handshake-era
clients (the 2025-11-25 spec: "Resource not found: -32002") and -32602 for 2026-07-28 ones
(SEP-2164 moved it to Invalid Params).
"""

from __future__ import annotations

import mimetypes
from pathlib import Path
from urllib.parse import unquote

from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from skills.core.discovery import is_hidden
from skills.core.errors import clip

__all__ = ["MAX_RESOURCE_BYTES", "RESOURCE_NOT_FOUND", "ResourceRefused", "read_skill_file", "resource_error"]

MAX_RESOURCE_BYTES = 5_000_000
RESOURCE_NOT_FOUND = -32002
"""The 2025-11-25 (and earlier) code for an unknown resource."""


class ResourceRefused(ResourceError):
    """The client asked for something this server will not serve (a path escape, a file too big)."""


def resource_error(exc: ResourceError | OSError, uri: str, protocol_version: str | None) -> MCPError:
    """The JSON-RPC error for a failed resources/read in the client's protocol era."""
    data = {"uri": clip(uri)}
    if isinstance(exc, ResourceNotFoundError):
        modern = protocol_version in MODERN_PROTOCOL_VERSIONS
        return MCPError(code=INVALID_PARAMS if modern else RESOURCE_NOT_FOUND, message=str(exc), data=data)
    if isinstance(exc, ResourceRefused):
        return MCPError(code=INVALID_PARAMS, message=str(exc), data=data)
    if isinstance(exc, OSError):
        return MCPError(
            code=INTERNAL_ERROR, message=f"cannot read {clip(uri)}: {exc.strerror or 'I/O error'}", data=data
        )
    return MCPError(code=INTERNAL_ERROR, message=str(exc), data=data)


def read_skill_file(root: Path, rel: str, boundary: Path | None = None) -> tuple[str | bytes, str]:
    """Content and MIME type of `rel` inside `root`; refuses anything outside the folder.

    A link inside the skill is followed while its target stays inside `boundary` (the root being
    served: a SKILL.md linked to a sibling skill's). Hidden files are refused, as they are left
    out of the skill's file list (`skills.core.discovery.is_hidden`).
    """
    rel = unquote(rel)
    shown = clip(rel)
    if rel.startswith("/") or "\\" in rel or "\0" in rel or any(part == ".." for part in rel.split("/")):
        raise ResourceRefused(f"refused: '{shown}' escapes the skill folder; use a path relative to the skill")
    if is_hidden(rel):
        raise ResourceRefused(
            f"refused: '{shown}' is a hidden file (a dot-file, or in a tooling folder); hidden files are not served"
        )
    base = root.resolve()
    target = (base / rel).resolve()
    if not target.is_relative_to(base) and not target.is_relative_to((boundary or root).resolve()):
        raise ResourceRefused(f"refused: '{shown}' leads outside the skill folder")
    if not target.is_file():
        raise ResourceNotFoundError(f"no file '{shown}' in skill folder (list it with the skill's tool)")
    size = target.stat().st_size
    if size > MAX_RESOURCE_BYTES:
        raise ResourceRefused(f"'{shown}' is {size} bytes, over the {MAX_RESOURCE_BYTES} byte limit for resources")
    data = target.read_bytes()
    mime = mimetypes.guess_type(target.name)[0]
    if target.suffix in (".md", ".markdown"):
        mime = "text/markdown"
    try:
        return data.decode("utf-8"), mime or "text/plain"
    except UnicodeDecodeError:
        return data, mime or "application/octet-stream"
