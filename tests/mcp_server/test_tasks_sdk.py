"""MCP tasks through the Python SDK client sending the raw task requests, in both eras.

2026-07-28: the tasks extension (the client declares it on its call; `tasks/get`,
`tasks/update`, `tasks/cancel`). 2025-11-25: core tasks (`execution.taskSupport`, `tools/call`
with `task`, `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_server import create_server
from pipelines.storage.runs import RunStore
from skills import Home
from tests._tasks_client import TasksExtension, cancel, drive, get, listing, result, start, start_core
from tests.fixtures.model_client import ClientModel, final, tool_use
from tests.helpers import run_cli
from tests.mcp_server import test_rounds_continue as rounds
from tests.mcp_server.test_rounds_continue import STORY, _marks, _pipeline, _teller

skills = rounds.skills  # the fixture: the `mark` tool and the `counter` agent

LONG = """
id: long
inputs: {log: {type: string}, count: {type: integer, default: 4}}
steps:
  - id: marks
    for: {items: "{{ range(count) | list }}", variable: n, parallel: false}
    skill: mark
    parameters: {log: "{{ log }}", call: "m{{ n }}"}
outputs: {marked: "{{ marks | length }}"}
"""


def _client(server: Any, model: ClientModel | None = None, *, mode: str = "auto", tasks: bool = True) -> Client:
    extra: dict[str, Any] = {}
    if model is not None:
        extra = {"sampling_callback": model, "sampling_capabilities": model.capabilities}
    return Client(server, mode=mode, extensions=[TasksExtension()] if tasks else None, **extra)  # type: ignore[arg-type]


async def test_a_pipeline_runs_as_a_task_polled_to_completion_with_progress(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "long.yaml").write_text(LONG)
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    seen: list[Any] = []
    async with _client(server) as client:
        created = await start(client, "long", {"log": str(log)})
        assert created.status == "working" and len(created.task_id) >= 32  # unguessable
        done = await drive(client, created.task_id, seen=seen)
    assert done.status == "completed" and done.result is not None
    assert done.result["structuredContent"]["marked"] == 4
    assert _marks(log) == ["m0", "m1", "m2", "m3"]
    messages = [s.status_message for s in seen if s.status == "working" and s.status_message]
    assert any("/" in m for m in messages), messages  # progress (done/total) while it works
    run_id = done.result["structuredContent"]["run_id"]
    assert RunStore(Home(home).state_db).get(run_id).status == "succeeded"  # type: ignore[union-attr]
    env = {"ORCHESTRATOR_HOME": str(home), "PATH": "/usr/bin:/bin"}
    listed = run_cli("runs", "list", "--json", env=env, cwd=tmp_path).json()
    (task,) = [t for t in listed["tasks"] if t["task_id"] == created.task_id]  # type: ignore[index]
    assert task["status"] == "completed" and task["tool"] == "long" and task["run_id"] == run_id
    assert task["started"] and task["progress"] is not None and task["client"]
    text = run_cli("runs", "list", env=env, cwd=tmp_path).out
    assert created.task_id[:12] in text and "completed" in text


async def test_a_client_without_the_extension_gets_the_result_directly(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "long.yaml").write_text(LONG)
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server, tasks=False) as client:
        plain = await client.call_tool("long", {"log": str(tmp_path / "m.log"), "count": 1})
        with pytest.raises(MCPError) as refused:  # -32021: it did not declare the extension
            await get(client, "no-such-task")
    assert plain.structured_content["marked"] == 1  # type: ignore[index]
    assert refused.value.error.code == -32021


async def test_a_task_outlives_its_session_and_another_session_fetches_the_result(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "long.yaml").write_text(LONG)
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server) as later:  # another client of the same server
        async with _client(server) as first:
            created = await start(first, "long", {"log": str(log), "count": 3})
        # the first session is gone; the task runs on
        done = await drive(later, created.task_id)
        with pytest.raises(MCPError) as unknown:
            await get(later, created.task_id[:-2] + "xx")  # a guessed id is just "not found"
    assert done.status == "completed" and done.result["structuredContent"]["marked"] == 3  # type: ignore[index]
    assert unknown.value.error.code == -32602


async def test_a_task_cancelled_mid_run_stops_at_once_and_its_run_resumes_later(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "long.yaml").write_text(LONG)
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server) as client:
        created = await start(client, "long", {"log": str(log), "count": 8})
        await drive(client, created.task_id, until=lambda s: len(_marks(log)) >= 2)
        asked = time.monotonic()
        await cancel(client, created.task_id)
        state = await drive(client, created.task_id)
        stopped = time.monotonic() - asked
    print(f"task cancelled: reported {state.status} {stopped:.3f}s after tasks/cancel")
    assert state.status == "cancelled" and stopped < 10
    before = _marks(log)
    marks = len(before)
    assert 2 <= marks < 8
    run_id = state.meta["io.orchestrator/run-id"] if state.meta else None  # type: ignore[index]
    assert run_id and "orchestrator runs resume" in (state.status_message or "")
    assert RunStore(Home(home).state_db).get(run_id).status == "cancelled"  # type: ignore[union-attr]
    env = {"ORCHESTRATOR_HOME": str(home), "PATH": "/usr/bin:/bin"}
    resumed = run_cli("runs", "resume", run_id, "--skills", str(skills), "--json", env=env, cwd=tmp_path)
    assert resumed.code == 0, resumed.err
    after = _marks(log)
    assert sorted(set(after)) == sorted(f"m{n}" for n in range(8))
    # finished items were not run again; only the item in flight when the cancel came (its mark
    # written, its result not yet recorded) may run a second time
    again = [m for m in set(after) if after.count(m) > 1]
    assert again in ([], [before[-1]]) and all(after.count(m) <= 2 for m in again)


async def test_tasks_result_of_a_cancelled_core_task_is_the_cancelled_envelope(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "long.yaml").write_text(LONG)
    log = tmp_path / "marks.log"
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server, mode="legacy", tasks=False) as client:
        answer = await start_core(client, "long", {"log": str(log), "count": 8})
        task_id = answer["task"]["taskId"]
        await drive(client, task_id, until=lambda s: len(_marks(log)) >= 1)
        await cancel(client, task_id)
        with anyio.fail_after(30):
            stopped = await result(client, task_id)  # a result, not a JSON-RPC error
    assert stopped.is_error
    error = json.loads(stopped.content[0].text)["error"]  # type: ignore[union-attr]
    assert (error["type"], error["retryable"]) == ("cancelled", True)
    assert "orchestrator runs resume" in error["hint"] and "'long'" in error["message"]


async def test_an_agent_task_answers_fifteen_sampling_requests_in_one_task(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    log = tmp_path / "marks.log"
    turns = [[tool_use("mark", {"log": str(log), "call": f"c{n}"}, f"c{n}")] for n in range(1, 15)]
    model = ClientModel(*turns, final({"marked": 14}, "Marked fourteen."))
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server, model) as client:
        created = await start(client, "counter", {"task": "mark fourteen times"})
        done = await drive(client, created.task_id, model)
    assert done.status == "completed", done
    data = done.result["structuredContent"]  # type: ignore[index]
    assert data["status"] == "success" and data["iterations"] == 15
    assert len(model.requests) == 15 and _marks(log) == [f"c{n}" for n in range(1, 15)]


async def test_core_tasks_of_a_handshake_client_carry_sampling_through_tasks_result(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    _teller(skills)
    _pipeline(home, STORY)
    log = tmp_path / "marks.log"
    model = ClientModel("Once upon a time.", "The end.")
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server, model, mode="legacy", tasks=False) as client:
        caps = client.server_capabilities
        assert caps.tasks is not None and caps.tasks.requests.tools.call is not None  # type: ignore[union-attr]
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["story"].execution.task_support == "optional"  # type: ignore[union-attr]
        assert tools["tell"].execution is None  # a quick skill is never a task
        answer = await start_core(client, "story", {"log": str(log)})
        task_id = answer["task"]["taskId"]
        assert answer["task"]["status"] == "working" and answer["task"]["ttl"] == 600_000
        with anyio.fail_after(30):
            final_result = await result(client, task_id)  # blocks; the model is asked on its stream
        state = await get(client, task_id)
        listed = await listing(client)
        with pytest.raises(MCPError) as finished:
            await cancel(client, task_id)
    assert final_result.structured_content["story"] == "Once upon a time. The end."  # type: ignore[index]
    assert state.status == "completed" and len(model.requests) == 2
    assert [t["taskId"] for t in listed.model_extra["tasks"]] == [task_id]  # type: ignore[index]
    assert finished.value.error.code == -32602  # a finished task cannot be cancelled


async def test_a_client_over_its_task_limit_is_told_the_limit_and_how_to_raise_it(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("tasks:\n  max_per_client: 1\n")
    model = ClientModel(final({"marked": 0}, "Nothing to mark."))
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server, model) as client:
        first = await start(client, "counter", {"task": "wait for my model"})  # unfinished: it waits for input
        second = await client.session.call_tool("counter", {"task": "one more"}, allow_claimed=True)
        await cancel(client, first.task_id)
    assert isinstance(second, types.CallToolResult) and second.is_error, second
    error = json.loads(second.content[0].text)["error"]  # type: ignore[union-attr]
    assert error["type"] == "limit_exceeded" and "already has 1 unfinished tasks" in error["message"]
    assert "max_per_client in config.yaml" in error["hint"]
