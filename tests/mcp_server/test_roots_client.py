"""A client's MCP roots decide what file built-ins read in its handshake-era session.

Real `Client`s with a `list_roots_callback` (so they declare the roots capability and answer
`roots/list`), against in-memory servers.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from mcp_server import create_server


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "file.txt").write_text(f"in {folder.name}")
    return a, b


class Roots:
    """The client's roots, changeable; counts how often the server asked for them."""

    def __init__(self, *paths: Path) -> None:
        self.paths, self.asked = list(paths), 0

    async def __call__(self, context: Any) -> types.ListRootsResult:
        self.asked += 1
        return types.ListRootsResult(roots=[types.Root(uri=p.as_uri(), name=p.name) for p in self.paths])


async def read(client: Client, path: Path) -> types.CallToolResult:
    with anyio.fail_after(30):
        return await client.call_tool("read-file", {"path": str(path)})


async def test_client_roots_narrow_what_a_handshake_era_session_may_read(
    home: Path, folders: tuple[Path, Path]
) -> None:
    a, b = folders
    roots = Roots(a)
    server = create_server(home=home, allow_dirs=[a.parent], pipelines=False)
    async with Client(server, mode="legacy", list_roots_callback=roots) as client:
        allowed = await read(client, a / "file.txt")
        refused = await read(client, b / "file.txt")
        await read(client, a / "file.txt")
    assert not allowed.is_error and allowed.structured_content is not None
    assert allowed.structured_content["content"] == "in a"
    assert refused.is_error
    text = refused.content[0].text
    assert f"outside the allowed roots ({a}; from the client's roots)" in text and "root in your MCP client" in text
    assert roots.asked == 1  # asked once, kept for the session


async def test_client_roots_cannot_widen_the_folders_the_server_was_given(
    home: Path, folders: tuple[Path, Path], tmp_path: Path
) -> None:
    a, _ = folders
    server = create_server(home=home, allow_dirs=[a], pipelines=False)
    async with Client(server, mode="legacy", list_roots_callback=Roots(Path("/"))) as client:
        inside = await read(client, a / "file.txt")
        outside = await read(client, tmp_path / "b" / "file.txt")
        passwd = await read(client, Path("/etc/passwd"))
    assert not inside.is_error
    assert outside.is_error and passwd.is_error and f"({a}; from the client's roots)" in passwd.content[0].text


async def test_client_roots_replace_the_default_working_directory(
    home: Path, folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, b = folders
    monkeypatch.delenv("ORCHESTRATOR_ALLOW_DIRS")
    server = create_server(home=home, pipelines=False)  # default: the cwd (the checkout), not b
    async with Client(server, mode="legacy", list_roots_callback=Roots(b)) as client:
        result = await read(client, b / "file.txt")
    assert not result.is_error and result.structured_content is not None


async def test_a_changed_root_list_is_asked_for_again(home: Path, folders: tuple[Path, Path]) -> None:
    a, b = folders
    roots = Roots(a)
    server = create_server(home=home, allow_dirs=[a.parent], pipelines=False)
    async with Client(server, mode="legacy", list_roots_callback=roots) as client:
        assert (await read(client, b / "file.txt")).is_error
        roots.paths = [b]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # roots leave the spec in 2026-07-28
            await client.send_roots_list_changed()
        with anyio.fail_after(10):  # the notification and the next call travel separately
            while (await read(client, b / "file.txt")).is_error:
                await anyio.sleep(0.01)
    assert roots.asked == 2


async def test_a_2026_07_28_client_is_not_asked_and_the_servers_roots_apply(
    home: Path, folders: tuple[Path, Path]
) -> None:
    a, b = folders
    roots = Roots(a)
    server = create_server(home=home, allow_dirs=[b], pipelines=False)
    async with Client(server, list_roots_callback=roots) as client:
        result = await read(client, b / "file.txt")
    assert not result.is_error and roots.asked == 0


async def test_a_client_that_fails_roots_list_gets_the_servers_roots(home: Path, folders: tuple[Path, Path]) -> None:
    a, _ = folders

    async def broken(context: Any) -> types.ErrorData:
        return types.ErrorData(code=-32603, message="no roots today")

    server = create_server(home=home, allow_dirs=[a], pipelines=False)
    async with Client(server, mode="legacy", list_roots_callback=broken) as client:
        result = await read(client, a / "file.txt")
    assert not result.is_error
