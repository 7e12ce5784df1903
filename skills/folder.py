"""Agent Skills folders: SKILL.md (+ skill.yaml) loaded as Skills.

Start-up reads only the front matter and skill.yaml of each folder (progressive disclosure);
the body and the list of bundled files are read when first asked for.
"""

from __future__ import annotations

import logging
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError

from ._yaml import YAMLError, describe_yaml_error, load_yaml
from .base import SkillContext, SkillKind, SkillSource
from .contract import KNOWN_FRONT_MATTER_KEYS, NAME_PATTERN, FrontMatter, SkillContract
from .errors import DefinitionError, NeedsModelError, Problem, SkillRunError, SkillsError, SkillTimeoutError

__all__ = ["INSTRUCTIONS_INPUT", "INSTRUCTIONS_OUTPUT", "FolderSkill", "check_folder", "folder_stamp", "load_folder"]

log = logging.getLogger("skills.loader")

TOOL_NAME_MAX = 64
_MAX_LISTED_FILES = 500
_SKIP_DIRS = {"__pycache__", ".git", ".venv", "node_modules"}

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
        "task": {"type": ["string", "null"]},
        "instructions": {"type": "string", "description": "The SKILL.md body to follow."},
        "files": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Bundled files, readable as resources skill://<name>/<path>.",
        },
    },
    "required": ["skill", "instructions", "files"],
}


def _read_front_matter(path: Path) -> tuple[str, int]:
    """The raw front matter text of SKILL.md and the line where the body starts (1-based).

    Reads line by line and stops at the closing `---`: the body is not read at start-up.
    """
    with path.open(encoding="utf-8") as fh:
        first = fh.readline()
        if first.strip() != "---":
            raise ValueError("SKILL.md must start with a '---' line opening the YAML front matter")
        lines: list[str] = []
        for number, line in enumerate(fh, start=2):
            if line.rstrip("\r\n") == "---":
                return "".join(lines), number + 1
            lines.append(line)
    raise ValueError("the front matter is never closed: add a '---' line after it")


def _problems_from_validation(path: Path, exc: ValidationError, prefix: str = "") -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        problems.append(Problem(path, err["msg"], field=f"{prefix}{loc}", hint=_hint_for(loc, err["type"])))
    return problems


def _hint_for(loc: str, kind: str) -> str:
    if loc == "name":
        return "use 1-64 lowercase letters, digits and single hyphens, equal to the folder name"
    if loc == "description":
        return "say what the skill does and when to use it, in 1-1024 characters"
    if kind == "extra_forbidden":
        return "remove the key or check its spelling against SPEC section 3"
    if loc.startswith("run"):
        return "write e.g. `run: {python: impl:main}` or `run: {script: scripts/run.py}`"
    if loc == "compatibility":
        return "keep compatibility under 500 characters"
    return ""


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
    ) -> None:
        self._root = root
        self.front = front
        self.contract = contract
        self._source: SkillSource = source
        self.warnings = warnings
        self._stamp = stamp if stamp is not None else folder_stamp(root)

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
        return INSTRUCTIONS_OUTPUT if self.contract is None else self.contract.outputs

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
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self._root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            for fname in sorted(filenames):
                if fname.startswith(".") or fname.endswith(".pyc"):
                    continue
                rel = Path(dirpath, fname).relative_to(self._root).as_posix()
                found.append(rel)
                if len(found) >= _MAX_LISTED_FILES:
                    break
        found.sort(key=lambda p: (p != "SKILL.md", p))
        return found

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
            from ._python import load_entry

            entry = load_entry(self._root, run.python, self.name)
            try:
                with anyio.fail_after(contract.timeout):
                    return await entry.call(arguments, ctx)
            except TimeoutError:
                raise SkillTimeoutError(
                    f"'{self.name}' did not finish within {contract.timeout:g}s and was stopped",
                    hint="raise `timeout:` in skill.yaml or give the skill less work",
                ) from None
            except SkillsError:
                raise
            except Exception as exc:  # the skill's own bug: logged in full here, reported cleanly
                log.exception("skill %s raised", self.name)
                raise SkillRunError(
                    f"'{self.name}' failed: {type(exc).__name__}: {exc}",
                    hint="see the server log for the traceback",
                ) from exc
        if run.script:
            from ._script import run_script

            program = _inside(self._root, run.script)
            if program is None:
                raise SkillRunError(f"'{self.name}': run.script points outside the skill folder")
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
            )
        raise SkillRunError(f"'{self.name}' is a prompt skill and needs a model provider")


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


def _inside(root: Path, rel: str) -> Path | None:
    """`root/rel` if it stays inside `root` once links are followed (a cheap check first)."""
    if not rel.startswith("/") and ".." not in rel.split("/"):
        candidate = root / rel
        if not candidate.is_symlink() and not candidate.parent.is_symlink():
            return candidate
    target = (root / rel).resolve()
    return target if target.is_relative_to(root.resolve()) else None


