"""The home directory: created on first use, installed again without losing user edits."""

from __future__ import annotations

import json
from pathlib import Path

from mcp_server import create_server
from skills import Home
from tests.helpers import write_skill


def test_install_creates_the_layout_and_lists_the_builtin_skills(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    report = home.install()
    assert sorted(report.created) == [
        "agents/roles.yaml",
        "models/registry.yaml",
        "servers.json",
        "skills/registry.yaml",
    ]
    for sub in ("skills", "models", "agents", "pipelines", "runs"):
        assert (home.root / sub).is_dir()
    registry = home.read_registry()
    assert registry["code-analyzer"] == {"source": "builtin", "enabled": True}
    assert json.loads(home.servers_file.read_text()) == {"mcpServers": {}}


def test_installing_again_never_overwrites_a_file_the_user_changed(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    home.install()
    mine = '{"mcpServers": {"time": {"command": "mcp-server-time"}}}\n'
    home.servers_file.write_text(mine)
    home.registry_file.write_text("skills:\n  list-files: {enabled: false}  # my choice\n")
    report = home.install()
    assert home.servers_file.read_text() == mine
    text = home.registry_file.read_text()
    assert text.startswith("skills:\n  list-files: {enabled: false}  # my choice\n")
    assert home.enabled_overrides()["list-files"] is False
    assert "code-analyzer" in home.read_registry()  # missing entries are added below the user's
    assert "servers.json" in report.kept


def test_a_deleted_default_comes_back_and_an_untouched_one_is_kept(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    home.install()
    home.servers_file.unlink()
    report = home.install()
    assert report.created == ["servers.json"]
    assert "skills/registry.yaml" in report.kept


def test_user_skills_in_the_home_are_published_and_recorded(home: Path) -> None:
    write_skill(home / "skills", "my-notes", body="Keep notes short.\n")
    server = create_server()
    assert server.catalog.get("my-notes").source == "home"
    assert Home(home).read_registry()["my-notes"] == {"source": "user", "path": "skills/my-notes", "enabled": True}
