"""JSON Schema checks: skill arguments in, structured results out.

`jsonschema` is imported on first use, not at start-up: the server's spawn time matters more
than the first call's extra ~0.1 s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._fastcheck import Check, compile_check
from .errors import ArgumentsError, FieldError, OutputError

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ["check_arguments", "check_output", "schema_problem"]

_validators: dict[int, tuple[dict[str, Any], Validator]] = {}
_fast: dict[int, tuple[dict[str, Any], Check | None]] = {}


def _fast_check(schema: dict[str, Any]) -> Check | None:
    key = id(schema)
    hit = _fast.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    check = compile_check(schema)
    _fast[key] = (schema, check)
    return check


def _validator(schema: dict[str, Any]) -> Validator:
    key = id(schema)
    hit = _validators.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise OutputError(
            f"the skill's JSON Schema is invalid: {exc.message}",
            hint="run `orchestrator skills validate` on the skill folder",
        ) from None
    validator = cls(schema)
    _validators[key] = (schema, validator)  # holding `schema` keeps its id from being reused
    return validator


def schema_problem(schema: dict[str, Any]) -> str | None:
    """What is wrong with a JSON Schema itself, or None."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.path)
        return f"{exc.message}" + (f" at {path}" if path else "")
    return None


def _field_of(error: Any) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        parts.append(missing)
    elif error.validator == "additionalProperties":
        extra = error.message.split("'")[1] if "'" in error.message else ""
        parts.append(extra)
    return ".".join(p for p in parts if p)


def check_arguments(skill: str, schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Raise `ArgumentsError` naming every field that does not fit `schema`."""
    fast = _fast_check(schema)
    if fast is not None and fast(arguments):
        return
    validator = _validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    fields = [FieldError(_field_of(e), e.message) for e in errors]
    props = sorted((schema.get("properties") or {}).keys())
    required = schema.get("required") or []
    hint = f"arguments: {', '.join(props) or '(none)'}" + (f"; required: {', '.join(required)}" if required else "")
    raise ArgumentsError(skill, fields, hint=hint)


def check_output(skill: str, schema: dict[str, Any], result: Any) -> None:
    """Raise `OutputError` when a structured result breaks the skill's `outputs` schema."""
    fast = _fast_check(schema)
    if fast is not None and fast(result):
        return
    validator = _validator(schema)
    error = next(iter(validator.iter_errors(result)), None)
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(result)"
        raise OutputError(
            f"'{skill}' returned a result that does not match its outputs schema at {where}: {error.message}",
            hint="fix the skill's implementation or its `outputs` in skill.yaml",
        )
