"""Outcomes that tell the truth: a run succeeds only when every step did (issue 22, findings 1-3).

A step that failed under `on_error: continue`, an agent stopped by a limit or budget before its
answer, a nested pipeline that was itself PARTIAL: none of them is a success, for the tool
result (`isError`, the envelope with the run's outputs, summary and usage beside it), the
summary, the run history and the command line's exit status. `plan_and_run` and `orchestrate`
that end without a complete run are errors too, carrying the last run and the review's issues.

Through real MCP clients of both protocol eras; the model is a scripted client's sampling
(`_scripted.Script`, `fixtures.model_client.ClientModel`) or the real `anthropic` SDK against the
local Messages-API stand-in.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client
from mcp_types import CallToolResult

from mcp_server import create_server
from pipelines.storage.runs import RunStore
from skills import Home
from tests._scripted import Script
from tests._scripted import connect as connect_scripted
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import ClientModel, connect, tool_use
from tests.helpers import envelope, run_cli, write_skill

MODES = pytest.mark.parametrize("mode", ["legacy", "auto"])
OPEN = {"type": "object"}
INT = {"type": "integer"}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    for name, impl in {
        "echo": "def run(**kwargs):\n    return kwargs\n",
        "fail": "def run(message='boom'):\n    raise RuntimeError(message)\n",
    }.items():
        write_skill(root, name, contract={"inputs": OPEN, "run": {"python": "impl:run"}}, impl=impl)
    add = {"type": "object", "properties": {"a": INT, "b": INT}, "required": ["a", "b"]}
    write_skill(
        root, "add", contract={"inputs": add, "run": {"python": "impl:add"}}, impl="def add(a, b):\n    return a + b\n"
    )
    return root


def pipeline(home: Path, text: str) -> None:
    text = textwrap.dedent(text)
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{yaml.safe_load(text)['id']}.yaml").write_text(text)


def body_of(result: CallToolResult) -> dict[str, Any]:
    """The whole JSON text of an error result: the envelope and what the run left beside it."""
    text = getattr(result.content[0], "text", "")
    data: dict[str, Any] = json.loads(text)
    if result.structured_content is not None:
        assert result.structured_content == data
    return data


def runs(home: Path) -> dict[str, Any]:
    """Run id -> status, error, result as the run history has them."""
    return {r.run_id: r for r in RunStore(Home(home).state_db).list()}


# -- 1. plan_and_run / orchestrate that never complete ------------------------------------------

SUM = """\
id: sum-of-numbers
inputs:
  numbers: {type: array, default: [2, 4, 6, 8]}
steps:
  - id: stats
    skill: number-stats
    parameters: {values: "{{ numbers }}"}
outputs:
  total: "{{ stats.sum }}"
