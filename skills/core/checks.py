"""Checking a skill folder against its format (docs/skills.md): every violation, with where and how to fix it.

Lenient mode (what loading uses) reports spec violations that do not stop a skill from working
as warnings; strict mode (`orchestrator skills validate`) reports them as errors. The checks
run on the raw YAML too, so a field error in one place never hides a violation elsewhere.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from ._front import NAME_HINT, check_description, check_metadata, check_name, load_front
from .contract import (
    KNOWN_FRONT_MATTER_KEYS,
    AgentSpec,
    FrontMatter,
    RunSpec,
    SkillContract,
)
from .errors import Problem
from .positions import locate
from .yamltext import MAX_TEXT, YAML, Scalar, YAMLError, describe_yaml_error, load_yaml, read_bounded, read_small

__all__ = ["check_folder", "inside", "load_front", "read_front_matter", "unknown_models"]

_ALLOWED = re.compile(r"^[a-zA-Z0-9_*?\[\]-]{1,64}$")
"""A tool name, or a shell-style pattern of tool names, in an agent's allow-list."""

_ANNOTATION_KEYS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
"""The tool annotations of the MCP specification (ToolAnnotations)."""

_HINTS = {
    "name": NAME_HINT,
    "description": "say what the skill does and when to use it, in 1-1024 characters",
    "compatibility": "keep compatibility under 500 characters",
    "metadata": "metadata is a map of string keys to string values",
    "timeout": "give seconds between 0 and 3600",
    "memory_mb": "give MiB between 16 and 16384",
    "max_output_bytes": "give bytes between 1024 and 64000000",
}


def read_front_matter(path: Path) -> tuple[str, int]:
    """The raw front matter of SKILL.md and the line where the body starts (1-based).

    A small file (most are) is read whole in one system call; the answer is the line reader's,
    which decodes a prefix of the same valid UTF-8. Anything else (a big body, `\r\n` line
    breaks, text that is not UTF-8, no plain `---` line closing) takes the line reader.
    """
    text = read_small(path)
    if text is not None and text.startswith("---\n") and (end := text.find("\n---\n", 3)) != -1:
        front = text[4 : end + 1]
        return front, front.count("\n") + 3
    return _read_front_lines(path)


def _read_front_lines(path: Path) -> tuple[str, int]:
    """`read_front_matter` line by line, stopping at the closing `---`: a big body is not read."""
    with path.open(encoding="utf-8") as fh:
        if fh.readline().strip() != "---":
            raise ValueError("SKILL.md must start with a '---' line opening the YAML front matter")
        lines: list[str] = []
        size = 0
        for number, line in enumerate(fh, start=2):
            if line.rstrip("\r\n") == "---":
                return "".join(lines), number + 1
            lines.append(line)
            size += len(line)
            if size > MAX_TEXT:
                raise ValueError(f"the front matter is longer than {MAX_TEXT:,} characters: keep it short")
    raise ValueError("the front matter is never closed: add a '---' line after it")


def inside(root: Path, rel: str) -> Path | None:
    """`root/rel` if it stays inside `root` once links are followed (a cheap check first)."""
    if not rel.startswith("/") and ".." not in rel.split("/"):
        candidate = root / rel
        if not candidate.is_symlink() and not candidate.parent.is_symlink():
            return candidate
    target = (root / rel).resolve()
    return target if target.is_relative_to(root.resolve()) else None


def _hint(loc: str, kind: str) -> str:
    top = loc.split(".")[0]
    if top in _HINTS:
        return _HINTS[top]
    if kind == "extra_forbidden":
        return "remove the key or check its spelling against docs/skills.md#skillyaml"
    if loc.startswith("run.agent"):
        return (
            "`run.agent` takes skills, max_iterations, max_tokens, max_cost_usd, timeout, model, instructions, "
            "max_output_tokens: see docs/models.md#agent-skills"
        )
    if top == "run":
        return "write e.g. `run: {python: impl:main}`, `run: {script: scripts/run.py}` or `run: {prompt: prompt.md}`"
    if kind == "missing":
        return f"add `{loc}`"
    return "see docs/skills.md#skillyaml for this field"


