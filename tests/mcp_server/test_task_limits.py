"""Task limits that sessions cannot multiply (issue 26, finding 6a).

The per-client limit of unfinished tasks counted each session (handshake era) or each client
name (2026-07-28) apart, so 625 sessions held 10,000 tasks. It now counts every session of one
identity: over HTTP without authentication, everything from one client address. The server's
own total is bounded too. Real HTTP servers; clients from other loopback addresses are other
clients to the server.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Implementation

from mcp_server import create_server
from tests._http import TIMEOUT, from_address, http_server
from tests._tasks_client import CreatedTask, TasksExtension, start_core
from tests.fixtures.run_skills import publish, python_skills, text_of

OTHER = "127.0.0.2"


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    return python_skills(tmp_path / "skills", "hold")


def _waiter(home: Path, marker: Path, *, max_per_client: int, max_total: int = 1000) -> str:
    """A pipeline whose task stays unfinished until `marker` exists, and the home's task limits."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(f"tasks:\n  max_per_client: {max_per_client}\n  max_total: {max_total}\n")
    return publish(
        home,
        f"""\
        id: waiter
        steps:
          - {{id: wait, skill: hold, parameters: {{marker: "{marker}"}}}}
        """,
    )


@asynccontextmanager
async def _client(url: str, era: str, name: str, address: str | None = None) -> AsyncIterator[Client]:
    """A client of its own (a session of its own in the handshake era), named `name`, from `address`."""
    http = from_address(address or "127.0.0.1")
    transport = streamable_http_client(url, http_client=http)
    extensions = [TasksExtension()] if era == "auto" else None
    info = Implementation(name=name, version="1")
    async with http, Client(transport, mode=era, extensions=extensions, client_info=info) as client:  # type: ignore[arg-type]
        yield client


async def _task(client: Client, era: str) -> str | dict[str, Any]:
    """Start `waiter` as a task: its task id, or the error envelope that refused it."""
    if era == "auto":
        await client.list_tools()
        created = await client.session.call_tool("waiter", {}, allow_claimed=True)
        if isinstance(created, CreatedTask):
            return created.task_id
        assert isinstance(created, CallToolResult), created
        return json.loads(text_of(created))["error"]
    answer = await start_core(client, "waiter", {})
    if "task" in answer:
        return answer["task"]["taskId"]
    result = CallToolResult.model_validate(answer)
    return json.loads(text_of(result))["error"]


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_tasks_of_many_sessions_from_one_address_count_together_and_another_address_is_still_served(
    home: Path, skills: Path, tmp_path: Path, era: str
) -> None:
    marker = tmp_path / "open"
    _waiter(home, marker, max_per_client=2)
    async with http_server(home, "--skills", str(skills)) as served:
        with anyio.fail_after(TIMEOUT):
            async with AsyncExitStack() as stack:
                answers = []
                for n in range(3):  # three clients of their own, names of their own, one address
                    client = await stack.enter_async_context(_client(served.url, era, f"flood-{n}"))
                    answers.append(await _task(client, era))
                elsewhere = await stack.enter_async_context(_client(served.url, era, "neighbour", OTHER))
                other = await _task(elsewhere, era)
                marker.write_text("open")  # the held tasks may finish
    assert all(isinstance(a, str) for a in answers[:2]), answers
    refused = answers[2]
    assert isinstance(refused, dict) and refused["type"] == "limit_exceeded", refused
    assert "already has 2 unfinished tasks" in refused["message"]
    assert "max_per_client in config.yaml" in refused["hint"]
    assert isinstance(other, str), other  # the limit is per client, not the server's


async def test_the_server_bounds_the_unfinished_tasks_of_all_its_clients_together(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "open"
    _waiter(home, marker, max_per_client=5, max_total=1)
    server = create_server(home=home, skill_dirs=[skills])
    async with Client(server, extensions=[TasksExtension()]) as client:  # type: ignore[arg-type]
        first = await _task(client, "auto")
        second = await _task(client, "auto")
        marker.write_text("open")
        served = await client.call_tool("text-stats", {"text": "still served"})
    assert isinstance(first, str) and not served.is_error
    assert isinstance(second, dict) and second["type"] == "limit_exceeded", second
    assert "the server already runs 1 unfinished tasks of all its clients" in second["message"]
    assert "max_total in config.yaml" in second["hint"]
