"""The README's snippets work as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
from mcp import Client

from mcp_server import create_server
from skills import check_folder
from skills.core.errors import ERROR_ENVELOPE_SCHEMA

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _block_after(label: str) -> str:
    """The fenced code block that follows the line `label`."""
    match = re.search(re.escape(label) + r"\s*\n+```\w*\n(.*?)```", README, re.S)
    assert match, f"README has no code block after {label!r}"
    return match.group(1)


async def test_the_write_your_own_skill_example_is_a_valid_working_skill(home: Path) -> None:
    folder = home / "skills" / "word-count"
    folder.mkdir(parents=True)
    for name in ("SKILL.md", "skill.yaml", "impl.py"):
        (folder / name).write_text(_block_after(f"`~/.orchestrator/skills/word-count/{name}`:"))
    _, _, problems = check_folder(folder, strict=True)
    assert problems == []
    async with Client(create_server()) as client:
        result = await client.call_tool("word-count", {"text": "three little words"})
    assert result.structured_content == {"words": 3}


def test_the_claude_desktop_snippet_is_valid_json_that_starts_the_server() -> None:
    entry = json.loads(_block_after("The entry it writes looks like this (with the absolute path of your checkout):"))
    server = entry["mcpServers"]["orchestrator"]
    assert server["command"].endswith("/.venv/bin/orchestrator") and server["args"] == ["serve"]


def test_ci_runs_exactly_the_test_command_of_the_readme() -> None:
    command = _block_after("### Run the tests").strip()
    assert command in (REPO / ".ci" / "run").read_text().splitlines()


def test_the_test_command_installs_from_the_lock_with_the_uv_the_lock_pins() -> None:
    command = _block_after("### Run the tests").strip()
    assert "uv sync -q --locked --all-extras" in command  # a stale lock fails instead of resolving anew
    pinned = re.search(r"pip install -q uv==(\S+)", command)
    locked = re.search(r'\[\[package\]\]\nname = "uv"\nversion = "([^"]+)"', (REPO / "uv.lock").read_text())
    assert pinned and locked and pinned.group(1) == locked.group(1)  # the uv that syncs is the one the lock holds


def test_the_pipelines_shown_are_the_shipped_examples() -> None:
    examples = REPO / "pipelines" / "examples"
    blocks = re.findall(r"```yaml\n(id: .*?)```", README, re.S)
    shipped = {p.read_text().strip() for p in examples.glob("*.yaml")}
    assert len(blocks) >= 2
    for block in blocks:
        assert block.strip() in shipped


def test_npx_commands_answer_yes_so_they_run_in_a_non_interactive_shell() -> None:
    calls = re.findall(r"\bnpx\s+([-@]\S+)", README)  # a command: its first word is a flag or a package
    assert calls and all(flag == "-y" for flag in calls)


def test_commands_name_the_program_one_way() -> None:
    """`.venv/bin/orchestrator` everywhere, except the pipx and uvx forms that put it on PATH."""
    bare = [
        line
        for line in README.splitlines()
        if re.search(
            r"(^|[\s`(])orchestrator (serve|call|run|runs|skills|pipelines|servers|install|docs|doctor)\b",
            line,
        )
        and "pipx install" not in line
        and "uvx --from" not in line
    ]
    assert bare == []


async def test_the_error_envelope_shown_is_what_a_client_gets(home: Path) -> None:
    shown = json.loads(_block_after("envelope:"))
    jsonschema.validate(shown, ERROR_ENVELOPE_SCHEMA)
    async with Client(create_server()) as client:
        result = await client.call_tool("json-query", {"query": 5})
    assert json.loads(result.content[0].text) == shown  # type: ignore[union-attr]
