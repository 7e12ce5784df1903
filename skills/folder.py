"""Agent Skills folders: SKILL.md (+ skill.yaml) loaded as Skills.

Start-up reads only the front matter and skill.yaml of each folder (progressive disclosure);
the body and the list of bundled files are read when first asked for.
"""

from __future__ import annotations

import json
import logging
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import anyio

from .base import SkillContext, SkillKind, SkillSource
from .checks import check_folder, inside
from .contract import FrontMatter, SkillContract
from .discovery import is_hidden, within
from .errors import DefinitionError, Problem, SkillRunError

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
        if self.contract.run.agent is not None:
            return self._agent_output
        return self.contract.outputs

    @cached_property
    def _agent_output(self) -> dict[str, Any]:
        from ._agent import agent_output_schema

        assert self.contract is not None
        return agent_output_schema(self.contract.outputs)

    @property
    def annotations(self) -> dict[str, Any] | None:
        if self.contract is None:
            return {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False}
        return self.contract.annotations

    @property
    def root(self) -> Path:
        return self._root

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
        found: list[str] = []
        boundary = self.boundary.resolve()
        seen: set[tuple[int, int]] = set()
        stack = [(self._root, "")]
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

    def front_matter(self) -> dict[str, Any]:
        """The SKILL.md front matter as the author wrote it (JSON-compatible), for SEP-2640."""
        from ._yaml import load_yaml
        from .checks import read_front_matter

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
        run = contract.run
        if run.python:
            from ._python import run_python

            # Built-ins that start processes (run-tests, shell-command) confine them with the
            # network their own skill.yaml allows (a plain value: it reaches a worker process too).
            ctx.limits = {**ctx.limits, "network": contract.network}
            return await run_python(self._root, run.python, self.name, arguments, ctx, contract.timeout)
        if run.script:
            from ._script import run_script

            program = inside(self._root, run.script)
            if program is None:
                raise SkillRunError(f"'{self.name}': run.script points outside the skill folder")
            from .isolation import isolation_of

            return await run_script(
                program,
                arguments,
                skill=self.name,
                workdir=ctx.artifacts(),
                timeout=contract.timeout,
                memory_mb=contract.memory_mb,
                max_output_bytes=contract.max_output_bytes,
                env_allow=contract.env,
                log=ctx.log,
                folder=self._root,
                network=contract.network,
                isolation=await anyio.to_thread.run_sync(isolation_of, ctx.extras),
            )
        if run.agent is not None:
            from ._agent import run_agent

            return await run_agent(self, contract, arguments, ctx)
        from ._prompt import run_prompt

        template = inside(self._root, run.prompt or "")
        if template is None or not template.is_file():
            raise SkillRunError(
                f"'{self.name}': its prompt template '{run.prompt}' is missing or outside the skill folder",
                hint="create the template inside the skill folder",
            )
        return await run_prompt(self, contract, template, arguments, ctx)


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