def check_folder(root: Path, *, strict: bool = False) -> tuple[FrontMatter | None, SkillContract | None, list[Problem]]:
    """Read and check one skill folder; every violation found is returned, none raised.

    Lenient mode (loading) turns spec violations that do not stop the skill from working into
    warnings; strict mode (`orchestrator skills validate`) reports them as errors.
    """
    problems: list[Problem] = []
    soft = "error" if strict else "warning"
    skill_md = root / "SKILL.md"
    front: FrontMatter | None = None
    try:
        raw, _ = _read_front_matter(skill_md)
        data = load_yaml(raw) or {}
        if not isinstance(data, dict):
            raise ValueError("the front matter must be a YAML mapping (key: value lines)")
    except FileNotFoundError:
        return None, None, [Problem(skill_md, "SKILL.md is missing", hint="every skill folder needs a SKILL.md")]
    except YAMLError as exc:
        message = f"front matter is not valid YAML {describe_yaml_error(exc, line_offset=1)}"
        return None, None, [Problem(skill_md, message, hint="fix the YAML (quote values that contain ': ' or '[')")]
    except (ValueError, UnicodeDecodeError) as exc:
        return None, None, [Problem(skill_md, str(exc), hint="see SPEC section 3 for the SKILL.md layout")]

    for key in sorted(set(data) - KNOWN_FRONT_MATTER_KEYS):
        problems.append(
            Problem(
                skill_md,
                f"unknown front-matter key '{key}'",
                field=key,
                severity=soft,
                hint="the Agent Skills spec allows name, description, license, compatibility, "
                "metadata, allowed-tools; put anything else under metadata",
            )
        )
    known = {k: v for k, v in data.items() if k in KNOWN_FRONT_MATTER_KEYS}
    if isinstance(known.get("metadata"), dict):
        known["metadata"] = {str(k): v if isinstance(v, str) else str(v) for k, v in known["metadata"].items()}
    try:
        front = FrontMatter.model_validate(known)
    except ValidationError as exc:
        problems.extend(_problems_from_validation(skill_md, exc))
    if front is not None:
        if not NAME_PATTERN.match(front.name):
            problems.append(
                Problem(
                    skill_md,
                    f"name '{front.name}' is not lowercase-hyphen form",
                    field="name",
                    severity=soft,
                    hint=_hint_for("name", ""),
                )
            )
            if not all(c.isalnum() or c in "-_" for c in front.name) or not front.name.isascii():
                problems[-1] = Problem(
                    skill_md, f"name '{front.name}' cannot be a tool name", field="name", hint=_hint_for("name", "")
                )
        if front.name != root.name:
            problems.append(
                Problem(
                    skill_md,
                    f"name '{front.name}' differs from the folder name '{root.name}'",
                    field="name",
                    severity=soft,
                    hint="rename the folder or the skill",
                )
            )

    contract: SkillContract | None = None
    contract_path = root / "skill.yaml"
    if contract_path.exists():
        try:
            cdata = load_yaml(contract_path.read_text(encoding="utf-8"))
            if not isinstance(cdata, dict):
                raise ValueError("skill.yaml must be a YAML mapping")
            contract = SkillContract.model_validate(cdata)
        except YAMLError as exc:
            problems.append(Problem(contract_path, f"not valid YAML {describe_yaml_error(exc)}", hint="fix the YAML"))
        except ValidationError as exc:
            problems.extend(_problems_from_validation(contract_path, exc))
        except ValueError as exc:
            problems.append(Problem(contract_path, str(exc), hint="see SPEC section 3 for skill.yaml"))
        if contract is not None:
            problems.extend(_check_contract(root, contract_path, contract, strict=strict))
    return front, contract, problems


def _check_contract(root: Path, path: Path, contract: SkillContract, *, strict: bool) -> list[Problem]:
    problems = []
    for key in ("inputs", "outputs"):
        schema = getattr(contract, key)
        if schema is None:
            continue
        if schema.get("type") != "object":
            problems.append(
                Problem(
                    path,
                    f"{key} must be a JSON Schema with type: object",
                    field=key,
                    hint=f"start {key} with `type: object` and list `properties`",
                )
            )
            continue
        if not strict:  # the full meta-schema check costs ~1 ms a skill: `validate` does it
            continue
        from ._schema import schema_problem

        message = schema_problem(schema)
        if message:
            problems.append(
                Problem(
                    path,
                    f"{key} is not a valid JSON Schema: {message}",
                    field=key,
                    hint="check it against JSON Schema draft 2020-12",
                )
            )
    run = contract.run
    if run.prompt or contract.model:
        problems.append(
            Problem(
                path,
                "prompt skills and `model:` need a model provider, which this server does not have yet",
                field="run.prompt" if run.prompt else "model",
                hint="use run: python or run: script, or wait for model support",
            )
        )
    target = run.python.partition(":")[0].replace(".", "/") + ".py" if run.python else run.script
    if run.python and ":" not in run.python:
        problems.append(
            Problem(
                path,
                f"run.python '{run.python}' must be 'module:function'",
                field="run.python",
                hint="e.g. `python: impl:main` for main() in impl.py",
            )
        )
    elif target:
        inside = _inside(root, target)
        if inside is None:
            problems.append(
                Problem(
                    path,
                    f"'{target}' is outside the skill folder",
                    field="run",
                    hint="keep implementation files inside the skill folder",
                )
            )
        elif not inside.is_file():
            problems.append(
                Problem(
                    path,
                    f"'{target}' does not exist",
                    field="run",
                    hint=f"create {target} in the skill folder or fix the path",
                )
            )
    return problems


def load_folder(root: Path, source: SkillSource, stamp: tuple[int, ...] | None = None) -> FolderSkill:
    """Load one skill folder leniently; raise `DefinitionError` listing every error found."""
    stamp = stamp if stamp is not None else folder_stamp(root)
    front, contract, problems = check_folder(root)
    errors = [p for p in problems if p.severity == "error"]
    if errors or front is None:
        if any(p.field in ("run.prompt", "model") for p in errors):
            raise NeedsModelError(root, problems)
        raise DefinitionError(root, problems)
    skill = FolderSkill(root, front, contract, source, problems, stamp)
    for warning in problems:
        log.warning("%s", warning)
    return skill
