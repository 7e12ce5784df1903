"""SKILL.md front matter: read fast, and judged leniently where a fallback exists.

Loading serves what it can: a Title-Case or missing name under the folder's name, a
description over 1,024 characters cut, non-string metadata as text, each with a warning;
`skills validate` (strict) reports the same as errors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ._yaml_plain import SCALAR_RESOLVER
from .contract import DESCRIPTION_MAX, NAME_PATTERN
from .errors import Problem, clip
from .yamltext import YAML, Scalar, load_yaml

__all__ = ["NAME_HINT", "check_description", "check_metadata", "check_name", "load_front"]

NAME_HINT = "use 1-64 lowercase letters, digits and single hyphens, equal to the folder name"
_DESCRIPTION_HINT = "say what the skill does and when to use it, in 1-1024 characters"

_FLAT_LINE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*):[ ]+([^\s\-?:,\[\]{}#&*!|>'\"%@`][^\n]*?)[ \t]*\r?\n?")
_QUOTED_LINE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*):[ ]+(?:\"([^\"\\\n]*)\"|'([^'\n]*)')[ \t]*\r?\n?")
"""`key: "text"` or `key: 'text'` without escapes or inner quotes: the text is the value as written."""
_RESOLVER = SCALAR_RESOLVER


def load_front(text: str) -> YAML:
    """The front matter's data: `key: plain text` lines read directly, anything else by YAML.

    Most front matter is a few such lines (name, description); reading them without building a
    YAML node graph keeps 1,000 skills loading in well under 300 ms. A line is taken directly
    only when YAML would read it the same way: a plain scalar (no quote, indicator, ': ' or
    ' #') that YAML resolves to a string (not a number, date, boolean or null), each key once.
    """
    data: dict[Scalar, YAML] = {}
    for line in text.splitlines(keepends=True):
        quoted = _QUOTED_LINE.fullmatch(line)
        if quoted is not None and quoted[1] not in data:
            data[quoted[1]] = quoted[2] if quoted[2] is not None else quoted[3]
            continue
        match = _FLAT_LINE.fullmatch(line)
        if match is None or match[1] in data:
            return load_yaml(text)
        value = match[2]
        if ": " in value or " #" in value or value.endswith(":") or "\t" in value:
            return load_yaml(text)
        if _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) != "tag:yaml.org,2002:str":
            return load_yaml(text)
        data[match[1]] = value
    return data if data else load_yaml(text)


def check_name(root: Path, skill_md: Path, name: YAML, soft: str) -> tuple[str | None, list[Problem]]:
    """Problems of the declared name, and the name to serve when lenient loading falls back to
    the folder's (a Title-Case or missing name in a folder whose own name is valid)."""
    folder_ok = NAME_PATTERN.match(root.name) is not None and len(root.name) <= 64
    if name is None or (isinstance(name, str) and not name.strip()):
        if soft == "warning" and folder_ok:
            message = f"no name in the front matter; served as '{root.name}' (the folder name)"
            return root.name, [Problem(skill_md, message, field="name", severity="warning", hint=NAME_HINT)]
        return None, []  # the model's own error says "field required"
    if not isinstance(name, str):
        return None, []  # wrong type: the model's own error says so
    problems: list[Problem] = []
    if not (name.isascii() and all(c.isalnum() or c in "-_" for c in name)) or len(name) > 64:
        if soft == "warning" and folder_ok:
            message = f"name '{clip(name, 80)}' is not a valid skill name; served as '{root.name}' (the folder name)"
            return root.name, [Problem(skill_md, message, field="name", severity="warning", hint=NAME_HINT)]
        problems.append(
            Problem(skill_md, f"name '{clip(name, 80)}' cannot be a tool name", field="name", hint=NAME_HINT)
        )
    elif not NAME_PATTERN.match(name):
        message = f"name '{name}' is not lowercase-hyphen form"
        problems.append(Problem(skill_md, message, field="name", severity=soft, hint=NAME_HINT))
    if name != root.name:
        problems.append(
            Problem(
                skill_md,
                f"name '{clip(name, 80)}' differs from the folder name '{root.name}'",
                field="name",
                severity=soft,
                hint="rename the folder or the skill",
            )
        )
    return None, problems


def check_metadata(skill_md: Path, known: dict[str, YAML], soft: str) -> list[Problem]:
    """`metadata` maps strings to strings (Agent Skills spec); lenient loading serves other values
    as text, with a warning."""
    meta = known.get("metadata")
    if not isinstance(meta, dict):
        return []  # absent, or not a mapping: the model's own error says so
    problems: list[Problem] = []
    for key, value in meta.items():
        if isinstance(value, str):
            continue
        kind = type(value).__name__ if value is not None else "null"
        problems.append(
            Problem(
                skill_md,
                f"metadata '{key}' is a {kind}, not a string",
                field=f"metadata.{key}",
                severity=soft,
                hint="quote the value; metadata maps string keys to string values",
            )
        )
    known["metadata"] = {
        str(k): v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False) for k, v in meta.items()
    }
    return problems


def check_description(skill_md: Path, known: dict[str, YAML], soft: str) -> list[Problem]:
    """A description over 1,024 characters is an error in `validate`; loading serves it cut."""
    text = known.get("description")
    if soft != "warning" or not isinstance(text, str) or len(text) <= DESCRIPTION_MAX:
        return []
    known["description"] = text[:DESCRIPTION_MAX]
    message = f"the description has {len(text):,} characters; served cut at {DESCRIPTION_MAX:,}"
    return [Problem(skill_md, message, field="description", severity="warning", hint=_DESCRIPTION_HINT)]
