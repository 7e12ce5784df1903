"""The MCP Skills extension (SEP-2640, `io.modelcontextprotocol/skills`): skills/list, skills/get
and resources/directory/read, declared under `capabilities.extensions` with `directoryRead`.

Every skill with a folder is served (folders under a root, unpacked archives, created skills)
as `skill://<name>/SKILL.md` with its verbatim front matter and a complete manifest of its files
(each with `sha256:` digest and size: the bytes `resources/read` returns). Digests are kept per
file until its mtime or size changes. A skill whose front matter breaks the Agent Skills spec
(served leniently as a tool, under its folder name or with its description cut) cannot have a
verbatim entry whose name matches its URI: it is left out of the listing, and `skills/get` of
its URI says why. The same goes for a skill over the extension's limits (512 files, 16 MiB).

Handshake-era clients keep the tools, prompts and resources they always had.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, cast

from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CacheableResult, PaginatedRequestParams, PaginatedResult, RequestParams
from mcp_types import Resource as MCPResource
from pydantic import BaseModel, ConfigDict, Field

from skills import Catalog, Skill
from skills.core.contract import DESCRIPTION_MAX, NAME_PATTERN
from skills.core.discovery import is_hidden, within
from skills.core.errors import clip

from ._paging import Pager

__all__ = ["SKILLS_EXTENSION", "SkillsExtension"]

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
MAX_FILES = 512
MAX_BYTES = 16 * 1024 * 1024
_TTL_MS = 60_000
_LATER = ConfigDict(defer_build=True)
"""The models below are built on their first use, not at import: ~8 ms off every spawn of
`orchestrator serve`, whose first listing needs none of them."""


class SkillFile(BaseModel):
    """One file of a skill: its URI, `sha256:<hex>` digest and size in bytes."""

    model_config = _LATER

    uri: str
    digest: str
    size: int


class SkillEntry(BaseModel):
    """A skill: the URI of its SKILL.md, its front matter verbatim, and every file it has."""

    model_config = _LATER

    uri: str
    frontmatter: dict[str, Any]
    resources: list[SkillFile] | Literal["dynamic"]


class ListSkillsResult(PaginatedResult, CacheableResult):
    model_config = _LATER
    skills: list[SkillEntry]
    result_type: Literal["complete"] = "complete"


class GetSkillParams(RequestParams):
    model_config = _LATER
    uri: str = Field(max_length=2048)


class GetSkillResult(CacheableResult):
    model_config = _LATER
    skill: SkillEntry
    result_type: Literal["complete"] = "complete"


class ReadDirectoryParams(PaginatedRequestParams):
    model_config = _LATER
    uri: str = Field(max_length=2048)


class ReadDirectoryResult(PaginatedResult, CacheableResult):
    """A folder's entries; cacheable like the other listings (2026-07-28 clients such as the
    Inspector refuse a `resources/directory/read` result without `ttlMs`/`cacheScope`)."""

    model_config = _LATER

    resources: list[MCPResource]
    result_type: Literal["complete"] = "complete"


class SkillsExtension(Extension):
    """Serves the Catalog's folder skills through SEP-2640's methods."""

    identifier = SKILLS_EXTENSION

    def __init__(self, catalog: Callable[[], Catalog], pager: Pager) -> None:
        self._catalog = catalog
        self._pager = pager
        self._digests: dict[str, tuple[int, int, str]] = {}

    def settings(self) -> dict[str, Any]:
        return {"directoryRead": True}

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("skills/list", PaginatedRequestParams, self._list),
            MethodBinding("skills/get", GetSkillParams, self._get),
            MethodBinding("resources/directory/read", ReadDirectoryParams, self._read_directory),
        )

    # -- methods ---------------------------------------------------------------------------
    async def _list(self, ctx: Any, params: PaginatedRequestParams | None) -> ListSkillsResult:
        served = [s for s in self._catalog() if s.root is not None and hasattr(s, "front_matter")]
        page, cursor = self._pager.page("skills/list", served, params.cursor if params else None)
        entries = [e for e in (self._entry(s) for s in page) if isinstance(e, SkillEntry)]
        return ListSkillsResult(skills=entries, next_cursor=cursor, ttl_ms=_TTL_MS)

    async def _get(self, ctx: Any, params: GetSkillParams) -> GetSkillResult:
        name, rel = _split(params.uri)
        skill = self._catalog().find(name) if name else None
        if skill is None or skill.root is None or rel != "SKILL.md" or not hasattr(skill, "front_matter"):
            raise MCPError(code=INVALID_PARAMS, message=f"no skill is served at {clip(params.uri)}")
        entry = self._entry(skill)
        if not isinstance(entry, SkillEntry):
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"{clip(params.uri)} is not served through the Skills extension: {entry}; "
                f"it is served as the tool '{skill.name}' and as resources",
            )
        return GetSkillResult(skill=entry, ttl_ms=_TTL_MS)

    async def _read_directory(self, ctx: Any, params: ReadDirectoryParams) -> ReadDirectoryResult:
        name, rel = _split(params.uri)
        skill = self._catalog().find(name) if name else None
        folder = _directory(skill, rel)
        root = skill.root if skill is not None else None
        if skill is None or folder is None or root is None:
            raise MCPError(code=INVALID_PARAMS, message=f"{clip(params.uri)} is not a directory resource")
        boundary = Path(getattr(skill, "boundary", root)).resolve()
        children: list[MCPResource] = []
        prefix = f"skill://{skill.name}/" + (f"{rel}/" if rel else "")
        with os.scandir(folder) as scan:
            for entry in sorted(scan, key=lambda e: e.name):
                if is_hidden(entry.name) or (entry.is_symlink() and not within(entry.path, boundary)):
                    continue
                is_dir = entry.is_dir()
                mime = "inode/directory" if is_dir else _mime(entry.name)
                children.append(MCPResource(uri=prefix + entry.name, name=entry.name, mime_type=mime))
        page, cursor = self._pager.page(f"directory {params.uri}", children, params.cursor)
        return ReadDirectoryResult(resources=page, next_cursor=cursor, ttl_ms=_TTL_MS)

    # -- entries ---------------------------------------------------------------------------
    def _entry(self, skill: Any) -> SkillEntry | str:
        """The skill's entry, or why it cannot have one (then it is not served here)."""
        front = skill.front_matter()
        reason = _breaks_spec(front, skill.name)
        if reason is not None:
            return f"its front matter breaks the Agent Skills spec ({reason})"
        files = skill.files()
        if len(files) > MAX_FILES:
            return f"it has more than {MAX_FILES} files"
        resources: list[SkillFile] = []
        total = 0
        for rel in files:
            found = self._digest(skill.root / rel)
            if found is None:
                continue  # removed since it was listed
            digest, size = found
            total += size
            resources.append(SkillFile(uri=f"skill://{skill.name}/{rel}", digest=digest, size=size))
        if total > MAX_BYTES:
            return f"its files hold more than {MAX_BYTES:,} bytes"
        return SkillEntry(uri=f"skill://{skill.name}/SKILL.md", frontmatter=front, resources=resources)

    def _digest(self, path: Path) -> tuple[str, int] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        key = str(path)
        cached = self._digests.get(key)
        if cached is not None and cached[:2] == (st.st_mtime_ns, st.st_size):
            return cached[2], st.st_size
        sha = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                sha.update(chunk)
        digest = "sha256:" + sha.hexdigest()
        self._digests[key] = (st.st_mtime_ns, st.st_size, digest)
        return digest, st.st_size


