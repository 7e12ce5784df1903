"""The README's snippets work as written: the tour's skill and pipeline are written where it says,
with its own commands, and print what it shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
from mcp import Client

from mcp_server import create_server
from mcp_server.cli._docs import section
from skills import check_folder
from skills.core.errors import ERROR_ENVELOPE_SCHEMA
from tests.helpers import ORCHESTRATOR

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"


def _block_after(label: str, text: str = README) -> str:
    """The fenced code block that follows the line `label`."""
    match = re.search(re.escape(label) + r"\s*\n+```\w*\n(.*?)```", text, re.S)
    assert match, f"no code block after {label!r}"
    return match.group(1)


def _write_files_shown(user_home: Path) -> None:
    """Every file the README shows under `~/...`, written where its label says."""
    for path in re.findall(r"^`~/([^`]+)`:$", README, re.M):
        target = user_home / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_block_after(f"`~/{path}`:"))


def _run_shown(label: str, user_home: Path) -> list[str]:
    """Run each command of the bash block after `label` as a user whose home is `user_home`; their stdout."""
    env = {k: v for k, v in os.environ.items() if k != "ORCHESTRATOR_HOME"}  # the default home: ~/.orchestrator
    env["HOME"] = str(user_home)
    outputs = []
    for command in _block_after(label).strip().splitlines():
        assert command.startswith(".venv/bin/orchestrator "), command
        command = str(ORCHESTRATOR) + command.removeprefix(".venv/bin/orchestrator")
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
    return outputs


def test_the_tours_skill_and_pipeline_run_as_printed(tmp_path: Path) -> None:
    user_home = tmp_path / "me"
    _write_files_shown(user_home)
    assert (user_home / ".orchestrator" / "skills" / "word-count" / "impl.py").is_file()
    assert (user_home / ".orchestrator" / "pipelines" / "count-all.yaml").is_file()
    _, called = _run_shown("Check it and call it:", user_home)
    assert json.loads(called) == json.loads(_block_after("which prints"))
    _, ran = _run_shown("Check it and run it:", user_home)
    shown = _block_after("which prints the outputs (the progress of each step goes to stderr)")
    assert json.loads(ran) == json.loads(shown)


def test_the_tours_examples_are_short() -> None:
    files = ("SKILL.md", "skill.yaml", "impl.py")
    skill = [_block_after(f"`~/.orchestrator/skills/word-count/{name}`:") for name in files]
    pipeline = _block_after("`~/.orchestrator/pipelines/count-all.yaml`:")
    assert sum(len(block.splitlines()) for block in skill) <= 10
    assert len(pipeline.splitlines()) <= 12
    assert len(README.splitlines()) <= 300


async def test_the_write_your_own_skill_examples_are_valid_working_skills(home: Path) -> None:
    for text in (README, (DOCS / "getting-started.md").read_text()):
        await _check_word_count(home, text)


async def _check_word_count(home: Path, text: str) -> None:
    folder = home / "skills" / "word-count"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("SKILL.md", "skill.yaml", "impl.py"):
        (folder / name).write_text(_block_after(f"`~/.orchestrator/skills/word-count/{name}`:", text))
    _, _, problems = check_folder(folder, strict=True)
    assert problems == []
    async with Client(create_server()) as client:
        result = await client.call_tool("word-count", {"text": "three little words"})
    assert result.structured_content == {"words": 3}


def test_the_claude_desktop_snippet_is_valid_json_that_starts_the_server() -> None:
    entry = json.loads(_block_after("The entry it writes looks like this (with the absolute path of your checkout):"))
    server = entry["mcpServers"]["orchestrator"]
    assert server["command"].endswith("/.venv/bin/orchestrator") and server["args"] == ["serve"]


def test_the_install_command_is_the_one_newcomers_have_always_run() -> None:
    command = _block_after("In a checkout of this repository, with Python 3.11+:").strip()
    assert command == "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/orchestrator serve"


def test_ci_runs_exactly_the_test_command_of_the_readme() -> None:
    command = _block_after("## Run the tests").strip()
    assert command in (REPO / ".ci" / "run").read_text().splitlines()


def test_the_test_command_installs_from_the_lock_with_the_uv_the_lock_pins() -> None:
    command = _block_after("## Run the tests").strip()
    assert "uv sync -q --locked --all-extras" in command  # a stale lock fails instead of resolving anew
    pinned = re.search(r"pip install -q uv==(\S+)", command)
    locked = re.search(r'\[\[package\]\]\nname = "uv"\nversion = "([^"]+)"', (REPO / "uv.lock").read_text())
    assert pinned and locked and pinned.group(1) == locked.group(1)  # the uv that syncs is the one the lock holds


def test_the_pipelines_shown_in_the_reference_are_the_shipped_examples() -> None:
    examples = REPO / "pipelines" / "examples"
    examples_section = section((DOCS / "pipelines.md").read_text(), "examples")
    assert examples_section
    blocks = re.findall(r"```yaml\n(id: .*?)```", examples_section, re.S)
    shipped = {p.read_text().strip() for p in examples.glob("*.yaml")}
    assert len(blocks) >= 2
    for block in blocks:
        assert block.strip() in shipped


def test_npx_commands_answer_yes_so_they_run_in_a_non_interactive_shell() -> None:
    text = README + (DOCS / "getting-started.md").read_text()
    calls = re.findall(r"\bnpx\s+([-@]\S+)", text)  # a command: its first word is a flag or a package
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
    shown = json.loads(_block_after("envelope:", (DOCS / "mcp.md").read_text()))
    jsonschema.validate(shown, ERROR_ENVELOPE_SCHEMA)
    async with Client(create_server()) as client:
        result = await client.call_tool("json-query", {"query": 5})
    assert json.loads(result.content[0].text) == shown  # type: ignore[union-attr]