def _from_validation(path: Path, exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors():
        parts = [str(p) for p in err["loc"] if not str(p).startswith("function-after")]
        loc = ".".join(parts)
        if err["type"] == "extra_forbidden" and parts:
            allowed = _keys_at(parts[:-1])
            close = difflib.get_close_matches(parts[-1], allowed, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else _hint(loc, err["type"])
            if allowed:
                hint += f" (allowed here: {', '.join(allowed)})"
            if close:
                hint += "; see docs/skills.md#skillyaml"
            problems.append(Problem(path, f"unknown key '{parts[-1]}'", field=loc, hint=hint))
            continue
        problems.append(Problem(path, err["msg"], field=loc, hint=_hint(loc, err["type"])))
    return problems


def _keys_at(parts: list[str]) -> list[str]:
    """The keys skill.yaml allows at a place (`[]` the top, `["run"]`, `["run", "agent"]`)."""
    where: dict[tuple[str, ...], type[BaseModel]] = {(): SkillContract, ("run",): RunSpec, ("run", "agent"): AgentSpec}
    model = where.get(tuple(parts))
    return [] if model is None else [f.alias or name for name, f in model.model_fields.items()]


def _placed(problems: list[Problem], path: Path, text: str, line_offset: int = 0) -> list[Problem]:
    """`problems` with the line and column of their field in `text` (the file `path`), when known."""
    if not any(p.path == path and p.field and not p.line for p in problems):
        return problems
    found = locate(text, line_offset)
    if found is None:
        return problems
    placed: list[Problem] = []
    for problem in problems:
        if problem.path == path and problem.field and not problem.line:
            parts = tuple(int(x) if x.isdigit() else x for x in problem.field.split("."))
            line, col = found.at(parts, key=problem.message.startswith("unknown"))
            problem = replace(problem, line=line, col=col)
        placed.append(problem)
    return placed


def _check_front(root: Path, strict: bool) -> tuple[FrontMatter | None, list[Problem]]:
    skill_md = root / "SKILL.md"
    soft = "error" if strict else "warning"
    try:
        raw, _ = read_front_matter(skill_md)
        data = load_front(raw) or {}
        if not isinstance(data, dict):
            raise ValueError("the front matter must be a YAML mapping (key: value lines)")
    except FileNotFoundError:
        return None, [Problem(skill_md, "SKILL.md is missing", hint="every skill folder needs a SKILL.md")]
    except YAMLError as exc:
        message = f"front matter is not valid YAML {describe_yaml_error(exc, line_offset=1)}"
        return None, [Problem(skill_md, message, hint="fix the YAML (quote values that contain ': ' or '[')")]
    except (ValueError, UnicodeDecodeError) as exc:
        return None, [
            Problem(skill_md, str(exc), hint="see docs/skills.md#skillmd-front-matter for the SKILL.md layout")
        ]
    problems = [
        Problem(
            skill_md,
            f"unknown front-matter key '{key}'",
            field=str(key),
            severity=soft,
            hint="the Agent Skills spec allows name, description, license, compatibility, metadata, "
            "allowed-tools; put anything else under metadata",
        )
        for key in sorted(set(data) - KNOWN_FRONT_MATTER_KEYS, key=str)
    ]
    known = {k: v for k, v in data.items() if isinstance(k, str) and k in KNOWN_FRONT_MATTER_KEYS}
    problems += check_metadata(skill_md, known, soft) + check_description(skill_md, known, soft)
    served, name_problems = check_name(root, skill_md, data.get("name"), soft)
    if served is not None:
        known["name"] = served
    front = None
    try:
        front = FrontMatter.model_validate(known)
    except ValidationError as exc:
        problems.extend(_from_validation(skill_md, exc))
    if not any(p.field == "name" for p in problems):
        problems.extend(name_problems)
    return front, _placed(problems, skill_md, raw, line_offset=1)


def _check_contract(
    root: Path, strict: bool, models: Collection[str] | None = None
) -> tuple[SkillContract | None, list[Problem]]:
    path = root / "skill.yaml"
    try:
        text = read_bounded(path)
        data = load_yaml(text)
    except FileNotFoundError:
        return None, []
    except YAMLError as exc:
        return None, [Problem(path, f"not valid YAML {describe_yaml_error(exc)}", hint="fix the YAML")]
    except UnicodeDecodeError as exc:
        return None, [Problem(path, f"not UTF-8 text: {exc}", hint="save skill.yaml as UTF-8")]
    if not isinstance(data, dict):
        return None, [Problem(path, "skill.yaml must be a YAML mapping", hint="see docs/skills.md#skillyaml")]
    contract = None
    problems: list[Problem] = []
    try:
        contract = SkillContract.model_validate(data)
    except ValidationError as exc:
        problems.extend(_from_validation(path, exc))
    problems.extend(_check_schemas(path, data, strict))
    problems.extend(_check_annotations(path, data.get("annotations")))
    problems.extend(_check_run(root, path, data, strict))
    if models is not None:
        problems.extend(_check_models(path, data, models))
    return contract, _placed(problems, path, text)


def _check_schemas(path: Path, data: dict[Scalar, YAML], strict: bool) -> list[Problem]:
    problems: list[Problem] = []
    for key in ("inputs", "outputs"):
        schema = data.get(key)
        if schema is None or not isinstance(schema, dict):
            continue  # absent is fine; a non-mapping is the model's own error
        if schema.get("type") != "object":
            message, hint = f"{key} must be a JSON Schema with type: object", f"start {key} with `type: object`"
            problems.append(Problem(path, message, field=key, hint=hint))
            continue
        problems.extend(_check_required(path, key, schema))
        if strict:  # the meta-schema check costs ~1 ms a skill: `validate` does it, loading does not
            from .schema import schema_problem

            # a key that is not a string is a meta-schema problem like any other: jsonschema judges it
            if message := schema_problem(cast(dict[str, Any], schema)):
                problems.append(
                    Problem(path, f"{key} is not a valid JSON Schema: {message}", field=key, hint="see json-schema.org")
                )
    return problems


def _check_required(path: Path, key: str, schema: dict[Scalar, YAML]) -> list[Problem]:
    """Each name in `required` that `properties` does not declare: no client that builds its
    arguments from the schema ever sends it, so every call would be refused (a typo, mostly).
    Names other properties may match (`patternProperties`, a schema for the others) are allowed."""
    required, properties = schema.get("required"), schema.get("properties")
    if not isinstance(required, list) or "patternProperties" in schema:
        return []
    if isinstance(schema.get("additionalProperties"), dict):
        return []
    declared = [str(k) for k in properties] if isinstance(properties, dict) else []
    problems: list[Problem] = []
    for index, name in enumerate(required):
        if not isinstance(name, str) or name in declared:
            continue  # a name that is not a string is the meta-schema's error (`validate`)
        close = difflib.get_close_matches(name, declared, n=1, cutoff=0.6)
        listed = f" (properties: {', '.join(declared)})" if declared else ""
        if close:
            hint = f"did you mean '{close[0]}'?{listed}"
        else:
            hint = f"declare '{name}' under {key}.properties, or remove it from required{listed}"
        message = f"{key}.required names '{name}', which {key}.properties does not declare"
        problems.append(Problem(path, message, field=f"{key}.required.{index}", hint=hint))
    return problems


def _check_annotations(path: Path, annotations: YAML) -> list[Problem]:
    """MCP tool annotations: the known hints only (a misspelt one would silently mean nothing), each a boolean."""
    if not isinstance(annotations, dict):
        return []  # absent; a non-mapping is the model's own error
    problems: list[Problem] = []
    for key, value in annotations.items():
        name = str(key)
        field = f"annotations.{name}"
        if name not in _ANNOTATION_KEYS:
            close = difflib.get_close_matches(name, list(_ANNOTATION_KEYS), n=1, cutoff=0.6)
            known = ", ".join(_ANNOTATION_KEYS)
            hint = f"did you mean '{close[0]}'? (known: {known})" if close else f"MCP tool annotations are {known}"
            problems.append(Problem(path, f"unknown annotation '{name}'", field=field, hint=hint))
        elif name == "title" and not isinstance(value, str):
            problems.append(Problem(path, "annotations.title must be a string", field=field, hint="quote the title"))
        elif name != "title" and not isinstance(value, bool):
            message = f"annotation '{name}' must be true or false"
            problems.append(Problem(path, message, field=field, hint=f"write `{name}: true` or `{name}: false`"))
    return problems


def _check_run(root: Path, path: Path, data: dict[Scalar, YAML], strict: bool) -> list[Problem]:
    run = data.get("run")
    problems: list[Problem] = []
    if not isinstance(run, dict):
        return problems
    python, script, prompt = run.get("python"), run.get("script"), run.get("prompt")
    if isinstance(python, str) and ":" not in python:
        message = f"run.python '{python}' must be 'module:function'"
        problems.append(
            Problem(path, message, field="run.python", hint="e.g. `python: impl:main` for main() in impl.py")
        )
        return problems
    agent = run.get("agent")
    if isinstance(agent, dict):
        problems.extend(_check_agent(root, path, agent))
    if isinstance(python, str):
        target: YAML = python.partition(":")[0].replace(".", "/") + ".py"
        what = "implementation"
    elif script:
        target, what = script, "implementation"
    else:
        target, what = prompt, "prompt template"
    if not isinstance(target, str) or not target:
        return problems
    found = inside(root, target)
    field = "run.prompt" if what == "prompt template" else "run"
    if found is None:
        message, hint = f"'{target}' is outside the skill folder", f"keep {what} files inside the skill folder"
        problems.append(Problem(path, message, field=field, hint=hint))
    elif not found.is_file():
        problems.append(
            Problem(path, f"'{target}' does not exist", field=field, hint=f"create {target} in the skill folder")
        )
    elif strict and isinstance(python, str):  # parsing every module costs start-up time: `validate` does it
        from ._entry import check_entry

        problems.extend(check_entry(found, python.partition(":")[2], path, python))
    return problems


def _check_agent(root: Path, path: Path, agent: dict[Scalar, YAML]) -> list[Problem]:
    names = agent.get("skills")
    if not isinstance(names, list):
        return []  # wrong type: the model's own error says so
    problems: list[Problem] = []
    for index, name in enumerate(names):
        if not isinstance(name, str):
            continue
        if name == root.name:
            message, hint = "an agent cannot call itself", "remove the skill's own name from run.agent.skills"
        elif not _ALLOWED.match(name):
            message = f"'{name}' is not a skill name or pattern"
            hint = "list Catalog names (letters, digits, '_', '-'), or patterns such as `git_*`"
        else:
            continue
        problems.append(Problem(path, message, field=f"run.agent.skills.{index}", hint=hint))
    return problems


def _check_models(path: Path, data: dict[Scalar, YAML], models: Collection[str]) -> list[Problem]:
    run = data.get("run")
    agent = run.get("agent") if isinstance(run, dict) else None
    wanted = [("model", data.get("model"))]
    if isinstance(agent, dict):
        wanted.append(("run.agent.model", agent.get("model")))
    problems: list[Problem] = []
    for field, model in wanted:
        if not isinstance(model, str) or model in models:
            continue
        close = difflib.get_close_matches(model, list(models), n=1, cutoff=0.6)
        known = ", ".join(sorted(models)[:10]) or "none are configured"
        hint = f"did you mean '{close[0]}'?" if close else f"known models: {known} (models/registry.yaml)"
        problems.append(Problem(path, f"unknown model '{model}'", field=field, hint=hint))
    return problems


def unknown_models(skills: Iterable[Any], models: Collection[str]) -> list[Problem]:
    """Warnings for loaded skills whose skill.yaml names a model the registry does not know.

    Loading reads no registry; the server checks once it has one (`create_server`), so a typo in
    `model:` is said at start-up and in `skills show`, not first at call time. The warnings are
    added to each skill's own.
    """
    found: list[Problem] = []
    for skill in skills:
        contract, root = getattr(skill, "contract", None), getattr(skill, "root", None)
        if contract is None or root is None:
            continue
        problems = _check_models(root / "skill.yaml", contract.model_dump(exclude_none=True), models)
        warnings = [replace(p, severity="warning") for p in problems]
        skill.warnings = [*skill.warnings, *(w for w in warnings if w not in skill.warnings)]
        found += warnings
    return found


def check_folder(
    root: Path, *, strict: bool = False, models: Collection[str] | None = None
) -> tuple[FrontMatter | None, SkillContract | None, list[Problem]]:
    """Read and check one skill folder; every violation found is returned, none raised.

    `models` (every role and id the model registry knows) enables the check of `model:`;
    without it the model names are not judged (loading does not need the registry).
    """
    front, problems = _check_front(root, strict)
    # A broken SKILL.md does not hide the mistakes of skill.yaml: every error of the folder at once.
    contract, contract_problems = _check_contract(root, strict, models)
    return front, contract, problems + contract_problems
