"""Imported servers and clients that list the tools once: `serve --connect-grace SECONDS`.

A one-shot client (the MCP Inspector's `--cli`, many hosts) lists the tools right after
initialize and never again. `orchestrator serve` runs as the installed console script and the
client is the SDK's own over stdio. The upstream is our fixture server, started behind a FIFO
the test opens: it cannot connect before the test says so, whatever the machine's speed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from tests._http import ORCHESTRATOR
from tests.fixtures.adapter_support import FIXTURE
from tests.helpers import envelope, run_cli

TIMEOUT = 120


def _serve(home: Path, servers: dict[str, Any], tmp_path: Path, *options: str) -> StdioServerParameters:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return StdioServerParameters(
        command=str(ORCHESTRATOR),
        args=["serve", "--home", str(home), "--servers", str(path), *options],
        env={"ORCHESTRATOR_HOME": str(home), "PATH": os.environ.get("PATH", "")},
        cwd=str(tmp_path),
    )


def _gated(gate: Path, namespace: str) -> dict[str, Any]:
    """Our fixture server, started only once something is written to the FIFO `gate`."""
    start = f"read _ < '{gate}'; exec '{sys.executable}' '{FIXTURE}' stdio"
    return {"command": "/bin/sh", "args": ["-c", start], "include": ["echo"], "namespace": namespace}


def _mute(namespace: str) -> dict[str, Any]:
    """A server that never answers initialize: connecting for as long as the test runs."""
    return {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"], "namespace": namespace}


def _names(listed: Any) -> set[str]:
    return {tool.name for tool in listed.tools}


async def test_a_client_that_lists_once_sees_the_tools_of_an_upstream_connecting_at_start_up(
    home: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    params = _serve(home, {"weather": _gated(gate, "weather")}, tmp_path, "--connect-grace", str(TIMEOUT))
    with anyio.fail_after(TIMEOUT):
        async with Client(params) as client:
            listed: list[set[str]] = []

            async def list_once() -> None:
                listed.append(_names(await client.list_tools()))

            async with anyio.create_task_group() as tg:
                tg.start_soon(list_once)
                await anyio.to_thread.run_sync(gate.write_text, "go\n")  # the upstream may start now
            assert "weather_echo" in listed[0]
            assert "list-files" in listed[0]  # the server's own skills, as always
            result = await client.call_tool("weather_echo", {"text": "hi"})
            assert not result.is_error
            assert result.structured_content == {"result": "hi"}


async def test_a_call_to_a_tool_of_an_upstream_still_connecting_is_not_connected_naming_the_server(
    home: Path, tmp_path: Path
) -> None:
    params = _serve(home, {"weather": _mute("weather")}, tmp_path, "--connect-grace", "0.5")
    with anyio.fail_after(TIMEOUT):
        async with Client(params) as client:
            names = _names(await client.list_tools())  # the grace is over: answered without the upstream
            assert "list-files" in names
            assert not any(name.startswith("weather_") for name in names)

            result = await client.call_tool("weather_forecast", {"city": "Oslo"})
            assert result.is_error
            assert result.structured_content is not None
            error = result.structured_content["error"]
            assert error["type"] == "not_connected"
            assert error["retryable"] is True
            assert "'weather'" in error["message"] and "'weather'" in error["where"]

            other = await client.call_tool("nowhere_forecast", {})  # no server's namespace: unknown
            assert other.structured_content is not None
            assert other.structured_content["error"]["type"] == "unknown_tool"


async def test_a_call_within_the_grace_waits_for_its_upstream_to_connect(home: Path, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    params = _serve(home, {"weather": _gated(gate, "weather")}, tmp_path, "--connect-grace", str(TIMEOUT))
    with anyio.fail_after(TIMEOUT):
        async with Client(params) as client:
            results: list[Any] = []

            async def call_once() -> None:
                results.append(await client.call_tool("weather_echo", {"text": "early"}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_once)
                await anyio.to_thread.run_sync(gate.write_text, "go\n")
            assert not results[0].is_error
            assert results[0].structured_content == {"result": "early"}


def test_connect_grace_must_be_a_number_of_seconds(home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    done = run_cli("serve", "--connect-grace", "-1", env=env, cwd=tmp_path)
    assert done.code == 2
    assert "--connect-grace" in done.err and "-1" in done.err


async def test_in_catalogue_mode_call_skill_of_an_upstream_still_connecting_is_not_connected(
    home: Path, tmp_path: Path
) -> None:
    params = _serve(home, {"weather": _mute("weather")}, tmp_path, "--connect-grace", "0.5", "--catalogue", "on")
    with anyio.fail_after(TIMEOUT):
        async with Client(params) as client:
            assert "call_skill" in _names(await client.list_tools())
            for tool, arguments in (
                ("call_skill", {"name": "weather_forecast", "arguments": {"city": "Oslo"}}),
                ("read_skill", {"name": "weather_forecast"}),
            ):
                result = await client.call_tool(tool, arguments)
                assert result.is_error, tool
                if tool == "call_skill":  # no outputSchema: the envelope is its structured content too
                    assert result.structured_content is not None
                error = envelope(result)  # the text always holds it (read_skill has an outputSchema)
                assert (error["type"], error["retryable"]) == ("not_connected", True), tool
                assert "'weather'" in error["message"]
