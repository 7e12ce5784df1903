"""Agent Skills folders: SKILL.md (+ skill.yaml) loaded as Skills.

Start-up reads only the front matter and skill.yaml of each folder (progressive disclosure);
the body and the list of bundled files are read when first asked for.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from functools import cached_property
from pathlib import Path
from typing import Any

from .base import SkillContext, SkillKind, SkillSource
from .checks import check_folder
from .contract import FrontMatter, SkillContract
from .discovery import is_hidden, within
from .errors import DefinitionError, Problem
from .runner import runner_for

__all__ = ["INSTRUCTIONS_INPUT", "INSTRUCTIONS_OUTPUT", "FolderSkill", "check_folder", "folder_stamp", "load_folder"]

log = logging.getLogger("skills.loader")

TOOL_NAME_MAX = 64
_MAX_LISTED_FILES = 513
"""Files listed at most: SEP-2640 takes 512 a skill; one more says a skill is over it."""

INSTRUCTIONS_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": "What you want to do with this skill; the instructions to follow come back.",
        }
    },
    "additionalProperties": False,
}
INSTRUCTIONS_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "skill": {"type": "string"},
        "task": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "The task given, or null."},
        "instructions": {"type": "string", "description": "The SKILL.md body to follow."},
        "files": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Bundled files, readable as resources skill://<name>/<path>.",
        },
    },
    "required": ["skill", "instructions", "files"],
}


class FolderSkill:
    """A skill defined by a folder; implements the `Skill` protocol."""

    def __init__(
        self,
        root: Path,
        front: FrontMatter,
        contract: SkillContract | None,
        source: SkillSource,
        warnings: list[Problem],
        stamp: tuple[int, ...] | None = None,
        boundary: Path | None = None,
    ) -> None:
        self._root = root
        self.front = front
        self.contract = contract
        self._source: SkillSource = source
        self.warnings = warnings
        self._stamp = stamp if stamp is not None else folder_stamp(root)
        self.boundary = boundary or root
        """The root being served that holds this skill: links inside the skill are followed
        while their target stays within it (a SKILL.md linked to a sibling skill's)."""

    # -- Skill protocol -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.front.name

    @property
    def title(self) -> str | None:
        meta = self.front.metadata or {}
        if "title" in meta:
            return meta["title"]
        if self.contract and self.contract.annotations and "title" in self.contract.annotations:
            return str(self.contract.annotations["title"])
        return None

    @property
    def description(self) -> str:
        return self.front.description

    @property
    def kind(self) -> SkillKind:
        return "instructions" if self.contract is None else self.contract.run.kind

    @property
    def source(self) -> SkillSource:
        return self._source

    @property
    def input_schema(self) -> dict[str, Any]:
        return INSTRUCTIONS_INPUT if self.contract is None else self.contract.inputs

    @property
    def output_schema(self) -> dict[str, Any] | None:
        if self.contract is None:
            return INSTRUCTIONS_OUTPUT
        return self._run_output

    @cached_property
    def _run_output(self) -> dict[str, Any] | None:
        assert self.contract is not None
        return runner_for(self.contract.run.kind).output_schema(self.contract)

    @property
    def annotations(self) -> dict[str, Any] | None:
        if self.contract is None:
            return {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False}
        return self.contract.annotations

    @property
    def root(self) -> Path:
        return self._root

    def runs_apart(self, ctx: SkillContext) -> bool:
        """Whether the call of `ctx` runs its code in another process that gets only the plain
        data of its `ctx` (a synchronous python skill's worker): then the call needs no model
        access, sampling, asker or Catalog, and the server builds none (`mcp_server._calls`)."""
        contract = self.contract
        return contract is not None and runner_for(contract.run.kind).runs_apart(self, contract, ctx)

    @property
    def enabled(self) -> bool:
        return self.contract is None or self.contract.enabled

    @property
    def timeout(self) -> float:
        return 60.0 if self.contract is None else self.contract.timeout

    def body(self) -> str:
        return self._body

    @cached_property
    def _body(self) -> str:
        text = (self._root / "SKILL.md").read_text(encoding="utf-8")
        if text.startswith("---"):
            end = text.find("\n---", 3)
            if end != -1:
                nl = text.find("\n", end + 4)
                text = "" if nl == -1 else text[nl + 1 :]
        return text.strip() + "\n"

    def files(self) -> list[str]:
        return list(self._files)

    @cached_property
    def _files(self) -> list[str]:
        """Every file a client may read, SKILL.md first: not hidden (`is_hidden`), and links only
        where their target stays inside `boundary` (what `read_skill_file` serves, no more)."""
        return _listed(self._root, self.boundary)

    def digest(self) -> str:
        """`sha256:<hex>` over the skill's files as they are now (each listed file's path and bytes).

        What the distributed mode compares: a run records the digest of every skill it calls
        where it starts, and a worker whose copy differs reloads its skills before it runs the
        run (`pipelines.distributed.needs`). The list is read afresh (a file added since loading counts);
        each file's hash is kept while its mtime and size stay the same. A skill whose SKILL.md or
        skill.yaml changed since it was loaded runs its old definition: its digest says so (it
        matches no fresh copy's), so that the process reads it again.
        """
        sha = hashlib.sha256(b"" if self.unchanged() else b"loaded before its definition changed\0")
        for rel in _listed(self._root, self.boundary):
            found = _file_hash(self._root / rel)
            sha.update(f"{rel}\0{found}\0".encode())
        return f"sha256:{sha.hexdigest()}"

    def front_matter(self) -> dict[str, Any]:
        """The SKILL.md front matter as the author wrote it (JSON-compatible), for SEP-2640."""
        from .checks import read_front_matter
        from .yamltext import load_yaml

        data = load_yaml(read_front_matter(self._root / "SKILL.md")[0])
        return json.loads(json.dumps(data if isinstance(data, dict) else {}, default=str))

    @property
    def stamp(self) -> tuple[int, ...]:
        """The folder stamp this skill was loaded from (see `folder_stamp`)."""
        return self._stamp

    def unchanged(self) -> bool:
        """True while SKILL.md and skill.yaml are as they were when loaded."""
        return folder_stamp(self._root) == self._stamp

    async def run(self, arguments: dict[str, Any], ctx: SkillContext) -> Any:
        contract = self.contract
        if contract is None:
            return {
                "skill": self.name,
                "task": arguments.get("task"),
                "instructions": self.body(),
                "files": self.files(),
            }
        return await runner_for(contract.run.kind).run(self, contract, arguments, ctx)


def _listed(root: Path, boundary_dir: Path) -> list[str]:
    """The files of a skill folder, SKILL.md first (see `FolderSkill.files`)."""
    found: list[str] = []
    boundary = boundary_dir.resolve()
    seen: set[tuple[int, int]] = set()
    stack = [(root, "")]
    while stack and len(found) < _MAX_LISTED_FILES:
        folder, prefix = stack.pop()
        try:
            st = folder.stat()
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            continue
        below: list[tuple[Path, str]] = []
        for entry in entries:
            rel = prefix + entry.name
            if is_hidden(entry.name) or (entry.is_symlink() and not within(entry.path, boundary)):
                continue
            try:
                if entry.is_dir():
                    below.append((Path(entry.path), rel + "/"))
                elif entry.is_file():
                    found.append(rel)
            except OSError:
                continue
        stack.extend(reversed(below))
    found.sort(key=lambda p: (p != "SKILL.md", p))
    return found[:_MAX_LISTED_FILES]


_hashes: dict[str, tuple[int, int, str]] = {}
"""File -> (mtime_ns, size, sha256 hex) of the files digested so far (`FolderSkill.digest`)."""
_HASHES_KEPT = 50_000


def _file_hash(path: Path) -> str:
    """The SHA-256 of one file ("" when it cannot be read), from `_hashes` while it is unchanged."""
    key = str(path)
    try:
        st = path.stat()
        cached = _hashes.get(key)
        if cached is not None and cached[:2] == (st.st_mtime_ns, st.st_size):
            return cached[2]
        sha = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                sha.update(chunk)
    except OSError:
        return ""
    if len(_hashes) >= _HASHES_KEPT:
        _hashes.clear()
    _hashes[key] = (st.st_mtime_ns, st.st_size, sha.hexdigest())
    return _hashes[key][2]


def folder_stamp(root: Path) -> tuple[int, ...]:
    """(mtime_ns, size) of SKILL.md and skill.yaml, zeros for a missing file: what a load depends on."""
    out: list[int] = []
    base = str(root)
    for fname in ("/SKILL.md", "/skill.yaml"):
        try:
            st = os.stat(base + fname)
            out += (st.st_mtime_ns, st.st_size)
        except (FileNotFoundError, NotADirectoryError):
            out += (0, 0)
    return tuple(out)


def load_folder(
    root: Path, source: SkillSource, stamp: tuple[int, ...] | None = None, boundary: Path | None = None
) -> FolderSkill:
    """Load one skill folder leniently; raise `DefinitionError` listing every error found."""
    stamp = stamp if stamp is not None else folder_stamp(root)
    front, contract, problems = check_folder(root)
    errors = [p for p in problems if p.severity == "error"]
    if errors or front is None:
        raise DefinitionError(root, problems)
    skill = FolderSkill(root, front, contract, source, problems, stamp, boundary)
    for warning in problems:
        log.warning("%s", warning)
    return skill
