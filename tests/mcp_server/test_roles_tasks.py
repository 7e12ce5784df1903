"""The long meta tools (orchestrate, spawn_agent, plan_and_run) as MCP tasks, and agents of roles
on every call path: across 2026-07-28 rounds, their limits enforced, their tools' failures handed
back as the error envelope.

Through real MCP clients: the Python SDK client speaking tasks with raw requests
(`_tasks_client`), the SDK's own input-round driver (2026-07-28 without tasks), a client's
sampling answered from a script, and the real `anthropic` SDK against the local Messages-API
stand-in. Each tool call appends to a log file, so "ran once per decision" is seen from outside.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client

from mcp_server import create_server
from skills import Home
from tests._tasks_client import TasksExtension, drive, get, result, start, start_core
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import ClientModel, connect, final, tool_use
from tests.helpers import ENVELOPE_KEYS, envelope, write_skill

ERAS = ["legacy", "auto"]
LONG_META = {"create_skill", "plan_and_run", "orchestrate", "spawn_agent", "run_pipeline"}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    inputs = {
        "type": "object",
        "properties": {"log": {"type": "string"}, "call": {"type": "string"}},
        "required": ["log", "call"],
    }
    impl = (
        "def mark(log, call):\n"
        "    with open(log, 'a') as f:\n"
        "        f.write(call + '\\n')\n"
        "    return {'marked': call}\n"
    )
    write_skill(root, "mark", contract={"inputs": inputs, "run": {"python": "impl:mark"}}, impl=impl)
    return root


@pytest.fixture
def marker_role(home: Path) -> None:
    Home(home).install()
    Home(home).roles_file.write_text(
        textwrap.dedent(
            """
            roles:
              marker:
                description: Marks things.
                model: validation
                skills: [mark]
                max_iterations: 2
                instructions: Mark what you are told to.
            """
        )
    )


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, [getattr(c, "text", c) for c in result.content]
    assert result.structured_content is not None
    return result.structured_content


def _marks(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def _client(server: Any, model: ClientModel | None, *, mode: str, tasks: bool) -> Client:
    extra: dict[str, Any] = {}
    if model is not None:
        extra = {"sampling_callback": model, "sampling_capabilities": model.capabilities}
    return Client(server, mode=mode, extensions=[TasksExtension()] if tasks else None, **extra)  # type: ignore[arg-type]


async def test_the_long_meta_tools_are_offered_as_tasks_and_the_quick_ones_are_not(home: Path) -> None:
    server = create_server(home=home)
    async with Client(server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    tasked = {name for name, tool in tools.items() if tool.execution and tool.execution.task_support == "optional"}
    assert LONG_META <= tasked
    assert tools["validate_pipeline"].execution is None and tools["register_pipeline"].execution is None
    async with _client(server, None, mode="auto", tasks=True) as client:  # 2026-07-28: the server decides
        await client.list_tools()
        quick = await client.session.call_tool("validate_pipeline", {"yaml": "id: x"}, allow_claimed=True)
    assert isinstance(quick, types.CallToolResult) and quick.structured_content is not None


async def test_orchestrate_runs_as_a_task_and_its_agent_asks_each_question_once(
    home: Path, skills: Path, tmp_path: Path, marker_role: None
) -> None:
    log = tmp_path / "marks.log"
    model = ClientModel(
        json.dumps({"route": "agent", "role": "marker", "task": "mark a", "reason": "one agent"}),
        [tool_use("mark", {"log": str(log), "call": "a"}, "c1")],
        final("a", "Marked a."),
    )
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server, model, mode="auto", tasks=True) as client:
        created = await start(client, "orchestrate", {"request": "Mark a"})
        assert created.status == "working"
        done = await drive(client, created.task_id, model)
    assert done.status == "completed", done
    data = done.result["structuredContent"]  # type: ignore[index]
    assert data["route"] == "agent" and data["role"] == "marker" and data["routed_by"] == "model"
    assert data["result"]["status"] == "success" and data["result"]["output"] == "a"
    assert data["usage"]["router"]["calls"] == 1 and data["usage"]["work"]["calls"] == 2
    assert len(model.requests) == 3 and _marks(log) == ["a"]  # every question reached the client once


async def test_spawn_agent_as_a_core_task_asks_over_tasks_result_and_hands_its_tools_failures_back(
    home: Path, skills: Path, tmp_path: Path, marker_role: None
) -> None:
    log = tmp_path / "marks.log"
    model = ClientModel(
        [
            tool_use("mark", {"log": str(log)}, "c1"),
            tool_use("read-file", {"path": "x"}, "c2"),
            tool_use("mark", {"log": str(log), "call": "b"}, "c3"),
        ],
        final("b", "Marked b."),
    )
    server = create_server(home=home, skill_dirs=[skills])
    async with _client(server, model, mode="legacy", tasks=False) as client:
        answer = await start_core(
            client, "spawn_agent", {"role": "marker", "task": "mark b", "limits": {"timeout": 60}}
        )
        task_id = answer["task"]["taskId"]
        with anyio.fail_after(60):
            final_result = await result(client, task_id)  # the model is asked on this request's stream
        state = await get(client, task_id)
    assert state.status == "completed"
    data = _data(final_result)
    assert data["role"] == "marker" and data["status"] == "success" and data["output"] == "b"
    assert len(model.requests) == 2 and _marks(log) == ["b"]
    bad_args, not_allowed, marked = (json.loads(r.content[0].text) for r in model.tool_results(1))
    assert marked == {"marked": "b"}
    bad_args, not_allowed = bad_args["error"], not_allowed["error"]  # type: ignore[union-attr]
    assert set(bad_args) == ENVELOPE_KEYS and bad_args["type"] == "invalid_arguments" and bad_args["where"] == "call"
    assert not_allowed["type"] == "unknown_tool" and "'read-file' is not one of your tools" in not_allowed["message"]
    assert not_allowed["hint"] == "you may call: mark"  # the role's allow-list, nothing else


async def test_plan_and_run_as_a_core_task_plans_runs_and_reviews_with_the_clients_model(home: Path) -> None:
    from tests.pipelines.planning.test_router import COMPLETE, SUM_PIPELINE

    model = ClientModel(f"```yaml\n{SUM_PIPELINE}```", json.dumps(COMPLETE))
    async with _client(create_server(home=home), model, mode="legacy", tasks=False) as client:
        answer = await start_core(client, "plan_and_run", {"request": "Sum 2, 4 and 6"})
        with anyio.fail_after(60):
            final_result = await result(client, answer["task"]["taskId"])
    data = _data(final_result)
    assert data["status"] == "complete" and data["outputs"]["total"] == 12 and data["iterations"] == 1
    assert data["outputs"]["summary"]["line"] == "SUCCESS: 1/1 steps succeeded, 0 failed, 0 skipped"
    assert len(model.requests) == 2  # written once, reviewed once


@pytest.mark.parametrize("mode", ERAS)
async def test_a_roles_turn_limit_and_allow_list_hold_whatever_the_client_asks(
    home: Path, skills: Path, tmp_path: Path, marker_role: None, mode: str
) -> None:
    log = tmp_path / "marks.log"
    turns = [[tool_use("mark", {"log": str(log), "call": f"m{n}"}), tool_use("shell-command", {})] for n in range(5)]
    model = ClientModel(*turns)
    async with connect(home, model, skill_dirs=[skills], mode=mode) as client:
        data = _data(
            await client.call_tool("spawn_agent", {"role": "marker", "task": "mark", "limits": {"max_iterations": 9}})
        )
    assert data["status"] == "iteration_limit" and data["iterations"] == 2
    # no third turn; the tools the last turn asked for are not run (no turn is left to read them)
    assert len(model.requests) == 2 and _marks(log) == ["m0"]
    first = model.requests[0]
    assert first.model_preferences is not None and first.model_preferences.hints[0].name == "claude-haiku-5-5"
    assert [t.name for t in first.tools or []] == ["mark"] and "Mark what you are told to." in (
        first.system_prompt or ""
    )
    refused = envelope(model.tool_results(1)[1])  # a skill outside the role's allow-list: the envelope
    assert refused["type"] == "unknown_tool" and refused["hint"] == "you may call: mark"


async def test_a_roles_token_limit_stops_it_with_the_api_and_its_tool_errors_are_envelopes(
    home: Path, skills: Path, tmp_path: Path, stub: AnthropicStub
) -> None:
    Home(home).install()
    Home(home).roles_file.write_text(
        "roles:\n  frugal: {model: validation, skills: [mark, read-file], max_tokens: 150, max_iterations: 10}\n"
    )
    log = tmp_path / "marks.log"
    missing = str(tmp_path / "nope.txt")
    for n in range(4):  # each turn spends 60 tokens: the role's 150 is spent after the third
        stub.reply(
            tool_uses=[
                {"name": "mark", "input": {"log": str(log), "call": f"m{n}"}, "id": f"m{n}"},
                {"name": "read-file", "input": {"path": missing}, "id": f"r{n}"},
            ],
            input_tokens=50,
            output_tokens=10,
        )
    async with connect(home, None, skill_dirs=[skills]) as client:
        data = _data(await client.call_tool("spawn_agent", {"role": "frugal", "task": "mark and read"}))
    assert data["status"] == "token_limit" and data["tokens"] == 180 and data["iterations"] == 3
    assert "the token limit (150 tokens)" in data["summary"]
    assert _marks(log) == ["m0", "m1"] and stub.pending == 1  # the third turn's tools are not run
    assert [r["body"]["model"] for r in stub.requests] == ["claude-haiku-5-5"] * 3
    sent = stub.requests[1]["body"]["messages"][-1]["content"]
    results = {block["tool_use_id"]: block for block in sent if block["type"] == "tool_result"}
    assert results["m0"].get("is_error") is not True
    failed = results["r0"]
    assert failed["is_error"] is True
    text = failed["content"] if isinstance(failed["content"], str) else failed["content"][0]["text"]
    error = json.loads(text)["error"]
    assert set(error) == ENVELOPE_KEYS and error["type"] == "skill_failed" and "nope.txt" in error["message"]


@pytest.mark.parametrize("mode", ERAS)
async def test_requests_and_tasks_too_long_are_refused_with_the_envelope(home: Path, mode: str) -> None:
    huge = "x" * 200_001
    async with connect(home, ClientModel(), mode=mode) as client:
        routed = await client.call_tool("orchestrate", {"request": huge})
        spawned = await client.call_tool("spawn_agent", {"role": "researcher", "task": "t", "context": huge})
    for refused, where in ((routed, "request"), (spawned, "context")):
        error = envelope(refused)
        assert error["type"] == "invalid_arguments" and error["where"] == where
        assert huge not in error["message"]  # never echoed back
