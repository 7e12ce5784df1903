"""The hostile cases against the real `orchestrator serve` over stdio (issue 9, items 1-6).

A poisoned home must not stop start-up (exit 139 before), each bad file is reported on stderr
with its line and column, and the rest is served. A poisoned file dropped into a watched folder
must not kill the running server. And one stdio client's attacks cost that call alone.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import ToolListChangedNotification

from mcp_server import create_server
from tests._attack import DEEP, billion_laughs, poll_until
from tests.helpers import write_skill

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
TIMEOUT = 90
GOOD = {"run": {"python": "impl:main"}, "inputs": {"type": "object", "properties": {}}}
SPIN = "def main():\n    while True:\n        pass\n"


@asynccontextmanager
async def serve(home: Path, skills: Path, errlog: IO[str], **client: Any) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=str(ORCHESTRATOR),
        args=["serve", "--home", str(home), "--skills", str(skills)],
        env={"ORCHESTRATOR_HOME": str(home)},
    )
    async with Client(stdio_client(params, errlog=errlog), mode="legacy", **client) as session:
        yield session


def _poison(home: Path, skills: Path) -> None:
    create_server(home=home)  # the home's defaults
    write_skill(skills, "good", contract=GOOD, impl="def main():\n    return {'ok': True}\n")
    bad = skills / "deep-front"
    bad.mkdir(parents=True)
    (bad / "SKILL.md").write_text(f"---\nname: deep-front\ndescription: x\nmetadata: {DEEP}\n---\nbody\n")
    (write_skill(skills, "deep-contract") / "skill.yaml").write_text(f"inputs: {DEEP}\n")
    (home / "pipelines" / "deep.yaml").write_text(f"id: deep\nsteps: {DEEP}\n")
    (home / "pipelines" / "laughs.yaml").write_text(billion_laughs())
    (home / "servers.json").write_text('{"mcpServers": ' + DEEP + "}")
    registry = home / "models" / "registry.yaml"
    registry.write_text(registry.read_text() + f"\nextra: {DEEP}\n")


async def test_serve_starts_with_a_poisoned_home_reports_each_file_and_serves_the_rest(
    home: Path, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    _poison(home, skills)
    errfile = tmp_path / "stderr.txt"
    with errfile.open("w") as errlog, anyio.fail_after(TIMEOUT):
        async with serve(home, skills, errlog) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "good" in names and not {"deep-front", "deep-contract", "deep", "laughs"} & names
            assert (await client.call_tool("good", {})).structured_content == {"ok": True}
    err = errfile.read_text()
    for where in (
        "deep-front/SKILL.md: error: front matter is not valid YAML at line 4, column 110",
        "deep-contract/skill.yaml: error: not valid YAML at line 1, column 108",
        "pipelines/deep.yaml: error: line 2, column 107: YAML limit",
        "pipelines/laughs.yaml: error: line ",
        "servers.json: error: line 1, column 115",
        "models/registry.yaml: error: line ",
    ):
        assert where in err, err
    assert err.count("hint:") >= 6 and "Traceback" not in err


async def test_a_poisoned_file_dropped_into_a_watched_folder_does_not_kill_the_server(
    home: Path, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "good", contract=GOOD, impl="def main():\n    return {'ok': True}\n")
    changed = [anyio.Event()]

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            changed[-1].set()

    errfile = tmp_path / "stderr.txt"
    with errfile.open("w") as errlog, anyio.fail_after(TIMEOUT):
        async with serve(home, skills, errlog, message_handler=on_message) as client:
            assert "good" in {t.name for t in (await client.list_tools()).tools}
            staging = tmp_path / "staging"
            bad = staging / "deep-front"
            bad.mkdir(parents=True)
            (bad / "SKILL.md").write_text(f"---\nname: deep-front\ndescription: x\nmetadata: {DEEP}\n---\n")
            (home / "pipelines" / "deep.yaml").write_text(f"id: deep\nsteps: {DEEP}\n")
            (home / "pipelines" / "laughs.yaml").write_text(billion_laughs())
            bad.rename(skills / "deep-front")
            # A good skill after the bad ones: its arrival shows the watcher has read them all (a
            # change of skills re-verifies every pipeline too).
            write_skill(staging, "later", contract=GOOD, impl="def main():\n    return {'later': True}\n")
            (staging / "later").rename(skills / "later")
            names: set[str] = set()
            while "later" not in names:  # each batch of the watcher ends in a list_changed
                await changed[-1].wait()
                changed.append(anyio.Event())
                names = {t.name for t in (await client.list_tools()).tools}
            assert "good" in names and not {"deep-front", "deep", "laughs"} & names
            await poll_until(
                lambda: "deep-front/SKILL.md: error: front matter is not valid YAML" in errfile.read_text()
            )
            assert (await client.call_tool("later", {})).structured_content == {"later": True}


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("validate_pipeline", {"yaml": "id: x\nsteps: " + DEEP}, "nested more than"),
        ("register_pipeline", {"yaml": billion_laughs()}, "aliases counted"),
        (
            "collect",
            {"items": [{"a": "a" * 40 + "!"}], "where": [{"field": "a", "op": "matches", "value": "(a+)+$"}]},
            None,
        ),
        ("exits", {}, "SystemExit"),
        ("spin", {}, "was stopped"),
        ("markdown-report", {"title": "t", "template": "{{ 'a' * (10 ** 9) }}"}, "too large"),
    ],
)
async def test_each_attack_over_stdio_costs_its_call_alone(
    home: Path, tmp_path: Path, tool: str, arguments: dict[str, Any], expected: str | None
) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "exits", contract=GOOD, impl="import sys\ndef main():\n    sys.exit(1)\n")
    write_skill(skills, "spin", contract={**GOOD, "timeout": 2}, impl=SPIN)
    write_skill(skills, "good", contract=GOOD, impl="def main():\n    return {'ok': True}\n")
    with (tmp_path / "stderr.txt").open("w") as errlog, anyio.fail_after(TIMEOUT):
        async with serve(home, skills, errlog) as client:
            result = await client.call_tool(tool, arguments)
            text = " ".join(getattr(c, "text", "") for c in result.content)
            if expected is None:
                assert not result.is_error, text
            else:
                assert expected in text, text
            assert "Traceback" not in text
            assert (await client.call_tool("good", {})).structured_content == {"ok": True}