def _split(uri: str) -> tuple[str, str]:
    """`skill://<name>/<path>` -> (name, path); ('', '') for anything else."""
    if not uri.startswith("skill://"):
        return "", ""
    name, _, rel = uri[len("skill://") :].partition("/")
    return name, rel.rstrip("/")


def _directory(skill: Skill | None, rel: str) -> Path | None:
    """The folder `rel` of the skill when it is one a client may list (not hidden, no escape)."""
    if skill is None or skill.root is None:
        return None
    if rel and (rel.startswith("/") or ".." in rel.split("/") or "\\" in rel or is_hidden(rel)):
        return None
    folder = skill.root / rel if rel else skill.root
    boundary = Path(getattr(skill, "boundary", skill.root)).resolve()
    if not folder.is_dir() or not (folder.resolve().is_relative_to(skill.root.resolve()) or within(folder, boundary)):
        return None
    return folder


def _breaks_spec(front: dict[str, Any], name: str) -> str | None:
    """The Agent Skills rule a verbatim front matter breaks, if any (a skill served leniently:
    under its folder name, with its description cut, with non-string metadata)."""
    if front.get("name") != name or not NAME_PATTERN.match(name):
        return f"name {clip(str(front.get('name')), 80)!r} is not the valid skill name '{name}'"
    description = front.get("description")
    if not isinstance(description, str) or not description.strip() or len(description) > DESCRIPTION_MAX:
        return f"the description is not 1-{DESCRIPTION_MAX:,} characters of text"
    for key in ("license", "compatibility", "allowed-tools"):
        if key in front and not isinstance(front[key], str):
            return f"'{key}' is not a string"
    metadata = front.get("metadata")
    if "metadata" in front and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in cast("dict[str, Any]", metadata).values())
    ):
        return "metadata does not map strings to strings"
    return None


def _mime(name: str) -> str:
    if name.endswith((".md", ".markdown")):
        return "text/markdown"
    return mimetypes.guess_type(name)[0] or "application/octet-stream"
