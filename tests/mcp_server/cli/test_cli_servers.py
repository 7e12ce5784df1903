"""`orchestrator servers list|test` against a real upstream (our fixture server over stdio)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "upstream_server.py"


def _servers_file(tmp_path: Path) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "fixture": {
                        "command": sys.executable,
                        "args": [str(FIXTURE), "stdio"],
                        "include": ["echo", "add", "count"],
                    },
                    "dead": {"command": "/bin/false"},
                    "broken": {"args": ["no command"]},
                }
            }
        )
    )
    return path


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    return subprocess.run([str(ORCHESTRATOR), *args], capture_output=True, text=True, env=env, timeout=120)


def test_servers_list_reports_status_tool_count_and_errors(tmp_path: Path) -> None:
    servers = _servers_file(tmp_path)
    done = _run("servers", "list", "--servers", str(servers), "--timeout", "30", "--json", home=tmp_path / "h")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    rows = {row["name"]: row for row in data["servers"]}
    assert rows["fixture"]["status"] == "ok" and rows["fixture"]["tools"] == 3
    assert rows["dead"]["status"] == "failed" and "closed the connection" in rows["dead"]["last_error"]
    assert any("neither `command` nor `url`" in p for p in data["problems"])


def test_servers_test_lists_the_tools_of_one_server_and_fails_for_a_dead_one(tmp_path: Path) -> None:
    servers = _servers_file(tmp_path)
    ok = _run("servers", "test", "fixture", "--servers", str(servers), "--timeout", "30", home=tmp_path / "h")
    assert ok.returncode == 0, ok.stderr
    assert "fixture: ok" in ok.stdout and "fixture_echo" in ok.stdout
    dead = _run("servers", "test", "dead", "--servers", str(servers), "--timeout", "30", home=tmp_path / "h")
    assert dead.returncode == 1 and "FAILED" in dead.stdout
    unknown = _run("servers", "test", "nope", "--servers", str(servers), home=tmp_path / "h")
    assert unknown.returncode == 2 and "configured: fixture, dead" in unknown.stderr


async def test_serve_publishes_upstream_tools_over_stdio_without_delaying_initialize(tmp_path: Path) -> None:
    servers = _servers_file(tmp_path)
    params = StdioServerParameters(
        command=str(ORCHESTRATOR),
        args=["serve", "--home", str(tmp_path / "h"), "--servers", str(servers)],
        env={"PATH": os.environ["PATH"]},
    )
    with anyio.fail_after(90):
        async with Client(params, mode="legacy") as client:
            while "fixture_echo" not in {t.name for t in (await client.list_tools()).tools}:
                await anyio.sleep(0.05)  # the upstream connects in the background; poll the listing
            result = await client.call_tool("fixture_echo", {"text": "through the orchestrator"})
    assert not result.is_error
    assert "through the orchestrator" in result.content[0].text
