"""What the planning model is told: the pipeline syntax, the skills it may use, how to answer.

The skill menu is compact (one line a skill plus its arguments and result fields) and, for a
large Catalog, limited to the skills whose names and descriptions share the most words with
the request, so the prompt stays small whatever the Catalog holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, cast

from skills import Skill
from skills.creation.creator import fenced_blocks

__all__ = ["REVIEW_SYSTEM", "extract_yaml", "menu_skills", "planner_system", "skill_menu"]

_MENU_LIMIT = 120
_DESCRIPTION_CHARS = 160
_WORD = re.compile(r"[a-z0-9]{3,}")

SYNTAX = """\
Pipeline YAML in brief:

```yaml
id: lowercase-hyphen-id            # the tool name
name: "Human title"
description: "What it does and when to use it"
inputs:                            # JSON Schema properties; give every input a default
  directory: {type: string, description: "Folder", default: "."}
state: {done: false}               # optional state variables
steps:
  - id: files                      # a step calls one skill; its output is the skill's result
    skill: list-files
    parameters: {directory: "{{ directory }}", pattern: "*.py"}
  - id: each                       # for: output is the list of per-item results
    for: {items: "{{ files.paths }}", variable: path, parallel: true, max_parallel: 4}
    skill: text-stats
    parameters: {path: "{{ path }}"}
  - id: route                      # if/elif/else: output is {substep_id: output} + branch
    if: {condition: "{{ each | length > 0 }}", then: [{id: note, skill: some-skill, parameters: {}}]}
    else: [{id: none, skill: other-skill, parameters: {}}]
  - id: retry                      # while: max_iterations is required
    while: {condition: "{{ not done }}", max_iterations: 3}
    steps:
      - {id: attempt, skill: flaky-check, parameters: {}, state: {done: "{{ attempt.ok }}"}}
outputs:                           # what the caller gets back
  count: "{{ each | length }}"
```

- `{{ expr }}` is a sandboxed Jinja expression; alone it keeps its type, with text around it
  it makes a string. Quote every value that starts with `{{`.
- In scope: the inputs by name, state variables, earlier steps' outputs by step id, the loop
  variable and `loop.index`. A step skipped by `condition:` has output null.
- Use only the parameters a skill declares; read only the result fields it returns."""

_ANSWER = """\
Answer with the complete pipeline YAML in one ```yaml fenced block and nothing else.
Use only the skills listed in the request, by their exact names. The pipeline must run without
arguments: every input needs a default (use the values the request names). Declare `outputs`
holding exactly what answers the request."""

REVIEW_SYSTEM = """\
You are the checkpoint reviewer of a plan-and-run loop. A pipeline was written for a request
and run; judge from its outputs whether the request is fully answered.

Answer with JSON only:
{"verdict": "complete" | "needs_fix", "reasoning": "why, in a sentence or two",
 "issues": ["what is wrong or missing", ...],
 "fix_instructions": ["one change the pipeline author must make", ...]}
`issues` and `fix_instructions` are empty lists when the verdict is complete."""


def planner_system(guide: str | None) -> str:
    """The planning model's system prompt: the authoring guide (when the Catalog has it), the syntax, the answer."""
    parts = ["You write pipelines for an MCP orchestrator: YAML files that chain skills into a tool."]
    if guide:
        parts.append(guide.strip())
    parts += [SYNTAX, _ANSWER]
    return "\n\n".join(parts)


def extract_yaml(text: str) -> str:
    """The pipeline YAML of an answer: its ```yaml block (the one with `steps:` first), else the text."""
    blocks = [body for lang, body in fenced_blocks(text) if lang in ("yaml", "yml", "")]
    blocks.sort(key=lambda b: "steps:" not in b)
    chosen = blocks[0] if blocks else text
    return chosen.strip() + "\n" if chosen.strip() else ""


def menu_skills(skills: Iterable[Skill], request: str, limit: int = _MENU_LIMIT) -> tuple[list[Skill], int]:
    """The `limit` skills that share the most words with the request (by name), and how many
    were left out."""
    words = set(_WORD.findall(request.lower()))
    ranked = sorted(skills, key=lambda s: (-_score(s, words), s.name))
    return sorted(ranked[:limit], key=lambda s: s.name), max(len(ranked) - limit, 0)


def skill_menu(skills: Iterable[Skill], request: str, limit: int = _MENU_LIMIT) -> str:
    """One entry a skill: name, kind, description, arguments and result fields."""
    shown, left_out = menu_skills(skills, request, limit)
    lines = [_entry(s) for s in shown]
    if left_out:
        lines.append(f"({left_out} more skills not shown: they seemed unrelated to the request)")
    return "\n".join(lines) or "(no skills)"


def _score(skill: Skill, words: set[str]) -> int:
    text = f"{skill.name} {skill.description}".lower()
    return sum(1 for w in words if w in text)


def _entry(skill: Skill) -> str:
    about = " ".join(skill.description.split())
    about = about if len(about) <= _DESCRIPTION_CHARS else about[: _DESCRIPTION_CHARS - 3] + "..."
    kind = {"instructions": " [instructions: carried out by a model]", "pipeline": " [pipeline]"}.get(skill.kind, "")
    line = f"- {skill.name}{kind}: {about}"
    line += f"\n    arguments: {_arguments(skill.input_schema)}"
    out = skill.output_schema
    if isinstance(out, dict) and isinstance(out.get("properties"), dict) and out["properties"]:
        line += f"\n    result fields: {', '.join(out['properties'])}"
    return line


def _arguments(schema: object) -> str:
    """One line of a skill's arguments; the schema comes from any skill, so its shape is checked."""
    props = cast("dict[str, Any]", schema).get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or not props:
        return "(none)"
    required: set[Any] = set(cast("dict[str, Any]", schema).get("required") or [])
    parts: list[str] = []
    for name, declared in cast("dict[str, Any]", props).items():
        prop: dict[str, Any] = cast("dict[str, Any]", declared) if isinstance(declared, dict) else {}
        given = prop.get("type", "any")
        kind = "|".join(map(str, cast("list[Any]", given))) if isinstance(given, list) else str(given)
        text = f"{name}: {kind}" + ("*" if name in required else "")
        if "default" in prop:
            text += f" = {prop['default']!r}"[:40]
        parts.append(text)
    return ", ".join(parts) + ("  (* required)" if required else "")
