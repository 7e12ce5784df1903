"""YAML reading with the C loader when present (10x faster: 1,000 skills load at start-up)."""

from __future__ import annotations

from typing import Any

import yaml

try:
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader

__all__ = ["YAMLError", "describe_yaml_error", "load_yaml", "mark_of"]

YAMLError = yaml.YAMLError


def load_yaml(text: str) -> Any:
    """Parse YAML safely (no tags that build Python objects)."""
    return yaml.load(text, Loader=_Loader)


def mark_of(error: yaml.YAMLError) -> tuple[int, int] | None:
    """1-based (line, column) of a YAML error, when the parser knows it."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is None:
        return None
    return mark.line + 1, mark.column + 1


def describe_yaml_error(error: yaml.YAMLError, line_offset: int = 0) -> str:
    """'at line L, column C: problem (while parsing ... started at line K)', in file lines."""
    problem_mark = getattr(error, "problem_mark", None)
    context_mark = getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    text = ""
    if problem_mark is not None:
        text = f"at line {problem_mark.line + 1 + line_offset}, column {problem_mark.column + 1}: "
    text += problem
    context = getattr(error, "context", None)
    if context and context_mark is not None:
        text += f" ({context} that starts at line {context_mark.line + 1 + line_offset})"
    return text
