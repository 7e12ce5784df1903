"""Verification of the steps that call no skill: `prompt:` (its templates and `output:` schema) and
`ask:` (its template and a `schema:` flat enough for MCP elicitation). The verifier's checks of
names and positions are shared (`Checker`: what `verify._Verifier` offers these checks)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from .spec import StepSpec
from .yamlmap import Path_

__all__ = ["Checker", "check_inline"]


class Checker(Protocol):
    """The verifier as these checks use it."""

    def add(
        self, path: Path_, message: str, hint: str, code: str, *, key: bool = False, warning: bool = False
    ) -> None: ...

    def expression(
        self, path: Path_, value: Any, scope: Collection[str], step: StepSpec | None, *, bare: bool = False
    ) -> None: ...


def check_inline(v: Checker, step: StepSpec, scope: Collection[str]) -> None:
    """A `prompt:` or `ask:` step: its templates' names, its `output:` or `schema:`."""
    from ..asking import flat_schema_problems

    path = step.path
    for key, text in step.templates().items():
        v.expression((*path, key), text, scope, step)
    if step.output is not None:
        _json_schema(v, (*path, "output"), step.output, "output")
    if step.ask_schema is not None:
        for where, message in flat_schema_problems(step.ask_schema):
            v.add(
                (*path, "schema", *where),
                f"the `schema:` of ask step '{step.id}' {message}",
                "an answer is a flat object: give `type: object` and `properties` of strings, numbers, "
                "integers, booleans or enums (no nested objects), as MCP elicitation allows",
                "ask-schema",
            )
    if step.parameters:
        v.add(
            (*path, "parameters"),
            f"step '{step.id}' has parameters but no skill to pass them to",
            f"write what the {step.kind} needs into its `{step.kind}:` text with {{{{ }}}} expressions",
            "unused-parameters",
            key=True,
            warning=True,
        )


def _json_schema(v: Checker, path: Path_, schema: dict[str, Any], name: str) -> None:
    """A JSON Schema the user wrote: one a validator can use."""
    from jsonschema import Draft202012Validator, SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = tuple(exc.absolute_path)
        v.add((*path, *where), f"`{name}:` is not a valid JSON Schema: {exc.message}", "fix the schema", "schema")
