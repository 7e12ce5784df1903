"""Hypothesis strategies for the fuzz tests: YAML-ish pipeline text and JSON arguments by schema.

Settings are derandomized (the same examples on every run, so CI is reproducible) with no
example database, and budgets small enough for the whole fuzz to take a few tens of seconds.
"""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def fuzz(max_examples: int) -> settings:
    """Settings of one fuzz test: `max_examples` derandomized examples, no database, no deadline."""
    return settings(FUZZ, max_examples=max_examples)


FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

_WORDS = [
    "id", "name", "steps", "skill", "parameters", "for", "items", "variable", "parallel", "max_parallel",
    "while", "condition", "max_iterations", "if", "then", "elif", "else", "state", "inputs", "outputs",
    "retry", "attempts", "on_error", "timeout", "agent", "collect", "list-files", "x", "loop",
]  # fmt: skip
_FRAGMENTS = [
    "[", "]", "{", "}", "&a ", "*a", "- ", ": ", "\n", "  ", "'", '"', "{{ ", " }}", "{% for x in y %}",
    "!!binary ", "<<: *a", "? ", "|\n", ">-\n", "#", ",", "%YAML 1.1\n", "---\n", "...\n", "\t", "\\",
    "1e999", "0x1f", "2001-13-45", "~", "null", "!!python/object:os.system", "\x00", "\ud7ff", "é",
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-5, max_value=50)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=20)
    | st.sampled_from(_WORDS)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=16,
)
"""Any JSON value (no NaN: JSON-RPC cannot carry it), nested a few levels."""

_spec_like = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(_WORDS), children, max_size=5),
    max_leaves=24,
)


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True)


pipeline_texts = st.one_of(
    st.text(max_size=200),
    _spec_like.map(_dump),
    st.lists(st.sampled_from(_FRAGMENTS + _WORDS), max_size=40).map("".join),
    st.tuples(_spec_like.map(_dump), st.lists(st.sampled_from(_FRAGMENTS), max_size=6).map("".join)).map(
        lambda pair: pair[0] + pair[1]
    ),
)
"""Text a client may send as a pipeline: noise, YAML of spec-shaped data, hostile fragments."""


def _typed(schema: Any) -> st.SearchStrategy[Any]:
    """Values of a property's declared type (or any JSON when it declares none)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    return {
        "string": st.text(max_size=40) | st.sampled_from([*_WORDS, "", ".", "*", "**/*", "(a+)+$"]),
        "integer": st.integers(min_value=-3, max_value=20),
        "number": st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
        "boolean": st.booleans(),
        "array": st.lists(json_values, max_size=5),
        "object": st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    }.get(kind, json_values)


def arguments_for(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments for a tool: its declared properties (well or badly typed), sometimes unknown keys."""
    properties = schema.get("properties") or {}
    declared = st.fixed_dictionaries(
        {}, optional={name: _typed(prop) | json_values for name, prop in properties.items()}
    )
    extra = st.dictionaries(st.text(max_size=8), json_values, max_size=2)
    return st.one_of(declared, st.tuples(declared, extra).map(lambda pair: {**pair[1], **pair[0]}))
