"""Helpers for tests: writing skill folders into tmp_path."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
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


ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"


@dataclass
class Run:
    """The outcome of one `orchestrator` command."""

    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


def run_cli(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> Run:
    """Run the installed console script; a traceback on stderr fails the test."""
    done = subprocess.run(
        [str(ORCHESTRATOR), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return Run(done.returncode, done.stdout, done.stderr)
