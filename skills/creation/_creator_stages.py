"""The model stages of skill creation (ROMA's four: atomize, plan, execute, aggregate) and review.

Each stage is one focused model call (one per part when the skill is split) whose JSON answer
is validated here; an invalid answer is sent back with the reason (`ask_json`'s bounded
re-ask). What the answers must satisfy is checked as early as possible: a plan whose test
cases do not fit its own input schema, or a script that does not compile, is re-asked at once
instead of failing later.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..core.contract import NAME_PATTERN
from ..core.errors import SkillsError
from ..core.models import ModelAccess
from ..core.schema import check_arguments, schema_problem
from . import _creator_prompts as prompts
from ._creator_ask import ask_json
from ._creator_tests import TestCase

__all__ = ["Atomized", "Parts", "SkillPlan", "Verdict", "Written", "atomize", "plan", "review", "write"]

_MAX_SUBTASKS = 5
_MAX_TESTS = 10
_MAX_SHOWN = 20_000  # characters of one file shown to the reviewer


class Subtask(BaseModel):
    """One part of a complex skill: a function in its own module."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    description: str = ""


class Atomized(BaseModel):
    """Stage 1: simple (one function) or complex (2-5 parts)."""

    model_config = ConfigDict(extra="ignore")

    complexity: Literal["simple", "complex"]
    reason: str = ""
    subtasks: list[Subtask] = Field(default_factory=lambda: [])

    @model_validator(mode="after")
    def _parts(self) -> Atomized:
        if self.complexity == "simple":
            self.subtasks = []
        elif not 2 <= len(self.subtasks) <= _MAX_SUBTASKS:
            raise ValueError(f"a complex skill needs 2 to {_MAX_SUBTASKS} subtasks (or answer simple)")
        elif len({s.name for s in self.subtasks}) != len(self.subtasks):
            raise ValueError("subtask names must be unique")
        return self


