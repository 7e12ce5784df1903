"""Helpers for tests: writing skill folders into tmp_path."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

MakeSkill = Callable[..., Path]


def write_skill(
    parent: Path,
    name: str,
    *,
    description: str | None = None,
    body: str = "Use this skill.\n",
    contract: dict[str, Any] | None = None,
    impl: str | None = None,
    files: dict[str, str] | None = None,
    front: dict[str, Any] | None = None,
) -> Path:
    """Write a skill folder `parent/name` and return it."""
    folder = parent / name
    folder.mkdir(parents=True, exist_ok=True)
    fm = {"name": name, "description": description or f"The {name} skill, for tests."}
    fm.update(front or {})
    (folder / "SKILL.md").write_text(f"---\n{yaml.safe_dump(fm, sort_keys=False)}---\n{body}")
    if contract is not None:
        (folder / "skill.yaml").write_text(yaml.safe_dump(contract, sort_keys=False))
    if impl is not None:
        (folder / "impl.py").write_text(textwrap.dedent(impl))
    for rel, text in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder
