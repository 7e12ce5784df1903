"""`orchestrator serve` as a real subprocess: stdio and streamable HTTP, both protocol eras.

Every server here is the installed console script started the way a user (or Claude Desktop)
starts it; clients are the SDK's own. Waits are on lines and events, bounded by fail_after.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.streams.text import TextReceiveStream
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ToolListChangedNotification

from tests._http import MCP_HEADERS, ORCHESTRATOR, TIMEOUT, http_server, initialize
from tests.helpers import write_skill

ECHO_CONTRACT = {
    "inputs": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    },
    "outputs": {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]},
    "run": {"python": "impl:echo"},
}
ECHO_IMPL = "def echo(text):\n    return {'echo': text}\n"
INITIALIZE = initialize()


def _echo_skill(parent: Path, name: str) -> Path:
    return write_skill(parent, name, contract=ECHO_CONTRACT, impl=ECHO_IMPL)


def _add_skill_atomically(skills_dir: Path, staging: Path, name: str) -> None:
    """Write the folder elsewhere and move it in: the watcher sees one complete skill appear."""
    _echo_skill(staging, name).rename(skills_dir / name)


def _names(listed: Any) -> set[str]:
    return {tool.name for tool in listed.tools}


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "skills"
    _echo_skill(folder, "echo-text")
    return folder


def _stdio(home: Path, skills: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(ORCHESTRATOR),
        args=["serve", "--home", str(home), "--skills", str(skills)],
        env={"ORCHESTRATOR_HOME": str(home)},
    )


# -- stdio -------------------------------------------------------------------------------------
async def test_stdio_serves_a_handshake_era_client_and_tells_it_when_a_skill_is_added(
    home: Path, skills_dir: Path, tmp_path: Path
) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            changed.set()

    with anyio.fail_after(TIMEOUT):
        async with Client(_stdio(home, skills_dir), mode="legacy", message_handler=on_message) as client:
            assert client.protocol_version.startswith("2025-")
            assert client.server_info is not None and client.server_info.name == "orchestrator"
            assert {"echo-text", "list-files"} <= _names(await client.list_tools())
            result = await client.call_tool("echo-text", {"text": "hi"})
            assert not result.is_error and result.structured_content == {"echo": "hi"}

            _add_skill_atomically(skills_dir, tmp_path / "staging", "echo-later")
            await changed.wait()
            assert "echo-later" in _names(await client.list_tools())
            result = await client.call_tool("echo-later", {"text": "new"})
            assert result.structured_content == {"echo": "new"}


async def test_stdio_serves_a_2026_client_and_its_subscription_hears_of_a_new_skill(
    home: Path, skills_dir: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with Client(_stdio(home, skills_dir)) as client:
            assert client.protocol_version == "2026-07-28"
            assert "echo-text" in _names(await client.list_tools())
            result = await client.call_tool("echo-text", {"text": "hi"})
            assert result.structured_content == {"echo": "hi"}

            async with client.listen(tools_list_changed=True) as sub:
                _add_skill_atomically(skills_dir, tmp_path / "staging", "echo-later")
                async for event in sub:
                    if isinstance(event, ToolsListChanged):
                        break
            assert "echo-later" in _names(await client.list_tools())


# -- HTTP --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_http_serves_both_protocol_eras_on_loopback(home: Path, mode: str) -> None:
    async with http_server(home) as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with Client(url, mode=mode) as client:
                expected = "2026-07-28" if mode == "auto" else "2025-11-25"
                assert client.protocol_version == expected
                assert "text-stats" in _names(await client.list_tools())
                result = await client.call_tool("text-stats", {"text": "one two three"})
    assert not result.is_error, result.content
    assert result.structured_content is not None and result.structured_content["words"] == 3


async def test_http_tells_both_eras_when_a_skill_is_added(home: Path, skills_dir: Path, tmp_path: Path) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            changed.set()

    async with http_server(home, "--skills", str(skills_dir)) as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with (
                Client(url, mode="legacy", message_handler=on_message) as legacy,
                Client(url) as modern,
            ):
                for client in (legacy, modern):  # what initialize / server/discover promise is sent
                    caps = client.server_capabilities
                    assert caps.tools is not None and caps.tools.list_changed
                    assert caps.prompts is not None and caps.prompts.list_changed
                assert "echo-text" in _names(await legacy.list_tools())
                async with modern.listen(tools_list_changed=True) as sub:
                    _add_skill_atomically(skills_dir, tmp_path / "staging", "echo-later")
                    async for event in sub:
                        if isinstance(event, ToolsListChanged):
                            break
                await changed.wait()
                assert "echo-later" in _names(await legacy.list_tools())
                assert "echo-later" in _names(await modern.list_tools())


async def test_http_with_a_token_refuses_requests_without_it_and_serves_those_with_it(home: Path) -> None:
    async with http_server(home, "--auth-token", "secret") as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient() as raw:
                refused = await raw.post(url, json=INITIALIZE, headers=MCP_HEADERS)
                wrong = await raw.post(url, json=INITIALIZE, headers=MCP_HEADERS | {"authorization": "Bearer nope"})
            assert refused.status_code == 401
            assert wrong.status_code == 401

            for mode in ("legacy", "auto"):  # the SDK turns the 401 into an error response
                with pytest.RaisesGroup(MCPError, flatten_subgroups=True):
                    async with Client(url, mode=mode) as client:
                        await client.list_tools()

            for mode in ("legacy", "auto"):
                http = create_mcp_http_client(headers={"Authorization": "Bearer secret"})
                async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                    result = await client.call_tool("text-stats", {"text": "a b"})
                assert not result.is_error and result.structured_content is not None


async def test_http_refuses_a_request_for_a_foreign_host_name(home: Path) -> None:
    async with http_server(home) as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient() as raw:
                rebound = await raw.post(url, json=INITIALIZE, headers=MCP_HEADERS | {"host": "evil.example"})
                normal = await raw.post(url, json=INITIALIZE, headers=MCP_HEADERS)
    assert 400 <= rebound.status_code < 500
    assert normal.status_code == 200


async def test_http_stateless_answers_a_call_and_takes_the_token_from_the_environment(home: Path) -> None:
    async with http_server(home, "--stateless", env={"ORCHESTRATOR_TOKEN": "from-env"}) as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient() as raw:
                assert (await raw.post(url, json=INITIALIZE, headers=MCP_HEADERS)).status_code == 401
            for mode in ("legacy", "auto"):
                http = create_mcp_http_client(headers={"Authorization": "Bearer from-env"})
                async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                    result = await client.call_tool("text-stats", {"text": "x y z"})
                assert result.structured_content is not None and result.structured_content["words"] == 3


# -- stopping ----------------------------------------------------------------------------------
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_ctrl_c_stops_the_server_cleanly(home: Path, transport: str) -> None:
    args = [str(ORCHESTRATOR), "serve", "--transport", transport, "--port", "0", "--home", str(home)]
    process = await anyio.open_process(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with anyio.fail_after(TIMEOUT):
            assert process.stdin is not None and process.stdout is not None and process.stderr is not None
            if transport == "http":
                seen = ""
                async for chunk in TextReceiveStream(process.stderr):
                    seen += chunk
                    if "orchestrator: serving http://" in seen:
                        break
            else:  # answered initialize: the server is up and serving
                await process.stdin.send((_json(INITIALIZE) + "\n").encode())
                reply = b""
                async for chunk in process.stdout:
                    reply += chunk
                    if b"\n" in reply:
                        break
                assert b'"serverInfo"' in reply
            process.send_signal(signal.SIGINT)
            code = await process.wait()
            rest = b"".join([chunk async for chunk in process.stderr]).decode()
        assert code == 0, rest
        assert "Traceback" not in rest
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()


def _json(data: Any) -> str:
    import json

    return json.dumps(data)
