"""From YAML text to a `PipelineSpec`: syntax and schema errors, all at once, with positions."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from skills.core.yamltext import read_bounded

from ..errors import Issue, VerificationError
from .limits import RunLimits
from .spec import AgentSpec, ElifBranch, ForSpec, IfSpec, PipelineSpec, RetrySpec, StepSpec, WhileSpec
from .yamlmap import Path_, SourceMap, load_with_positions

__all__ = ["load_spec", "load_spec_file"]

_MODELS_BY_KEY: dict[str, type[BaseModel]] = {
    "for": ForSpec,
    "while": WhileSpec,
    "if": IfSpec,
    "retry": RetrySpec,
    "agent": AgentSpec,
    "limits": RunLimits,
}


def load_spec_file(path: Path) -> tuple[PipelineSpec, SourceMap]:
    """Read and parse a pipeline file (see `load_spec`)."""
    try:
        text = read_bounded(path)
    except (OSError, UnicodeDecodeError) as exc:
        issue = Issue(str(path), 1, 1, f"cannot read the pipeline file: {exc}", "check the path and that it is UTF-8")
        raise VerificationError(f"cannot read {path}", issues=[issue]) from None
    return load_spec(text, str(path))


def load_spec(text: str, file: str = "<pipeline>") -> tuple[PipelineSpec, SourceMap]:
    """Parse and schema-check a pipeline; raise `VerificationError` with every issue found."""
    data, smap = load_with_positions(text, file)
    issues = [
        smap.issue(path, f"duplicate key '{path[-1]}'", "YAML keeps only the last one; remove or rename one", key=True)
        for path, _ in smap.duplicates
    ]
    if not isinstance(data, dict):
        issues.append(
            smap.issue((), "a pipeline is a YAML mapping with id, steps, ...", "see docs/pipelines.md#file-layout")
        )
        raise VerificationError("the pipeline is not a mapping", issues=issues)
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as exc:
        issues.extend(_issues_of(exc, data, smap))
        issues.sort(key=lambda i: (i.line, i.col))
        error = VerificationError(f"{len(issues)} problem(s) in the pipeline", issues=issues)
        partial = _without_bad_values(cast("dict[str, Any]", data), exc)
        if partial is not None:
            _assign_paths(partial.steps, ("steps",))
            error.partial = (partial, smap)
        raise error from None
    if issues:
        raise VerificationError(f"{len(issues)} problem(s) in the pipeline", issues=issues)
    _assign_paths(spec.steps, ("steps",))
    return spec, smap


def _without_bad_values(data: dict[str, Any], exc: ValidationError) -> PipelineSpec | None:
    """The pipeline with every key the schema refused taken out, when that leaves a valid one.

    Verification then checks the rest (names, skills, models, arguments) too, so that a
    `max_parallel: four` does not hide an undefined variable three steps further: every mistake
    is reported at once. A refused value that is required (or an item of a list) cannot be taken
    out; then only the schema's issues are reported.
    """
    import copy

    data = copy.deepcopy(data)
    for _ in range(5):
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "list["))))
            if err["type"] == "missing" or not loc or isinstance(loc[-1], int):
                return None
            parent: Any = data
            for part in loc[:-1]:
                try:
                    parent = parent[part]
                except (KeyError, IndexError, TypeError):
                    return None
            if not isinstance(parent, dict) or loc[-1] not in parent:
                return None
            del parent[loc[-1]]
        try:
            return PipelineSpec.model_validate(data)
        except ValidationError as again:
            exc = again
    return None


def _assign_paths(steps: list[StepSpec], base: Path_) -> None:
    for index, step in enumerate(steps):
        step.path = (*base, index)
        if step.if_ is not None:
            _assign_paths(step.if_.then, (*step.path, "if", "then"))
            for k, branch in enumerate(step.elif_):
                _assign_paths(branch.then, (*step.path, "elif", k, "then"))
            if step.else_ is not None:
                _assign_paths(step.else_, (*step.path, "else"))
        if step.steps:
            _assign_paths(step.steps, (*step.path, "steps"))


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Which model validates the mapping at `loc` (for "did you mean" on unknown keys)."""
    model: type[BaseModel] | None = PipelineSpec
    for part in loc:
        if isinstance(part, int):
            continue
        if part in ("steps", "then", "else"):
            model = StepSpec
        elif part == "elif":
            model = ElifBranch
        elif part in _MODELS_BY_KEY:
            model = _MODELS_BY_KEY[part]
        else:
            return None
    return model


def _keys_of(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _issues_of(exc: ValidationError, data: Any, smap: SourceMap) -> list[Issue]:
    issues: list[Issue] = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "list["))))
        kind, message = err["type"], err["msg"]
        if kind == "extra_forbidden":
            key = str(loc[-1])
            model = _model_at(loc[:-1])
            close = difflib.get_close_matches(key, _keys_of(model), n=1, cutoff=0.5) if model else []
            hint = f"did you mean '{close[0]}'?" if close else "remove it"
            if model is not None:
                hint += f" (allowed here: {', '.join(_keys_of(model))})"
            issues.append(smap.issue(loc, f"unknown key '{key}'", hint, key=True, code="unknown-key"))
        elif kind == "missing":
            where = ".".join(str(p) for p in loc[:-1]) or "the pipeline"
            issues.append(
                smap.issue(
                    loc[:-1], f"missing required key '{loc[-1]}' in {where}", f"add `{loc[-1]}:`", code="missing"
                )
            )
        else:
            message = message.removeprefix("Value error, ")
            where = ".".join(str(p) for p in loc)
            issues.append(smap.issue(loc, f"{where}: {message}" if where else message, _hint(loc), code="schema"))
    return issues


def _hint(loc: tuple[Any, ...]) -> str:
    last = str(loc[-1]) if loc else ""
    return {
        "id": "ids are names usable in expressions: letters, digits and _",
        "steps": "steps is a list of steps, each with an id",
        "max_iterations": "a positive whole number",
        "max_parallel": "a positive whole number up to 1000",
        "on_error": "fail or continue",
        "timeout": "seconds, a positive number",
        "condition": 'an expression such as "{{ files.count > 0 }}", or true/false',
        "state": "a mapping of variable names (letters, digits, _) to values or expressions",
    }.get(last, "see docs/pipelines.md for the syntax")
