"""Where confinement is unavailable the product still works, and says so everywhere it matters.

"Unavailable" for real: a home whose config.yaml points `isolation: bwrap:` at a program that
fails the way bwrap fails in a container without user namespaces, or a PATH without bwrap.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import create_server
from skills import Home
from tests._scripted import Script, connect
from tests.helpers import ORCHESTRATOR, run_cli, write_skill

BROKEN = "bwrap: No permissions to create new namespace, likely because the kernel does not allow it"
READER = "import json, sys\nargs = json.load(sys.stdin)\nprint(json.dumps({'text': open(args['path']).read()}))\n"


@pytest.fixture
def broken_home(home: Path, tmp_path: Path) -> Path:
    """A home whose isolation settings name a bwrap that cannot make a namespace here."""
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && echo "bubblewrap 0.8.0" && exit 0\necho "{BROKEN}" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    Home(home).install()
    (home / "config.yaml").write_text(f"isolation:\n  bwrap: {fake}\n")
    return home


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "ORCHESTRATOR_HOME": str(home), **extra}


def test_doctor_says_isolation_is_unavailable_and_why(broken_home: Path, tmp_path: Path) -> None:
    done = run_cli("doctor", "--json", env=cli_env(broken_home), cwd=tmp_path)
    assert done.code == 0, done.err
    isolation = done.json()["isolation"]  # type: ignore[index]
    assert isolation["available"] is False and BROKEN in isolation["reason"]
    text = run_cli("doctor", env=cli_env(broken_home), cwd=tmp_path)
    assert "isolation:  UNAVAILABLE" in text.out and "run unconfined" in text.out and "will not publish" in text.out


def test_doctor_without_bwrap_on_path_says_it_is_not_installed(home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done = run_cli("doctor", "--json", env=cli_env(home, PATH=str(empty)), cwd=tmp_path)
    isolation = done.json()["isolation"]  # type: ignore[index]
    assert isolation["available"] is False
    assert "not installed" in isolation["reason"] and "apt-get install bubblewrap" in isolation["reason"]


def test_skills_show_says_a_script_skill_will_run_unconfined(broken_home: Path, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "reader", contract={"run": {"script": "scripts/run.py"}}, files={"scripts/run.py": READER})
    done = run_cli("skills", "show", "reader", "--skills", str(skills), env=cli_env(broken_home), cwd=tmp_path)
    line = next(line for line in done.out.splitlines() if line.startswith("confinement:"))
    assert "UNCONFINED" in line and BROKEN in line


async def test_a_script_skill_still_runs_and_honestly_has_the_servers_file_access(
    broken_home: Path, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "reader", contract={"run": {"script": "scripts/run.py"}}, files={"scripts/run.py": READER})
    outside = tmp_path / "outside.txt"
    outside.write_text("not the skill's")
    server = create_server(home=broken_home, skill_dirs=[skills], builtin=False, pipelines=False)
    async with Client(server) as client:
        result = await client.call_tool("reader", {"path": str(outside)})
    assert not result.is_error and result.structured_content == {"text": "not the skill's"}


async def test_serve_says_once_at_start_up_that_skills_run_unconfined(broken_home: Path, tmp_path: Path) -> None:
    process = await anyio.open_process(
        [str(ORCHESTRATOR), "serve"], env=cli_env(broken_home), cwd=tmp_path, stdin=-1, stdout=-1, stderr=-1
    )
    said = b""
    try:
        assert process.stderr is not None and process.stdin is not None
        with anyio.fail_after(60):
            while b"UNCONFINED" not in said:
                said += await process.stderr.receive()
        await process.stdin.aclose()  # end of input: the server stops
        with anyio.fail_after(30):
            async for chunk in process.stderr:
                said += chunk
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
        await process.aclose()
    text = said.decode()
    assert text.count("UNCONFINED") == 1 and BROKEN in text and "create_skill will not" in text
    assert "Traceback" not in text


SIMPLE = {"complexity": "simple", "reason": "one function"}
PLAN = {
    "name": "shout",
    "title": "Shout",
    "description": "Upper-case a text. Use it to shout.",
    "inputs": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "outputs": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "timeout": 10,
    "test_cases": [{"arguments": {"text": "hi"}, "expected": {"text": "HI"}}],
}
WRITTEN = {
    "script": textwrap.dedent(
        """\
        import json, sys
        print(json.dumps({"text": json.load(sys.stdin)["text"].upper()}))
        """
    ),
    "body": "# Shout\n",
}
APPROVED = {"approved": True, "reasons": ["fine"]}


async def create(home: Path) -> dict[str, Any]:
    script = Script.of(SIMPLE, PLAN, WRITTEN, APPROVED)
    async with connect(home, script) as session:
        result = await session.client.call_tool("create_skill", {"request": "shout a text"})
    assert result.structured_content is not None
    assert result.is_error is not result.structured_content["created"]  # a refusal is an error result
    return result.structured_content


async def test_create_skill_refuses_to_test_or_publish_unconfined(broken_home: Path) -> None:
    data = await create(broken_home)
    assert data["created"] is False and data["stage"] == "test" and data["tests"] == []
    (reason,) = data["reasons"]
    assert "not tested and not published" in reason and BROKEN in reason
    assert "allow_unconfined: true" in reason and str(broken_home / "config.yaml") in reason
    assert not (broken_home / "skills" / "shout").exists()
    assert "shout" not in Home(broken_home).read_registry()


async def test_create_skill_tests_and_publishes_unconfined_when_the_home_allows_it(broken_home: Path) -> None:
    config = broken_home / "config.yaml"
    config.write_text(config.read_text() + "  allow_unconfined: true\n")
    data = await create(broken_home)
    assert data["created"] is True and data["published"] is True, json.dumps(data["reasons"])
    assert data["tests_passed"] == 1
