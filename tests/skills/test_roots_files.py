"""File built-ins reach only the allowed roots, and never /proc, secrets or the server's home.

Through a real MCP client (and the command line for `--allow-dir`). Each refusal must name the
path, the allowed roots and how to add one, and must come before anything about the path (even
whether it exists) is told.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult

from mcp_server import create_server
from skills import Home
from tests.helpers import envelope, run_cli


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("def f(x):\n    return x + 1\n")
    (root / "data.json").write_text('{"a": {"b": [1, 2]}}')
    (root / "notes.txt").write_text("one two three\n")
    return root


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "private.txt").write_text("not for the client")
    return other


async def call(home: Path, name: str, arguments: dict[str, Any], **server: Any) -> CallToolResult:
    async with Client(create_server(home=home, **server)) as client:
        return await client.call_tool(name, arguments)


def refusal(result: CallToolResult) -> str:
    """The message and hint of a refused call (its error envelope, checked)."""
    error = envelope(result)
    assert "Traceback" not in result.content[0].text
    return f"{error['message']}\nHint: {error['hint']}"


@pytest.mark.parametrize("path", ["/proc/self/environ", "/proc/1/environ", "/sys/kernel/hostname", "/dev/zero"])
async def test_read_file_refuses_proc_sys_and_dev_even_when_the_root_is_everything(home: Path, path: str) -> None:
    result = await call(home, "read-file", {"path": path, "errors": "replace"}, allow_dirs=["/"])
    text = refusal(result)
    assert f"{path} is not readable" in text and "never served" in text
    assert envelope(result)["where"] == "path" and envelope(result)["type"] == "skill_failed"


async def test_a_path_outside_the_roots_is_refused_naming_it_the_roots_and_how_to_add_one(
    home: Path, project: Path, elsewhere: Path
) -> None:
    target = elsewhere / "private.txt"
    text = refusal(await call(home, "read-file", {"path": str(target)}, allow_dirs=[project]))
    assert f"{target} is outside the allowed roots ({project})" in text
    assert "--allow-dir DIR" in text and "root in your MCP client" in text
    missing = refusal(await call(home, "read-file", {"path": str(elsewhere / "nope.txt")}, allow_dirs=[project]))
    assert "outside the allowed roots" in missing and "not found" not in missing  # existence is not told


async def test_every_file_built_in_is_confined_to_the_roots(home: Path, project: Path, elsewhere: Path) -> None:
    outside, inside = str(elsewhere / "private.txt"), str(project / "notes.txt")
    cases = {
        "list-files": {"directory": str(elsewhere)},
        "diff-files": {"old_path": inside, "new_path": "/etc/shadow"},
        "text-stats": {"path": outside},
        "code-analyzer": {"path": outside},
        "json-query": {"query": "a", "path": outside},
        "run-tests": {"path": str(elsewhere)},
    }
    for name, arguments in cases.items():
        text = refusal(await call(home, name, arguments, allow_dirs=[project]))
        assert "outside the allowed roots" in text or "system secrets are never served" in text, (name, text)
    ok = await call(home, "text-stats", {"path": inside}, allow_dirs=[project])
    assert not ok.is_error and ok.structured_content is not None and ok.structured_content["words"] == 3


async def test_symlinks_are_resolved_before_the_check(home: Path, project: Path, elsewhere: Path) -> None:
    (project / "sneaky.txt").symlink_to(elsewhere / "private.txt")
    (project / "proc").symlink_to("/proc/self")
    text = refusal(await call(home, "read-file", {"path": str(project / "sneaky.txt")}, allow_dirs=[project]))
    assert "outside the allowed roots" in text
    text = refusal(await call(home, "read-file", {"path": str(project / "proc" / "environ")}, allow_dirs=[project]))
    assert "never served" in text


async def test_secret_dot_folders_are_refused_and_not_even_listed(home: Path, project: Path) -> None:
    (project / ".ssh").mkdir()
    (project / ".ssh" / "id_rsa").write_text("KEY")
    (project / ".aws").mkdir()
    (project / ".aws" / "credentials").write_text("KEY")
    text = refusal(await call(home, "read-file", {"path": str(project / ".ssh" / "id_rsa")}, allow_dirs=[project]))
    assert "'.ssh' holds credentials" in text
    listed = await call(home, "list-files", {"directory": str(project), "include_hidden": True}, allow_dirs=[project])
    assert listed.structured_content is not None
    assert listed.structured_content["relative"] == ["data.json", "notes.txt", "pkg/mod.py"]


async def test_the_servers_home_is_refused_but_a_runs_own_files_are_readable(home: Path, tmp_path: Path) -> None:
    text = refusal(
        await call(home, "read-file", {"path": str(home / "skills" / "registry.yaml")}, allow_dirs=[tmp_path])
    )
    assert "orchestrator's own home directory" in text
    Home(home).install()
    pipeline = home / "pipelines" / "write-then-read.yaml"
    pipeline.write_text(
        "id: write-then-read\ndescription: Write a file, then read it back.\nsteps:\n"
        "  - id: wrote\n    skill: write-file\n    parameters: {path: out.txt, content: hello}\n"
        "  - id: read\n    skill: read-file\n    parameters: {path: '{{ wrote.path }}'}\n"
        "outputs:\n  text: '{{ read.content }}'\n"
    )
    result = await call(home, "write-then-read", {}, allow_dirs=[tmp_path])
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None and result.structured_content["text"] == "hello"


async def test_the_list_files_expression_helper_is_confined_too(home: Path, project: Path) -> None:
    Home(home).install()
    pipeline = home / "pipelines" / "peek.yaml"
    pipeline.write_text(
        "id: peek\ndescription: List a folder through an expression.\n"
        "inputs:\n  directory: {type: string}\n"
        "steps:\n  - id: count\n    skill: number-stats\n"
        "    parameters: {values: \"{{ list_files(directory, '*') | map('length') | list }}\"}\n"
        "outputs:\n  files: '{{ count.count }}'\n"
    )
    inside = await call(home, "peek", {"directory": str(project)}, allow_dirs=[project])
    assert not inside.is_error and inside.structured_content is not None
    assert inside.structured_content["files"] == 2
    text = refusal(await call(home, "peek", {"directory": "/etc"}, allow_dirs=[project]))
    assert "list_files: /etc is outside the allowed roots" in text


async def test_by_default_the_working_directory_is_the_root(
    home: Path, project: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCHESTRATOR_ALLOW_DIRS")
    monkeypatch.chdir(project)
    ok = await call(home, "read-file", {"path": "notes.txt"})
    assert not ok.is_error and ok.structured_content is not None
    assert ok.structured_content["content"] == "one two three\n"
    text = refusal(await call(home, "read-file", {"path": str(elsewhere / "private.txt")}))
    assert f"outside the allowed roots ({project})" in text
    review = await call(home, "code-review", {"directory": "."})  # the example reviews the cwd as it is
    assert not review.is_error, review.content[0].text
    assert review.structured_content is not None and review.structured_content["files_reviewed"] == 1


async def test_a_server_started_in_the_filesystem_root_allows_nothing_by_default(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCHESTRATOR_ALLOW_DIRS")
    monkeypatch.chdir("/")
    text = refusal(await call(home, "read-file", {"path": str(project / "notes.txt")}))
    assert "outside the allowed roots (none)" in text and "--allow-dir" in text


def test_allow_dir_on_the_command_line_opens_a_folder(home: Path, project: Path, elsewhere: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ORCHESTRATOR_ALLOW_DIRS"}
    args = ("call", "read-file", "--arg", f"path={elsewhere / 'private.txt'}")
    refused = run_cli(*args, env=env, cwd=project)
    assert refused.code == 1 and "outside the allowed roots" in refused.err and "--allow-dir" in refused.err
    allowed = run_cli(*args, "--allow-dir", str(elsewhere), "--json", env=env, cwd=project)
    assert allowed.code == 0, allowed.err
    assert allowed.json()["structuredContent"]["content"] == "not for the client"  # type: ignore[index]
    bad = run_cli(*args, "--allow-dir", str(elsewhere / "nope"), env=env, cwd=project)
    assert bad.code == 2 and "--allow-dir" in bad.err and "not a directory" in bad.err


def test_the_security_pages_refusal_example_is_what_a_user_sees(home: Path, project: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    block = readme.split("it exists) is told:\n\n```\n", 1)[1].split("```", 1)[0]
    command, shown = block.splitlines()[0], block.splitlines()[1]
    assert command.endswith("orchestrator call read-file --arg path=/etc/passwd")
    env = {k: v for k, v in os.environ.items() if k != "ORCHESTRATOR_ALLOW_DIRS"}
    done = run_cli("call", "read-file", "--arg", "path=/etc/passwd", env=env, cwd=project)
    assert done.code == 1
    assert done.err.strip() == shown.replace("/home/me/project", str(project))
