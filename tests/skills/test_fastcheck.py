"""The fast schema check never calls valid what jsonschema calls invalid."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import validator_for
from mcp import Client

from mcp_server import create_server
from skills.core._fastcheck import compile_check
from tests.helpers import envelope, write_skill

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"n": {"type": "number", "minimum": 0, "maximum": 10}}},
    {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string"}, "minItems": 1}}},
    {"type": "object", "properties": {"mode": {"type": "string", "enum": ["a", "b"]}, "s": {"maxLength": 3}}},
    {"type": "object", "properties": {"v": {"type": ["string", "null"]}, "o": {"type": "object"}}},
    {"type": "object", "properties": {"b": {"type": "boolean"}, "any": {}}},
]
VALUES: list[Any] = [None, True, False, 0, 1, 1.0, 2.5, -1, 11, "", "a", "abcd", [], ["x"], [1], {}, {"k": 1}]
KEYS = ["a", "b", "n", "xs", "mode", "s", "v", "o", "any", "zz"]


def _objects() -> list[Any]:
    out: list[Any] = [None, 3, "text", []]
    for key, value in itertools.product(KEYS, VALUES):
        out.append({key: value})
        out.append({"a": 1, key: value})
    return out


@pytest.mark.parametrize("schema", SCHEMAS)
def test_fast_valid_implies_jsonschema_valid(schema: dict[str, Any]) -> None:
    check = compile_check(schema)
    assert check is not None
    validator = validator_for(schema)(schema)
    agreed_valid = 0
    for value in _objects():
        if check(value):
            assert validator.is_valid(value), (schema, value)
            agreed_valid += 1
    assert agreed_valid > 0


def test_schemas_with_other_keywords_get_no_fast_check() -> None:
    assert compile_check({"type": "object", "patternProperties": {"^x": {}}}) is None
    assert compile_check({"type": "string", "pattern": "^a"}) is None
    assert compile_check({"anyOf": [{"type": "string", "pattern": "^a"}]}) is None


def test_any_of_is_checked_fast_when_every_member_is_simple() -> None:
    check = compile_check({"anyOf": [{"type": "integer"}, {"type": "null"}]})
    assert check is not None
    assert check(3) and check(None)
    assert not check("3") and not check(3.0)  # not certain: jsonschema decides


@pytest.mark.parametrize(
    "field", [{"type": [["integer"]]}, {"type": "object", "required": [["a"]]}], ids=["type", "required"]
)
async def test_a_schema_with_a_list_where_a_name_belongs_is_reported_as_invalid(
    tmp_path: Path, field: dict[str, Any]
) -> None:
    write_skill(
        tmp_path,
        "odd",
        contract={"inputs": {"type": "object", "properties": {"a": field}}, "run": {"python": "impl:main"}},
        impl="def main(a=None):\n    return {'ok': True}\n",
    )
    async with Client(create_server(skill_dirs=[tmp_path])) as client:
        result = await client.call_tool("odd", {"a": {}})
    error = envelope(result)
    assert error["message"].startswith("the skill's JSON Schema is invalid")
    assert error["hint"] == "run `orchestrator skills validate` on the skill folder"
