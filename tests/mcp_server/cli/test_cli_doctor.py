"""`orchestrator doctor`: its exit status says whether every check passed, and it judges the
pipelines that call imported tools once their upstream servers had their chance to connect.

The upstreams are real: our fixture MCP server over stdio, a server that never answers (`sleep`)
and one whose command does not exist.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests._scale import free_port
from tests.fixtures.adapter_support import FIXTURE
from tests.helpers import Run

SHOUT = "id: shout\nsteps:\n  - id: echoed\n    skill: fixture_echo\n    parameters: {text: hi}\n"
WAITS = "id: waits\nsteps:\n  - id: s\n    skill: slow_echo\n"
LOST = "id: lost\nsteps:\n  - id: s\n    skill: broken_echo\n"


def _servers(home: Path, **entries: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "servers.json").write_text(json.dumps({"mcpServers": entries}))


def _pipeline(home: Path, name: str, text: str) -> None:
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)


FIXTURE_SERVER = {"command": sys.executable, "args": [str(FIXTURE), "stdio"], "include": ["echo"]}


def test_doctor_exits_0_when_every_check_passes(cli: Callable[..., Run]) -> None:
    done = cli("doctor")
    assert done.code == 0, done.out + done.err
    assert "all checks passed" in done.out
    assert cli("doctor", "--json").json()["failed"] == []  # type: ignore[index]


def test_doctor_exits_1_when_the_state_or_the_queue_is_unreachable(cli: Callable[..., Run]) -> None:
    state = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    queue = f"redis://127.0.0.1:{free_port()}/0"
    done = cli("doctor", "--state", state, "--queue", queue)
    assert done.code == 1, done.out + done.err
    assert "UNREACHABLE" in done.out
    assert "FAILED:" in done.out and "state unreachable" in done.out and "queue unreachable" in done.out
    report = cli("doctor", "--state", state, "--json")
    assert report.code == 1 and report.json()["failed"] == ["state unreachable"]  # type: ignore[index]


def test_doctor_publishes_a_pipeline_of_imported_tools_once_its_server_connects(
    cli: Callable[..., Run], home: Path
) -> None:
    _servers(home, fixture=FIXTURE_SERVER)
    _pipeline(home, "shout", SHOUT)
    done = cli("doctor", "--json", timeout=120)
    assert done.code == 0, done.out + done.err
    report: Any = done.json()
    assert report["skills"]["not_published"] == [] and report["skills"]["pending"] == []
    assert report["servers"]["servers"] == [{"name": "fixture", "status": "connected", "tools": 1}]
    text = cli("doctor", timeout=120).out
    assert "'fixture' connected (1 tool(s))" in text and "not published:" not in text


def test_doctor_says_a_pipeline_waits_for_a_server_still_connecting_and_fails_for_one_that_cannot(
    cli: Callable[..., Run], home: Path
) -> None:
    _servers(home, slow={"command": "/bin/sleep", "args": ["600"]}, broken={"command": "/nonexistent/mcp-server"})
    _pipeline(home, "waits", WAITS)
    _pipeline(home, "lost", LOST)
    done = cli("doctor", "--connect-timeout", "1", timeout=120)
    assert done.code == 1, done.out + done.err
    assert "'slow' pending: still connecting after 1s" in done.out
    assert "pending: pipeline 'waits' waits for upstream 'slow' (still connecting)" in done.out
    assert "waits.yaml" not in next(line for line in done.out.splitlines() if "not published:" in line)
    assert "'broken' FAILED" in done.out and "/nonexistent/mcp-server" in done.out
    assert "lost.yaml: upstream 'broken' did not connect" in done.out
    assert "FAILED:     upstream 'broken' failed" in done.out
