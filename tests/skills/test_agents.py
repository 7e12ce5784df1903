"""Agent skills (`run: {agent: ...}`) and `agent:` pipeline steps, through a real MCP client.

The model is the client's own through sampling with tools (`ClientModel`), or, where token
counts and prices matter, the real `anthropic` SDK against a local Messages API stand-in.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CallToolResult, TextContent

from pipelines.language.verify import check_text
from skills import Catalog, FolderSource
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import ClientModel, connect, final, text, tool_use
from tests.helpers import envelope, schema_says, write_skill

INT = {"type": "integer"}


def _python(root: Path, name: str, props: dict[str, Any], impl: str, entry: str) -> None:
    inputs = {"type": "object", "properties": props, "required": list(props)}
    write_skill(root, name, contract={"inputs": inputs, "run": {"python": f"impl:{entry}"}}, impl=impl)


def _agent(root: Path, name: str, body: str, **agent: Any) -> None:
    write_skill(root, name, description=f"The {name} agent, for tests.", body=body, contract={"run": {"agent": agent}})


@pytest.fixture
def skills(tmp_path: Path, home: Path) -> Path:
    """Test skills and agents (and the `delegate` pipeline with an agent step, in the home)."""
    _pipelines(home)
    root = tmp_path / "skills"
    _python(root, "add", {"a": INT, "b": INT}, "def add(a, b):\n    return {'sum': a + b}\n", "add")
    _python(root, "shout", {"text": {"type": "string"}}, "def shout(text):\n    return text.upper()\n", "shout")
    tick = """
        from pathlib import Path
        def tick(log):
            with open(log, "a") as f:
                f.write("tick\\n")
            return {"ticks": Path(log).read_text().count("tick")}
        """
    _python(root, "tick", {"log": {"type": "string"}}, tick, "tick")
    _python(root, "hang", {}, "import anyio\nasync def hang():\n    await anyio.Event().wait()\n", "hang")
    _agent(root, "calc", "You add numbers and shout results.", skills=["add", "shout", "helper", "delegate"])
    _agent(root, "helper", "You help.", skills=["add"])
    _agent(root, "ticker", "You tick.", skills=["tick"], max_iterations=2)
    _agent(root, "sleepy", "You wait.", skills=["hang"], timeout=0.5)
    _agent(root, "spender", "You tick.", skills=["tick"], max_tokens=1000)
    _agent(root, "pricey", "You tick.", skills=["tick"], max_cost_usd=0.01)
    _agent(root, "lost", "You are lost.", skills=["nope"])
    _agent(root, "typed", "You count.", skills=["add"], instructions="Always use the add tool.")
    with (root / "typed" / "skill.yaml").open("a") as f:
        f.write("outputs: {type: object, properties: {total: {type: integer}}, required: [total]}\n")
    return root


def _pipelines(home: Path) -> None:
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "delegate.yaml").write_text(
        textwrap.dedent(
            """
            id: delegate
            inputs: {question: {type: string}}
            steps:
              - id: work
                agent: {skills: [add], max_iterations: 3}
                parameters: {task: "{{ question }}"}
            outputs: {answer: "{{ work.output }}", status: "{{ work.status }}"}
            """
        )
    )


def data_of(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, [getattr(c, "text", c) for c in result.content]
    assert result.structured_content is not None
    return result.structured_content


async def test_an_agent_calls_several_tools_and_finishes_with_a_structured_result(home: Path, skills: Path) -> None:
    model = ClientModel(
        [text("First the sum."), tool_use("add", {"a": 2, "b": 3}, "c1")],
        [tool_use("shout", {"text": "five"}, "c2"), tool_use("add", {"a": 1, "b": 1}, "c3")],
        final({"sum": 5, "word": "FIVE"}, "Added 2 and 3, shouted it.", 0.8),
    )
    logs: list[str] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with connect(home, model, skill_dirs=[skills], logs=logs) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool(
            "calc", {"task": "Add 2 and 3, then shout it", "context": "tests"}, progress_callback=on_progress
        )
    data = data_of(result)
    assert data["status"] == "success"
    assert data["output"] == {"sum": 5, "word": "FIVE"}
    assert data["summary"] == "Added 2 and 3, shouted it." and data["confidence"] == 0.8
    assert data["iterations"] == 3 and data["duration_s"] >= 0
    assert data["tokens"] > 0 and data["cost_usd"] > 0  # estimated: the client's sampling reports none
    assert tools["calc"].input_schema["required"] == ["task"]  # agents take a task (and context) by default
    assert tools["calc"].output_schema is not None and "status" in tools["calc"].output_schema["properties"]
    first = model.requests[0]
    assert [t.name for t in first.tools or []] == ["add", "shout", "delegate"]  # never an agent
    assert "You add numbers and shout results." in (first.system_prompt or "")
    assert model.prompt(0) == "## Task\nAdd 2 and 3, then shout it\n\n## Context\ntests"
    assert [(r.tool_use_id, r.content[0].text) for r in model.tool_results(1)] == [("c1", '{"sum": 5}')]  # type: ignore[union-attr]
    assert [(r.tool_use_id, r.content[0].text) for r in model.tool_results(2)] == [  # type: ignore[union-attr]
        ("c2", "FIVE"),
        ("c3", '{"sum": 2}'),
    ]
    assert [p[0] for p in progress] == [1, 2, 3] and progress[0][1] == 20
    assert any('calc: add {"a": 2, "b": 3}' in line for line in logs)
    assert any(line.startswith("calc: success") for line in logs)
    assert not any(line.startswith("calc: calc:") for line in logs)  # the agent's name is said once


async def test_an_agent_works_with_a_2026_client_whose_model_answers_between_rounds(home: Path, skills: Path) -> None:
    model = ClientModel([tool_use("add", {"a": 2, "b": 3}, "c1")], final(5, "Five."))
    async with connect(home, model, skill_dirs=[skills], mode="auto") as client:
        data = data_of(await client.call_tool("calc", {"task": "Add 2 and 3"}))
    assert data["status"] == "success" and data["output"] == 5 and data["iterations"] == 2
    assert len(model.requests) == 2  # each question reaches the client once; earlier answers replay
    assert [(r.tool_use_id, r.content[0].text) for r in model.tool_results(1)] == [("c1", '{"sum": 5}')]  # type: ignore[union-attr]


async def test_a_failing_tool_call_goes_back_to_the_model_as_an_error(home: Path, skills: Path) -> None:
    model = ClientModel(
        [tool_use("add", {"a": "two", "b": 3})],
        [tool_use("missing-tool", {})],
        final(5),
    )
    async with connect(home, model, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("calc", {"task": "Add"}))
    assert data["status"] == "success" and data["output"] == 5
    (bad_args,) = model.tool_results(1)
    error = envelope(bad_args)  # the envelope a client gets, so the model can recover the same way
    assert error["type"] == "invalid_arguments" and error["where"] == "a"
    said = schema_says({"type": "object", "properties": {"a": INT, "b": INT}}, {"a": "two", "b": 3})
    assert f"invalid arguments for 'add': a: {said}" in error["message"]  # our prefix, jsonschema's words
    (unknown,) = model.tool_results(2)
    error = envelope(unknown)
    assert error["type"] == "unknown_tool" and "'missing-tool' is not one of your tools" in error["message"]
    assert error["hint"].startswith("you may call: ")


async def test_an_agent_cannot_start_an_agent_directly_or_through_a_pipeline(home: Path, skills: Path) -> None:
    model = ClientModel(
        [tool_use("helper", {"task": "help"})],
        [tool_use("delegate", {"question": "1+1?"})],
        final("did it alone"),
    )
    async with connect(home, model, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("calc", {"task": "Delegate"}))
    assert data["status"] == "success"
    (direct,) = model.tool_results(1)
    assert direct.is_error and "'helper' is an agent, and agents cannot start other agents" in direct.content[0].text  # type: ignore[union-attr]
    (through,) = model.tool_results(2)
    assert through.is_error
    assert "agent 'calc' cannot start the agent 'work'" in through.content[0].text  # type: ignore[union-attr]
    assert model.left == 0


async def test_the_iteration_limit_stops_the_agent_before_more_tool_calls(
    home: Path, skills: Path, tmp_path: Path
) -> None:
    log = str(tmp_path / "ticks.log")
    model = ClientModel([tool_use("tick", {"log": log})], [tool_use("tick", {"log": log})])
    async with connect(home, model, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("ticker", {"task": "Tick forever"}))
    assert data["status"] == "iteration_limit" and data["iterations"] == 2
    assert data["summary"].startswith("stopped at the turn limit (2) after 2 turns")
    assert data["confidence"] is None
    assert Path(log).read_text().count("tick") == 1  # the last turn's tool call never ran


async def test_the_time_limit_stops_the_agent_mid_tool_call(home: Path, skills: Path) -> None:
    model = ClientModel([tool_use("hang", {})])
    async with connect(home, model, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("sleepy", {"task": "Wait"}))
    assert data["status"] == "timeout"
    assert 0.5 <= data["duration_s"] < 10
    assert data["iterations"] == 1


async def test_the_token_limit_stops_the_agent(home: Path, skills: Path, tmp_path: Path, stub: AnthropicStub) -> None:
    log = str(tmp_path / "ticks.log")
    for _ in range(2):
        stub.reply(tool_uses=[{"name": "tick", "input": {"log": log}}], input_tokens=400, output_tokens=100)
    async with connect(home, None, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("spender", {"task": "Tick"}))
    assert data["status"] == "token_limit" and data["tokens"] == 1000 and data["iterations"] == 2
    assert [r["body"]["max_tokens"] for r in stub.requests] == [1000, 500]  # never more than the budget left
    assert Path(log).read_text().count("tick") == 1
    assert stub.pending == 0


async def test_the_cost_limit_stops_the_agent(home: Path, skills: Path, tmp_path: Path, stub: AnthropicStub) -> None:
    log = str(tmp_path / "ticks.log")
    for _ in range(3):  # orchestrator role: claude-sonnet-5-5, $2 in / $10 out per million tokens
        stub.reply(tool_uses=[{"name": "tick", "input": {"log": log}}], input_tokens=2000, output_tokens=200)
    async with connect(home, None, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("pricey", {"task": "Tick"}))
    assert data["status"] == "cost_exceeded"
    assert data["cost_usd"] == pytest.approx(0.012) and data["tokens"] == 4400 and data["iterations"] == 2
    assert stub.pending == 1  # no third turn
    tools = stub.requests[0]["body"]["tools"]
    assert [t["name"] for t in tools] == ["tick"] and tools[0]["input_schema"]["required"] == ["log"]


async def test_an_agent_with_outputs_is_asked_again_when_its_output_does_not_fit(
    home: Path, skills: Path, stub: AnthropicStub
) -> None:
    stub.reply(final({"total": "seven"}))
    stub.reply("Here: " + final({"total": 7}, "Seven.", 1.5))
    async with connect(home, None, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("typed", {"task": "3+4"}))
    assert data["status"] == "success" and data["output"] == {"total": 7} and data["confidence"] == 1.0
    system = stub.requests[0]["body"]["system"]
    assert "You count.\n\nAlways use the add tool." in system and '"total"' in system
    assert "Your final answer cannot be used: `output` does not match" in json.dumps(stub.requests[1]["body"])


async def test_an_unknown_skill_in_the_allow_list_is_a_clear_error(home: Path, skills: Path) -> None:
    async with connect(home, ClientModel(), skill_dirs=[skills]) as client:
        result = await client.call_tool("lost", {"task": "x"})
    assert result.is_error
    message = "".join(c.text for c in result.content if isinstance(c, TextContent))
    assert "agent 'lost' may call 'nope', but there is no such skill now" in message


async def test_an_agent_step_in_a_pipeline(home: Path, skills: Path) -> None:
    model = ClientModel([tool_use("add", {"a": 20, "b": 22})], final(42, "The sum is 42."))
    async with connect(home, model, skill_dirs=[skills]) as client:
        data = data_of(await client.call_tool("delegate", {"question": "What is 20 + 22?"}))
    assert data["answer"] == 42 and data["status"] == "success"
    assert model.prompt(0) == "## Task\nWhat is 20 + 22?"
    assert data["usage"]["steps"]["work"]["calls"] == 2


def test_the_verifier_checks_an_agent_steps_allow_list_and_task(skills: Path) -> None:
    catalog = Catalog([FolderSource(skills, "user")])
    text_ = textwrap.dedent(
        """
        id: bad-agents
        steps:
          - id: one
            agent: {skills: [ad, helper, "ti*"], model: orchestrater}
          - id: two
            agent: {skills: [add]}
            parameters: {task: go, extra: 1}
        """
    )
    _, issues = check_text(text_, catalog=catalog, models={"orchestrator", "review", "validation"})
    found = {(i.code, i.line): i for i in issues}
    assert found["unknown-skill", 5].hint == "did you mean 'add'?"
    assert "agents cannot call agents" in found["nested-agent", 5].message
    assert found["unknown-model", 5].hint == "did you mean 'orchestrator'?"
    assert "'agent' needs the argument 'task'" in found["missing-argument", 5].message
    assert "'agent' has no argument 'extra'" not in json.dumps([i.message for i in issues])  # agents' inputs are open
    assert len(issues) == 4
