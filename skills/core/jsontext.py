"""The bounded JSON reader: files the server reads (servers.json) and JSON text from clients.

Python's `json` raises `RecursionError` on `[[[[...` a few thousand deep: not a `ValueError`,
so code that reports bad JSON lets it through. Here every refusal is a `json.JSONDecodeError`
with the line and column where the document went too deep or too long, so each call site
reports it as it already reports a syntax error. Depth and size share the YAML reader's limits.
"""

from __future__ import annotations

import json
import re
from typing import TypeAlias

from .yamltext import MAX_DEPTH, MAX_TEXT

__all__ = ["JSON", "load_json", "nesting_depth"]

JSON: TypeAlias = "dict[str, JSON] | list[JSON] | str | int | float | bool | None"
"""A JSON value as `json.loads` gives it; narrow it with isinstance."""

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
"""Strings (skipped whole, so brackets inside them do not count) and brackets. No nested
quantifiers over overlapping text: linear time on any input."""


def load_json(text: str) -> JSON:
    """Parse JSON text; `json.JSONDecodeError` for bad syntax, over `MAX_TEXT` or over `MAX_DEPTH`."""
    if len(text) > MAX_TEXT:
        raise json.JSONDecodeError(
            f"the document has {len(text):,} characters, more than the {MAX_TEXT:,} the server reads", text, 0
        )
    if text.count("[") + text.count("{") >= MAX_DEPTH:
        _check_depth(text)
    return json.loads(text)  # json.loads is typed Any: what it builds is a JSON


def nesting_depth(text: str, stop: int | None = None) -> int:
    """How deep the arrays and objects of JSON text nest (brackets inside strings are text);
    counting ends once it passes `stop`. Also for text a parser refused: the depth is ours to tell."""
    depth = deepest = 0
    for match in _TOKEN.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop is not None and deepest > stop:
                    break
        elif char in "]}":
            depth -= 1
    return deepest


def _check_depth(text: str) -> None:
    depth = 0
    for match in _TOKEN.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise json.JSONDecodeError(
                    f"nested more than {MAX_DEPTH} levels deep; flatten the structure", text, match.start()
                )
        elif char in "]}":
            depth -= 1