class SkillPlan(BaseModel):
    """Stage 2: the contract of the skill."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=64)
    title: str = ""
    description: str = Field(min_length=1, max_length=1024)
    inputs: dict[str, Any]
    outputs: dict[str, Any] | None = None
    approach: str = ""
    timeout: float = Field(default=30, ge=1, le=300)
    test_cases: list[TestCase] = Field(default_factory=lambda: [], max_length=_MAX_TESTS)

    def contract(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputs": self.inputs, "outputs": self.outputs}


class Written(BaseModel):
    """Execute (simple) or aggregate (complex): the entry script and the SKILL.md body."""

    model_config = ConfigDict(extra="ignore")

    script: str = Field(min_length=1)
    body: str = ""

    @field_validator("script")
    @classmethod
    def _compiles(cls, source: str) -> str:
        return _compiled(source, "scripts/run.py")


class Part(BaseModel):
    """Execute (complex): one part module."""

    model_config = ConfigDict(extra="ignore")

    code: str = Field(min_length=1)
    signature: str = ""
    summary: str = ""


Parts = dict[str, Part]
"""Module name (part_<subtask>) -> its written part."""


class Verdict(BaseModel):
    """The reviewer's decision."""

    model_config = ConfigDict(extra="ignore")

    approved: bool
    reasons: list[str] = Field(default_factory=list)

    @field_validator("reasons", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


def _compiled(source: str, filename: str) -> str:
    try:
        compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ValueError(f"{filename} does not compile: line {exc.lineno}: {exc.msg}") from None
    return source


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "\n... (cut)"


def _show(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False)


# -- stage 1 ----------------------------------------------------------------------------------------
async def atomize(access: ModelAccess, request: str, context: str) -> Atomized:
    prompt = f"Requested skill: {request}" + (f"\n\nContext: {context}" if context else "")
    return await ask_json(
        access, prompt, Atomized.model_validate, system=prompts.ATOMIZE, model="validation", stage="atomize"
    )


# -- stage 2 ----------------------------------------------------------------------------------------
async def plan(
    access: ModelAccess,
    request: str,
    context: str,
    atoms: Atomized,
    *,
    name: str | None,
    given_tests: list[TestCase],
    taken: Callable[[str], str | None],
) -> SkillPlan:
    """The contract; `taken(name)` says why a name cannot be used (or None)."""
    lines = [f"Requested skill: {request}"]
    if context:
        lines.append(f"Context: {context}")
    if name:
        lines.append(f'The skill must be named "{name}".')
    if atoms.subtasks:
        lines.append(
            "It is built from these parts:\n" + "\n".join(f"- {s.name}: {s.description}" for s in atoms.subtasks)
        )
    if given_tests:
        tests = _show([t.as_json() for t in given_tests])
        lines.append(f"These test cases are given (design the contract so they pass; write no others):\n{tests}")

    def validate(data: Any) -> SkillPlan:
        if isinstance(data, dict) and name:
            data["name"] = name
        result = SkillPlan.model_validate(data)
        if not NAME_PATTERN.match(result.name):
            raise ValueError(f"name '{result.name}' must be lowercase letters, digits and single hyphens")
        if not name and (why := taken(result.name)):
            raise ValueError(f"the name '{result.name}' cannot be used: {why}; choose another")
        for key, schema in (("inputs", result.inputs), ("outputs", result.outputs)):
            if schema is None:
                continue
            if schema.get("type") != "object":
                raise ValueError(f"{key} must be a JSON Schema with type: object")
            if problem := schema_problem(schema):
                raise ValueError(f"{key} is not a valid JSON Schema: {problem}")
        if given_tests:
            result.test_cases = list(given_tests)
        elif not result.test_cases:
            raise ValueError("write 2 to 6 test_cases")
        for number, case in enumerate(result.test_cases, start=1):
            if case.error:
                continue
            try:
                check_arguments(result.name, result.inputs, case.arguments)
            except SkillsError as exc:
                raise ValueError(f"test case {number} does not fit inputs: {exc}") from None
        return result

    return await ask_json(
        access, "\n\n".join(lines), validate, system=prompts.PLAN, model="orchestrator", stage="plan", max_tokens=4096
    )


# -- stages 3 and 4 ---------------------------------------------------------------------------------
def _brief(request: str, skill: SkillPlan) -> str:
    tests = _show([t.as_json() for t in skill.test_cases])
    return (
        f"Requested skill: {request}\n\nContract:\n{_show(skill.contract())}\n\n"
        f"Approach: {skill.approach or '(yours to choose)'}\n\nTest cases it must pass:\n{tests}"
    )


async def write(access: ModelAccess, request: str, skill: SkillPlan) -> Written:
    """Execute, simple skill: the whole entry script and the body in one answer."""
    return await ask_json(
        access,
        _brief(request, skill),
        Written.model_validate,
        system=prompts.EXECUTE_SIMPLE,
        model="orchestrator",
        stage="execute",
        max_tokens=8192,
    )


async def write_part(access: ModelAccess, request: str, skill: SkillPlan, atoms: Atomized, index: int) -> Part:
    """Execute, complex skill: one part module defining the subtask's function."""
    sub = atoms.subtasks[index]
    others = "\n".join(f"- {s.name}: {s.description}" for s in atoms.subtasks if s is not sub)
    prompt = (
        f"{_brief(request, skill)}\n\nThe other parts (written separately):\n{others}\n\n"
        f"Write the module part_{sub.name}.py defining the function `{sub.name}`: {sub.description}"
    )

    def validate(data: Any) -> Part:
        part = Part.model_validate(data)
        _compiled(part.code, f"scripts/part_{sub.name}.py")
        tree = ast.parse(part.code)
        if not any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == sub.name for n in tree.body):
            raise ValueError(f"the module must define a top-level function named {sub.name}")
        return part

    return await ask_json(
        access, prompt, validate, system=prompts.EXECUTE_PART, model="orchestrator", stage="execute", max_tokens=8192
    )


async def aggregate(access: ModelAccess, request: str, skill: SkillPlan, parts: Parts) -> Written:
    """Aggregate, complex skill: the entry script calling the parts, and the body."""
    listing = "\n\n".join(
        f"Module {module}.py: {part.signature or '(see code)'} - {part.summary}\n```python\n{part.code}\n```"
        for module, part in parts.items()
    )
    return await ask_json(
        access,
        f"{_brief(request, skill)}\n\nThe parts:\n\n{listing}",
        Written.model_validate,
        system=prompts.AGGREGATE,
        model="orchestrator",
        stage="aggregate",
        max_tokens=8192,
    )


# -- review ------------------------------------------------------------------------------------------
async def review(access: ModelAccess, request: str, files: dict[str, str]) -> Verdict:
    shown = "\n\n".join(f"### {path}\n```\n{_cut(text)}\n```" for path, text in files.items())
    prompt = f"Requested skill: {request}\n\nThe skill's files:\n\n{shown}"
    return await ask_json(
        access, prompt, Verdict.model_validate, system=prompts.REVIEW, model="review", stage="review", max_tokens=2048
    )