"""
NEEDS_FIX = {
    "verdict": "needs_fix",
    "reasoning": "the sum is there, the mean is not",
    "issues": ["the mean is missing"],
    "fix_instructions": ["output stats.mean as `mean`"],
}


def fenced(text: str) -> str:
    return f"```yaml\n{text}```\n"


@MODES
async def test_plan_and_run_whose_every_review_says_needs_fix_is_an_error_with_the_last_run_and_the_issues(
    home: Path, mode: str
) -> None:
    script = Script.of(fenced(SUM), NEEDS_FIX, fenced(SUM), NEEDS_FIX)
    async with connect_scripted(home, script, mode=mode) as session:
        result = await session.client.call_tool("plan_and_run", {"request": "the mean", "max_iterations": 2})
    error = envelope(result)
    assert error["type"] == "skill_failed" and error["where"] == "iteration 2"
    assert "did not complete in 2 iteration(s)" in error["message"] and "the mean is missing" in error["message"]
    data = body_of(result)
    assert data["status"] == "needs_fix" and data["review"]["issues"] == ["the mean is missing"]
    assert data["outputs"]["total"] == 20 and data["run_id"] == data["history"][-1]["run_id"]
    assert runs(home)[data["run_id"]].status == "succeeded"  # the run did; the plan did not
    assert data["usage"]["calls"] == 4  # two plans and two reviews: every attempt counts
    assert script.left == 0


@MODES
async def test_plan_and_run_whose_runs_all_failed_is_an_error_with_the_last_run_id_and_its_usage(
    home: Path, mode: str
) -> None:
    missing = SUM.replace("skill: number-stats", "skill: read-file").replace(
        'parameters: {values: "{{ numbers }}"}', f"parameters: {{path: {json.dumps(str(home / 'nope.txt'))}}}"
    )
    script = Script.of(fenced(missing))
    async with connect_scripted(home, script, mode=mode) as session:
        result = await session.client.call_tool("plan_and_run", {"request": "the sum", "max_iterations": 1})
    error = envelope(result)
    assert error["type"] == "skill_failed" and "nope.txt" in error["message"]
    data = body_of(result)
    assert data["status"] == "needs_fix" and data["outputs"] is None
    assert data["run_id"] is not None and runs(home)[data["run_id"]].status == "failed"
    assert data["usage"]["calls"] == 1


@MODES
async def test_orchestrate_whose_planner_never_completes_is_an_error_with_the_routers_usage(
    home: Path, mode: str
) -> None:
    route = json.dumps({"route": "planner", "reason": "chain"})
    script = Script.of(route, fenced(SUM), NEEDS_FIX)
    async with connect_scripted(home, script, mode=mode) as session:
        result = await session.client.call_tool("orchestrate", {"request": "the mean", "max_iterations": 1})
    error = envelope(result)
    assert error["where"] == "route planner" and "the mean is missing" in error["message"]
    data = body_of(result)
    assert data["route"] == "planner" and data["result"]["status"] == "needs_fix"
    assert data["result"]["run_id"] is not None
    assert data["usage"]["router"]["calls"] == 1 and data["usage"]["work"]["calls"] == 2
    assert data["usage"]["calls"] == 3


# -- 2. an agent step stopped before its answer failed -------------------------------------------

AGENT_STEP = """\
id: delegated
steps:
  - id: work
    agent: {skills: [add], max_iterations: 1}
    parameters: {task: "Add 2 and 3"}
  - id: after
    skill: echo
    parameters: {done: true}
"""


@MODES
async def test_an_agent_step_stopped_at_its_turn_limit_fails_the_run_instead_of_succeeding(
    home: Path, skills: Path, mode: str
) -> None:
    pipeline(home, AGENT_STEP)
    model = ClientModel([tool_use("add", {"a": 2, "b": 3})])
    async with connect(home, model, skill_dirs=[skills], mode=mode) as client:
        result = await client.call_tool("delegated", {})
    error = envelope(result)
    assert "turn limit (1)" in error["message"] and "status iteration_limit" in error["message"]
    assert error["where"].startswith("step 'work'")
    data = body_of(result)
    assert data["usage"]["calls"] == 1 and data["usage"]["steps"]["work"]["calls"] == 1
    record = runs(home)[data["run_id"]]
    assert record.status == "failed" and record.failed_step == "work"


@MODES
async def test_an_agent_step_stopped_by_a_limit_under_on_error_continue_makes_the_run_partial(
    home: Path, skills: Path, mode: str
) -> None:
    pipeline(home, AGENT_STEP.replace("    parameters: {task", "    on_error: continue\n    parameters: {task"))
    model = ClientModel([tool_use("add", {"a": 2, "b": 3})])
    async with connect(home, model, skill_dirs=[skills], mode=mode) as client:
        result = await client.call_tool("delegated", {})
    error = envelope(result)
    assert "PARTIAL: 1/2 steps succeeded, 1 failed (work)" in error["message"]
    data = body_of(result)
    assert data["summary"]["failed_steps"] == ["work"] and data["after"] == {"done": True}
    work = data["work"]  # the failure record keeps what the agent had
    assert work["step_failed"] is True and work["status"] == "iteration_limit" and work["iterations"] == 1
    assert data["usage"]["calls"] == 1


@pytest.mark.parametrize(
    ("agent", "limits", "status"),
    [
        ("{skills: [add], max_tokens: 200}", "", "token_limit"),
        ("{skills: [add], max_cost_usd: 0.001}", "", "cost_exceeded"),
        ("{skills: [add]}", "limits: {max_agent_tokens: 200}\n", "budget_exceeded"),
    ],
)
async def test_an_agent_step_stopped_by_its_tokens_cost_or_the_runs_budget_fails_the_run(
    home: Path, skills: Path, stub: AnthropicStub, agent: str, limits: str, status: str
) -> None:
    pipeline(home, limits + AGENT_STEP.replace("{skills: [add], max_iterations: 1}", agent))
    stub.reply(tool_uses=[{"name": "add", "input": {"a": 2, "b": 3}}], input_tokens=2000, output_tokens=200)
    async with connect(home, None, skill_dirs=[skills]) as client:
        result = await client.call_tool("delegated", {})
    error = envelope(result)
    assert f"status {status}" in error["message"] and error["where"].startswith("step 'work'")
    assert body_of(result)["usage"]["total_tokens"] == 2200


def test_the_command_line_exits_1_for_a_run_whose_agent_step_hit_a_limit(
    tmp_path: Path, home: Path, skills: Path, stub: AnthropicStub
) -> None:
    pipeline(home, AGENT_STEP)
    for _ in range(2):
        stub.reply(tool_uses=[{"name": "add", "input": {"a": 2, "b": 3}}], input_tokens=100, output_tokens=10)
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    ran = run_cli("run", "delegated", "--skills", str(skills), env=env, cwd=tmp_path)
    assert ran.code == 1, ran.err
    assert "turn limit (1)" in ran.err and "usage: 1 model call(s), 110 tokens" in ran.err
    called = run_cli("call", "delegated", "--skills", str(skills), env=env, cwd=tmp_path)
    assert called.code == 1, called.err
    assert called.out.startswith("{"), (called.out, called.err)
    assert json.loads(called.out)["usage"]["calls"] == 1  # what the run spent is printed all the same


# -- 3. a nested PARTIAL run rolls up into its parent --------------------------------------------

INNER = """\
id: inner
steps:
  - {id: lint, skill: echo, parameters: {x: 1}}
  - {id: tests, skill: fail, on_error: continue}
