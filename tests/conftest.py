"""Shared fixtures: a throw-away home directory and a writer of skill folders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.anthropic_stub import AnthropicStub
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


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches the real Anthropic API: a key in the developer's shell is ignored."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[AnthropicStub]:
    """A local server speaking the Messages API, with the real SDK pointed at it."""
    with AnthropicStub() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
        yield server
