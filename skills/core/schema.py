"""JSON Schema checks: skill arguments in, structured results out.

`jsonschema` is imported on first use, not at start-up: the server's spawn time matters more
than the first call's extra ~0.1 s.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

from ._fastcheck import Check, compile_check
from .errors import ECHO_MAX, ArgumentsError, FieldError, LimitExceededError, OutputError, clip
from .jsontext import JSON

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_ARGUMENT_NODES",
    "check_arguments",
    "check_bounds",
    "check_output",
    "schema_problem",
]

MAX_ARGUMENT_DEPTH = 64
"""Nesting of arrays and objects an argument value may have (deeper ones are refused unread:
validation and every later walk over them would recurse that deep)."""
MAX_ARGUMENT_NODES = 200_000
"""Values (scalars, arrays, objects) all arguments together may hold."""
_FLAT = frozenset({str, int, float, bool, type(None)})
"""Types of argument values with nothing under them."""

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


def _field_of(error: ValidationError) -> str:
    """The dotted path of the field an error is about, read from the error's data (not its words):
    for a missing or an unexpected property, that property's name."""
    parts = [str(p) for p in error.absolute_path]
    instance: Any = error.instance
    if isinstance(instance, dict):
        present = cast("dict[str, Any]", instance)
        required: Any = error.validator_value
        if error.validator == "required" and isinstance(required, list):
            names = cast("list[Any]", required)
            parts.append(next((str(n) for n in names if n not in present), ""))
        elif error.validator == "additionalProperties":
            schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
            declared: dict[str, Any] = schema.get("properties") or {}
            patterns: list[str] = list(schema.get("patternProperties") or {})
            extra = (k for k in present if k not in declared and not any(re.search(p, k) for p in patterns))
            parts.append(next(extra, ""))
    return ".".join(p for p in parts if p)


def check_bounds(skill: str, arguments: dict[str, Any]) -> None:
    """Raise `LimitExceededError` when the arguments nest deeper than `MAX_ARGUMENT_DEPTH` or hold
    more than `MAX_ARGUMENT_NODES` values, naming the limit and the field where it was crossed.

    Iterative on purpose: a recursive walk is what such a payload is built to break.
    """
    if len(arguments) < MAX_ARGUMENT_NODES and _FLAT.issuperset(map(type, arguments.values())):
        return  # no nesting (most calls): nothing to walk
    stack: list[tuple[dict[str, JSON] | list[JSON], int, str]] = [(arguments, 0, "")]
    nodes = 1
    while stack:
        value, depth, path = stack.pop()
        if depth >= MAX_ARGUMENT_DEPTH or nodes + len(value) > MAX_ARGUMENT_NODES:
            deep = depth >= MAX_ARGUMENT_DEPTH
            raise LimitExceededError(
                f"arguments of '{skill}' nest deeper than {MAX_ARGUMENT_DEPTH} levels (at {clip(path)})"
                if deep
                else f"arguments of '{skill}' hold more than {MAX_ARGUMENT_NODES:,} values",
                limit=f"argument depth <= {MAX_ARGUMENT_DEPTH}" if deep else f"argument values <= {MAX_ARGUMENT_NODES}",
                hint=f"flatten the value: at most {MAX_ARGUMENT_DEPTH} nested arrays/objects"
                if deep
                else "send less data per call, or put it in a file and pass its path",
                where=clip(path.split(".", 1)[0]) or "(arguments)",
            )
        nodes += len(value)
        for key, child in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, f"{path}.{key}" if path else str(key)))


def _message_of(error: ValidationError) -> str:
    """A jsonschema message with the offending value quoted at most `ECHO_MAX` characters long
    (jsonschema quotes the whole value: a 10 MB argument would come back whole)."""
    message: str = error.message
    if len(message) <= 2 * ECHO_MAX:
        return message
    quoted = repr(error.instance)
    if len(quoted) > ECHO_MAX and quoted in message:
        message = message.replace(quoted, clip(quoted))
    return clip(message, 2 * ECHO_MAX)


def check_arguments(skill: str, schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Raise `LimitExceededError` for arguments over the size bounds, else `ArgumentsError`
    naming every field that does not fit `schema`."""
    check_bounds(skill, arguments)
    fast = _fast_check(schema)
    if fast is not None and fast(arguments):
        return
    validator = _validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    fields = [FieldError(clip(_field_of(e)), _message_of(e)) for e in errors[:20]]
    # `_validator` checked the schema against its meta-schema: these are what they must be
    properties: dict[str, Any] = schema.get("properties") or {}
    required: list[str] = schema.get("required") or []
    props = sorted(properties.keys())
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
        where = clip(".".join(str(p) for p in error.absolute_path) or "(result)")
        raise OutputError(
            f"'{skill}' returned a result that does not match its outputs schema at {where}: {_message_of(error)}",
            hint="fix the skill's implementation or its `outputs` in skill.yaml",
            where=f"result.{where}" if where != "(result)" else "result",
        )


JSON_TYPES = ("object", "array", "string", "number", "boolean", "null")
ANY_JSON: dict[str, Any] = {
    "anyOf": [{"type": t} for t in JSON_TYPES],
    "description": "Any JSON value.",
}
"""The typed spelling of "any value": each member names a type, so clients that require a `type`
on every property (Gemini, OpenAPI-style converters, Inspector --strict) accept it, where `{}`
or a type array would not."""


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null, as `anyOf` (not a `["x", "null"]` type array, for the same clients)."""
    return {"anyOf": [schema, {"type": "null"}]}


def typed(schema: JSON) -> bool:
    """Whether a (sub)schema names one type, or is an anyOf/oneOf whose members all do."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if isinstance(kind, str):
        return True
    members = schema.get("anyOf") or schema.get("oneOf")
    return kind is None and isinstance(members, list) and bool(members) and all(typed(m) for m in members)


def portability_problems(schema: JSON, path: str = "$") -> list[str]:
    """Every place in `schema` a strict client would warn about: a property (or array items,
    or additionalProperties) without a `type`, and any type array."""
    problems: list[str] = []
    if not isinstance(schema, dict):
        return problems
    if isinstance(schema.get("type"), list):
        problems.append(f"{path}: type array {schema['type']}")
    properties = schema.get("properties")
    for name, sub in properties.items() if isinstance(properties, dict) else ():
        if not typed(sub):
            problems.append(f"{path}.properties.{name}: no type")
        problems += portability_problems(sub, f"{path}.properties.{name}")
    for key in ("items", "additionalProperties"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            if not typed(sub):
                problems.append(f"{path}.{key}: no type")
            problems += portability_problems(sub, f"{path}.{key}")
    for key in ("anyOf", "oneOf", "allOf"):
        members = schema.get(key)
        for i, member in enumerate(members if isinstance(members, list) else ()):
            problems += portability_problems(member, f"{path}.{key}[{i}]")
    return problems
