"""Shared fixtures: a throw-away home directory and a writer of skill folders."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import MakeSkill, write_skill


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tests never touch the real ~/.orchestrator."""
    home = tmp_path / "home"
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(home))
    return home


@pytest.fixture
def home(_isolated_home: Path) -> Path:
    return _isolated_home


@pytest.fixture
def make_skill() -> MakeSkill:
    return write_skill