outputs:
  linted: "{{ lint.x }}"
"""
OUTER = """\
id: outer
steps:
  - {id: review, skill: inner}
  - {id: report, skill: echo, parameters: {seen: "{{ review.linted }}"}}
"""


@MODES
async def test_a_nested_partial_run_makes_its_parent_partial_and_names_the_failed_step_by_its_path(
    home: Path, skills: Path, mode: str
) -> None:
    pipeline(home, INNER)
    pipeline(home, OUTER)
    async with Client(create_server(home=home, skill_dirs=[skills]), mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool("outer", {})
    error = envelope(result)
    assert error["type"] == "skill_failed" and error["where"].startswith("step 'review/tests'")
    data = body_of(result)
    assert data["summary"] == {
        "total": 2,
        "succeeded": 1,
        "failed": 1,
        "skipped": 0,
        "failed_steps": ["review/tests"],
        "line": "PARTIAL: 1/2 steps succeeded, 1 failed (review/tests), 0 skipped",
    }
    assert data["report"] == {"seen": 1}  # the parent went on with the nested run's outputs
    assert data["review"]["summary"]["failed_steps"] == ["tests"]
    history = runs(home)
    assert history[data["run_id"]].status == "failed" and history[data["review"]["run_id"]].status == "failed"
    assert history[data["run_id"]].failed_step == "review/tests"


# -- the same rule for a task ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_partial_run_as_a_task_ends_as_an_error_whose_result_keeps_outputs_and_usage(
    home: Path, skills: Path, mode: str
) -> None:
    from tests._tasks_client import TasksExtension, drive, get, result, start, start_core

    pipeline(home, INNER)
    server = create_server(home=home, skill_dirs=[skills])
    modern = mode == "auto"
    async with Client(server, mode=mode, extensions=[TasksExtension()] if modern else None) as client:  # type: ignore[arg-type]
        if modern:
            created = await start(client, "inner", {})
            state = await drive(client, created.task_id)
            assert state.status == "completed" and state.result is not None  # the call ended; its result is an error
            ended = CallToolResult.model_validate(state.result)
        else:
            task_id = (await start_core(client, "inner", {}))["task"]["taskId"]
            ended = await result(client, task_id)
            state = await get(client, task_id)
            assert state.status == "failed"  # 2025-11-25: a task whose result is an error failed
    assert "PARTIAL: 1/2 steps succeeded, 1 failed (tests)" in envelope(ended)["message"]
    data = body_of(ended)
    assert data["linted"] == 1 and data["summary"]["failed_steps"] == ["tests"]
    assert data["usage"]["calls"] == 0 and runs(home)[data["run_id"]].status == "failed"
