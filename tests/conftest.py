"""Shared fixtures: a throw-away home directory and a writer of skill folders."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fixtures.anthropic_stub import AnthropicStub
from tests.helpers import MakeSkill, Run, run_cli, write_skill


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tests never touch the real ~/.orchestrator."""
    home = tmp_path / "home"
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _allowed_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """File built-ins may read the test's tmp_path and the checkout, as a user allows with
    `--allow-dir`; tests of the default and of client roots remove or override it."""
    checkout = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("ORCHESTRATOR_ALLOW_DIRS", os.pathsep.join([str(tmp_path), str(checkout)]))


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


@pytest.fixture
def cli(tmp_path: Path, home: Path) -> Callable[..., Run]:
    """`cli("skills", "list", ...)`: the installed `orchestrator` command, in tmp_path, on the test's home."""
    env = {k: v for k, v in os.environ.items() if k != "ORCHESTRATOR_TOKEN"} | {"ORCHESTRATOR_HOME": str(home)}
    return lambda *args, **kw: run_cli(*args, env=env, cwd=tmp_path, **kw)
