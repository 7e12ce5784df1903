"""Live reload: editing, adding or removing a skill folder updates the tools and tells clients."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client

from mcp_server import create_server
from tests.helpers import write_skill

CONTRACT: dict[str, Any] = {
    "inputs": {"type": "object", "properties": {"x": {"type": "integer"}}},
    "run": {"python": "impl:main"},
}
IMPL = "def main(x=0):\n    return {'x': x}\n"


class ToolListEvents:
    """A client message handler that queues tools/list_changed notifications."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[str](100)

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._send.send_nowait("tools")

    async def receive(self) -> str:
        return await self._receive.receive()

    def close(self) -> None:
        self._send.close()
        self._receive.close()


@pytest.fixture
def events() -> Iterator[ToolListEvents]:
    queue = ToolListEvents()
    yield queue
    queue.close()


async def test_a_handshake_era_client_is_told_when_skills_are_added_edited_and_removed(
    tmp_path: Path, events: ToolListEvents
) -> None:
    root = tmp_path / "skills"
    root.mkdir()
    server = create_server(skill_dirs=[root], watch=True)
    async with server.watching(), Client(server, mode="legacy", message_handler=events) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        names = {t.name for t in (await client.list_tools()).tools}
        assert "fresh" not in names

        write_skill(root, "fresh", contract=CONTRACT, impl=IMPL)
        with anyio.fail_after(10):
            assert await events.receive() == "tools"
            while "fresh" not in {t.name for t in (await client.list_tools()).tools}:
                await events.receive()
        assert (await client.call_tool("fresh", {"x": 3})).structured_content == {"x": 3}

        edited = {**CONTRACT, "inputs": {"type": "object", "properties": {"x": {"type": "string"}}}}
        write_skill(root, "fresh", contract=edited, description="Edited description.")
        with anyio.fail_after(10):
            while True:
                await events.receive()
                tool = {t.name: t for t in (await client.list_tools()).tools}["fresh"]
                if tool.description == "Edited description.":
                    break
        assert tool.input_schema["properties"]["x"]["type"] == "string"

        shutil.rmtree(root / "fresh")
        with anyio.fail_after(10):
            while "fresh" in {t.name for t in (await client.list_tools()).tools}:
                await events.receive()
        assert (await client.call_tool("fresh", {})).is_error


async def test_a_2026_client_hears_of_changes_through_its_subscription(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    root.mkdir()
    server = create_server(skill_dirs=[root], watch=True)
    async with server.watching(), Client(server) as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(tools_list_changed=True) as subscription:
            write_skill(root, "late", contract=CONTRACT, impl=IMPL)
            with anyio.fail_after(10):
                async for _event in subscription:
                    if "late" in {t.name for t in (await client.list_tools()).tools}:
                        break
        assert (await client.call_tool("late", {"x": 1})).structured_content == {"x": 1}


async def test_a_folder_broken_by_an_edit_is_unpublished_and_reported_until_fixed(
    tmp_path: Path, events: ToolListEvents
) -> None:
    root = tmp_path / "skills"
    folder = write_skill(root, "fragile", contract=CONTRACT, impl=IMPL)
    write_skill(root, "steady", contract=CONTRACT, impl=IMPL)
    server = create_server(skill_dirs=[root], watch=True)
    async with server.watching(), Client(server, mode="legacy", message_handler=events) as client:
        (folder / "skill.yaml").write_text("run: {python: impl:main\n")
        with anyio.fail_after(10):
            while "fragile" in {t.name for t in (await client.list_tools()).tools}:
                await events.receive()
        assert any(p.path == folder for p in server.catalog.problems())
        assert (await client.call_tool("steady", {"x": 2})).structured_content == {"x": 2}

        write_skill(root, "fragile", contract=CONTRACT, impl=IMPL)
        with anyio.fail_after(10):
            while "fragile" not in {t.name for t in (await client.list_tools()).tools}:
                await events.receive()
        assert not [p for p in server.catalog.problems() if p.path == folder]


async def test_an_edited_implementation_is_used_on_the_next_call(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = write_skill(root, "live", contract=CONTRACT, impl=IMPL)
    async with Client(create_server(skill_dirs=[root])) as client:
        assert (await client.call_tool("live", {"x": 1})).structured_content == {"x": 1}
        (folder / "impl.py").write_text("def main(x=0):\n    return {'x': x * 10}\n")
        assert (await client.call_tool("live", {"x": 1})).structured_content == {"x": 10}


PIPELINE = """\
id: {id}
description: A pipeline added while the server runs.
steps:
  - id: files
    skill: list-files
    parameters: {{directory: "{{{{ directory }}}}"}}
inputs:
  directory: {{type: string}}
"""


async def test_a_pipeline_file_added_or_broken_while_serving_is_published_or_reported(
    home: Path, events: ToolListEvents
) -> None:
    server = create_server(watch=True)
    pipelines = home / "pipelines"
    async with server.watching(), Client(server, mode="legacy", message_handler=events) as client:
        (pipelines / "live-list.yaml").write_text(PIPELINE.format(id="live-list"))
        with anyio.fail_after(10):
            while "live-list" not in {t.name for t in (await client.list_tools()).tools}:
                await events.receive()
        (home.parent / "listed").mkdir()
        (home.parent / "listed" / "a.txt").write_text("a\n")
        result = await client.call_tool("live-list", {"directory": str(home.parent / "listed")})
        assert not result.is_error and result.structured_content is not None
        assert result.structured_content["files"]["count"] >= 1

        (pipelines / "live-list.yaml").write_text(PIPELINE.format(id="live-list").replace("list-files", "list-flies"))
        with anyio.fail_after(10):
            while "live-list" in {t.name for t in (await client.list_tools()).tools}:
                await events.receive()
        reported = [str(p.error) for p in server.catalog.problems() if p.path.name == "live-list.yaml"]
        assert reported and "list-flies" in reported[0] and "did you mean 'list-files'" in reported[0]
