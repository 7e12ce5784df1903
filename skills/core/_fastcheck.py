"""A compiled yes-check for the simple JSON Schemas most skills declare.

jsonschema costs ~20 µs a call, about a third of a skill call's overhead. Most input and
output schemas use only type / properties / required / additionalProperties / enum / items and
simple bounds; for those, `compile_check` builds a plain function that answers "valid" in ~1 µs.
It is deliberately one-sided: it returns True only when the value is certainly valid, and the
caller then falls back to jsonschema for the verdict and the messages. A schema with any other
keyword gets no fast check at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from .jsontext import JSON

__all__ = ["compile_check"]

Check = Callable[[JSON], bool]
"""Whether a value (arguments from a client, a skill's result) is certainly valid."""

_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated", "format"})
_HANDLED = _ANNOTATIONS | {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "items",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "anyOf",
}


def _is_int(v: JSON) -> bool:
    return type(v) is int


def _is_num(v: JSON) -> TypeGuard[int | float]:
    return type(v) in (int, float)


_TYPES: dict[str, Check] = {
    "string": lambda v: type(v) is str,
    "integer": _is_int,  # 1.0 is an integer to JSON Schema: not certain here, so jsonschema decides
    "number": _is_num,
    "boolean": lambda v: type(v) is bool,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "null": lambda v: v is None,
}


_BOUNDS: tuple[tuple[str, Callable[[JSON, int | float], bool]], ...] = (
    ("minimum", lambda v, b: not _is_num(v) or v >= b),
    ("maximum", lambda v, b: not _is_num(v) or v <= b),
    ("minLength", lambda v, b: type(v) is not str or len(v) >= b),
    ("maxLength", lambda v, b: type(v) is not str or len(v) <= b),
    ("minItems", lambda v, b: type(v) is not list or len(v) >= b),
    ("maxItems", lambda v, b: type(v) is not list or len(v) <= b),
)
"""The bound keywords: a value of another type passes (`type`, if any, rules on it)."""


def compile_check(schema: JSON) -> Check | None:
    """A function that returns True only for values certainly valid under `schema`, or None."""
    if schema is True or schema == {}:
        return lambda v: True
    if not isinstance(schema, dict) or not set(schema) <= _HANDLED:
        return None
    checks: list[Check] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else kind
        if not isinstance(kinds, list):
            return None
        tests: list[Check] = []
        for k in kinds:
            if not isinstance(k, str) or k not in _TYPES:
                return None
            tests.append(_TYPES[k])
        checks.append(tests[0] if len(tests) == 1 else (lambda v, t=tuple(tests): any(f(v) for f in t)))
    if "enum" in schema:
        options = schema["enum"]
        if not isinstance(options, list) or not all(isinstance(o, str | type(None)) for o in options):
            return None  # 1 == 1.0 == True subtleties: leave non-string enums to jsonschema
        checks.append(lambda v, o=tuple(options): isinstance(v, str | type(None)) and v in o)
    for key, test in _BOUNDS:
        if key in schema:
            bound = schema[key]
            if not _is_num(bound):
                return None
            checks.append(lambda v, b=bound, t=test: t(v, b))
    if "anyOf" in schema:  # valid when any member certainly is (the typed "any value" / "or null")
        members = schema["anyOf"]
        if not isinstance(members, list) or not members:
            return None
        compiled: list[Check] = []
        for member in members:
            check = compile_check(member)
            if check is None:
                return None
            compiled.append(check)
        checks.append(lambda v, cs=tuple(compiled): any(c(v) for c in cs))
    if "items" in schema:
        item = compile_check(schema["items"])
        if item is None:
            return None
        checks.append(lambda v, f=item: type(v) is not list or all(f(x) for x in v))
    if {"properties", "required", "additionalProperties"} & set(schema):
        obj = _object_check(schema)
        if obj is None:
            return None
        checks.append(obj)
    if len(checks) == 1:
        return checks[0]
    return lambda v, cs=tuple(checks): all(c(v) for c in cs)


def _object_check(schema: dict[str, JSON]) -> Check | None:
    props = schema.get("properties") or {}
    required = schema.get("required") or []
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list) or not isinstance(extra, bool):
        return None
    compiled: dict[str, Check] = {}
    for name, sub in props.items():
        sub_check = compile_check(sub)
        if sub_check is None:
            return None
        compiled[name] = sub_check
    req: list[str] = []
    for name in required:
        if not isinstance(name, str):
            return None  # not a JSON Schema: jsonschema says so
        req.append(name)
    req_names = tuple(req)

    def check(v: JSON) -> bool:
        if type(v) is not dict:
            return True  # `type` (if any) rules on non-objects
        for name in req_names:
            if name not in v:
                return False
        for key, value in v.items():
            sub = compiled.get(key)
            if sub is None:
                if not extra:
                    return False
            elif not sub(value):
                return False
        return True

    return check
