"""Run handles and the run meta tools, with real clients of both eras, over memory, stdio and HTTP.

A host that caps a tool call at a minute and speaks no tasks still gets a long pipeline's outputs:
the call answers `{run_id, status: "running", progress, hint}` after `--handle-after` seconds and
the run goes on; `get_run` (with `wait`) returns the outputs, `cancel_run` stops it. The time
scale is the server's flag: `--handle-after 1` and a client giving up after 20 s behave as 45 s and
60 s do. The long steps wait for a marker file the test creates once it holds the handle, so the
run is surely still running when the handle arrives (no sleeps).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from mcp_server import create_server
from pipelines.storage.runs import RunStore
from tests.fixtures.run_skills import publish, python_skills, text_of

ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"
CLIENT_TIMEOUT = 20.0
"""The client's read timeout: the call must answer (with its handle) before it."""

SLOW = """
id: slow
inputs: {marker: {type: string}}
steps:
  - id: first
    skill: echo
    parameters: {word: hello}
  - id: held
    skill: hold
    parameters: {marker: "{{ marker }}"}
outputs:
  word: "{{ first.word }}"
  held: "{{ held.held }}"
"""


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    return python_skills(tmp_path / "skills", "echo", "hold", "hang")


def _data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return result.structured_content


async def _handle(client: Client, tool: str, arguments: dict[str, Any], seen: list[str] | None = None) -> str:
    """Call `tool`, which outlasts the handle time; return the handle's run id."""

    async def progress(done: float, total: float | None, message: str | None) -> None:
        if seen is not None and message:
            seen.append(message)

    result = await client.call_tool(tool, arguments, read_timeout_seconds=CLIENT_TIMEOUT, progress_callback=progress)
    handle = _data(result)
    assert handle["status"] == "running" and "get_run" in handle["hint"], handle
    return handle["run_id"]


async def _until_step(client: Client, run_id: str, step: str) -> dict[str, Any]:
    """get_run until the run's `step` is under way (its records trail the run by a moment)."""
    with anyio.fail_after(60):
        while True:
            data = _data(await client.call_tool("get_run", {"run_id": run_id}))
            if any(s["path"] == step for s in data["steps"]) and data["progress"]:
                return data
            await anyio.sleep(0.05)  # a poll with a deadline: the records are written by a background pump


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_pipeline_longer_than_the_clients_timeout_answers_a_handle_and_get_run_waits_for_its_outputs(
    home: Path, skills: Path, tmp_path: Path, mode: str
) -> None:
    publish(home, SLOW)
    marker = tmp_path / "marker"
    seen: list[str] = []
    async with Client(create_server(home=home, skill_dirs=[skills], handle_after=1), mode=mode) as client:  # type: ignore[arg-type]
        run_id = await _handle(client, "slow", {"marker": str(marker)}, seen)
        running = await _until_step(client, run_id, "held")
        assert running["status"] == "running" and running["progress"]["message"] == "held: started"
        assert {s["path"]: s["status"] for s in running["steps"]} == {"first": "succeeded", "held": "running"}
        listed = _data(await client.call_tool("list_runs", {"status": "running"}))
        assert [r["run_id"] for r in listed["runs"]] == [run_id]
        marker.touch()
        done = _data(await client.call_tool("get_run", {"run_id": run_id, "wait": 30}))
    assert done["status"] == "succeeded", done
    assert done["outputs"]["word"] == "hello" and done["outputs"]["held"] is True
    assert [s["status"] for s in done["steps"]] == ["succeeded", "succeeded"]


async def test_a_call_that_ends_before_the_handle_time_answers_as_always(home: Path, skills: Path) -> None:
    publish(home, "id: quick\nsteps:\n  - id: first\n    skill: echo\n    parameters: {word: hi}\n")
    async with Client(create_server(home=home, skill_dirs=[skills], handle_after=30)) as client:
        data = _data(await client.call_tool("quick", {}))
    assert data["first"] == {"word": "hi"} and "status" not in data


async def test_cancel_run_stops_a_handed_over_run_and_get_run_says_how_it_ended(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    publish(home, "id: stuck\nsteps:\n  - id: wait\n    skill: hang\n    parameters: {}\n")
    async with Client(create_server(home=home, skill_dirs=[skills], handle_after=1)) as client:
        run_id = await _handle(client, "stuck", {})
        await _until_step(client, run_id, "wait")
        stopped = _data(await client.call_tool("cancel_run", {"run_id": run_id}))
        assert stopped == {"run_id": run_id, "status": "cancelled", "cancelled": True}
        after = _data(await client.call_tool("get_run", {"run_id": run_id}))
    assert after["status"] == "cancelled" and after["error"]["type"] == "cancelled"
    assert [(s["path"], s["status"]) for s in after["steps"]] == [("wait", "cancelled")]
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "cancelled"


async def test_a_long_call_that_is_not_a_pipeline_gets_a_tool_run(home: Path, skills: Path, tmp_path: Path) -> None:
    publish(home, SLOW)
    marker = tmp_path / "marker"
    async with Client(create_server(home=home, skill_dirs=[skills], handle_after=1)) as client:
        run_id = await _handle(client, "run_pipeline", {"pipeline": "slow", "inputs": {"marker": str(marker)}})
        running = _data(await client.call_tool("get_run", {"run_id": run_id}))
        assert (running["kind"], running["pipeline"], running["status"]) == ("tool", "run_pipeline", "running")
        marker.touch()
        done = _data(await client.call_tool("get_run", {"run_id": run_id, "wait": 30}))
    assert done["status"] == "succeeded", done
    assert done["outputs"]["status"] == "succeeded"


async def test_an_unknown_run_id_is_refused_with_the_run_tools_own_message(home: Path, skills: Path) -> None:
    async with Client(create_server(home=home, skill_dirs=[skills], handle_after=1)) as client:
        for tool in ("get_run", "cancel_run"):
            result = await client.call_tool(tool, {"run_id": "nope"})
            assert result.is_error and "no run 'nope'" in text_of(result)


async def test_handles_over_stdio(home: Path, skills: Path, tmp_path: Path) -> None:
    publish(home, SLOW)
    marker = tmp_path / "marker"
    params = StdioServerParameters(
        command=str(ORCHESTRATOR),
        args=["serve", "--home", str(home), "--skills", str(skills), "--handle-after", "1"],
        env={**os.environ, "ORCHESTRATOR_HOME": str(home)},
    )
    async with Client(params) as client:  # type: ignore[arg-type]
        run_id = await _handle(client, "slow", {"marker": str(marker)})
        marker.touch()
        with anyio.fail_after(60):
            done = _data(await client.call_tool("get_run", {"run_id": run_id, "wait": 30}))
    assert done["status"] == "succeeded" and done["outputs"]["held"] is True


async def test_a_fastmcp_client_over_http_follows_a_handle_to_the_outputs(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    from fastmcp import Client as FastMCPClient

    from tests._http import http_server

    publish(home, SLOW)
    marker = tmp_path / "marker"
    async with (
        http_server(home, "--skills", str(skills), "--handle-after", "1") as served,
        FastMCPClient(served.url, auth="my-own-key") as client,  # a bearer token: an identity that lasts
    ):
        answer = await client.call_tool("slow", {"marker": str(marker)}, timeout=CLIENT_TIMEOUT)
        handle = answer.structured_content or {}
        assert handle.get("status") == "running", handle
        marker.touch()
        run = await client.call_tool("get_run", {"run_id": handle["run_id"], "wait": 30}, timeout=60)
    data = run.structured_content or {}
    assert data["status"] == "succeeded" and data["outputs"]["held"] is True, data
