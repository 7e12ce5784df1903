"""Agent roles (seed 002): spawn_agent by role, roles in steps and skills, the run's shared budget.

Through real MCP clients: the model is the real `anthropic` SDK against the local Messages-API
stand-in where token counts, prices and the `thinking` parameter matter, else a client's
sampling answered from a script.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CallToolResult

from skills import Home
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import ClientModel, connect, final, tool_use
from tests.helpers import envelope, write_skill

ERAS = ["legacy", "auto"]


def data_of(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, [getattr(c, "text", c) for c in result.content]
    assert result.structured_content is not None
    return result.structured_content


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    inputs = {"type": "object", "properties": {"values": {"type": "array"}}, "required": ["values"]}
    write_skill(
        root,
        "total",
        contract={"inputs": inputs, "run": {"python": "impl:run"}},
        impl="def run(values):\n    return {'total': sum(values)}\n",
    )
    return root


def _home_roles(home: Path, text: str) -> None:
    Home(home).install()
    Home(home).roles_file.write_text(textwrap.dedent(text))


async def test_spawn_agent_runs_a_shipped_role_with_its_model_tools_thinking_and_capped_limits(
    home: Path, stub: AnthropicStub
) -> None:
    stub.reply(
        thinking="Read the numbers first.",
        tool_uses=[{"name": "number-stats", "input": {"values": [1, 2, 3]}, "id": "t1"}],
        input_tokens=200,
        output_tokens=50,
    )
    stub.reply(final({"mean": 2}, "The mean is 2.", 0.9), input_tokens=300, output_tokens=40)
    arguments = {
        "role": "researcher",
        "task": "What is the mean of 1, 2 and 3?",
        "context": "a test",
        "limits": {"max_iterations": 5, "max_cost_usd": 500},  # 500 is capped to the role's $1
    }
    async with connect(home, None) as client:
        data = data_of(await client.call_tool("spawn_agent", arguments))
    assert data["role"] == "researcher" and data["status"] == "success"
    assert data["output"] == {"mean": 2} and data["iterations"] == 2 and data["tokens"] == 590
    first, second = (r["body"] for r in stub.requests)
    assert first["model"] == "claude-sonnet-5-5"  # the role's model role: orchestrator
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert first["max_tokens"] > 2048
    assert [t["name"] for t in first["tools"]] == [
        "list-files",
        "read-file",
        "text-stats",
        "json-query",
        "number-stats",
        "collect",
    ]
    assert "You research one question." in first["system"]
    assert "At most 5 turns, 200,000 tokens, $1 and 600 seconds" in first["system"]
    assert first["messages"][0]["content"] == "## Task\nWhat is the mean of 1, 2 and 3?\n\n## Context\na test"
    thought = second["messages"][1]["content"][0]  # the thinking block goes back with the tool result
    assert thought["type"] == "thinking" and thought["thinking"] == "Read the numbers first."


async def test_a_home_role_sets_the_model_and_allow_list_and_sampling_says_it_cannot_think(
    home: Path, skills: Path
) -> None:
    _home_roles(
        home,
        """
        roles:
          summer:
            description: Adds numbers.
            model: validation
            skills: [total]
            thinking: true
            max_iterations: 3
            instructions: Always use the total tool.
        """,
    )
    model = ClientModel([tool_use("total", {"values": [20, 22]})], final(42, "The total is 42."))
    logs: list[str] = []
    async with connect(home, model, skill_dirs=[skills], logs=logs) as client:
        data = data_of(await client.call_tool("spawn_agent", {"role": "summer", "task": "Add 20 and 22"}))
    assert data["status"] == "success" and data["output"] == 42 and data["role"] == "summer"
    first = model.requests[0]
    assert [t.name for t in first.tools or []] == ["total"]
    assert first.model_preferences is not None and first.model_preferences.hints[0].name == "claude-haiku-5-5"
    assert "Always use the total tool." in (first.system_prompt or "") and "At most 3 turns" in (
        first.system_prompt or ""
    )
    assert any("extended thinking is on, but the client's model answers through sampling" in line for line in logs)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_can_narrow_a_role_but_never_widen_it_and_an_unknown_role_is_named(
    home: Path, mode: str
) -> None:
    async with connect(home, ClientModel(), mode=mode) as client:
        widened = await client.call_tool(
            "spawn_agent", {"role": "data-extractor", "task": "x", "skills": ["read-file", "shell-command"]}
        )
        unknown = await client.call_tool("spawn_agent", {"role": "reseacher", "task": "x"})
        bad_model = await client.call_tool("spawn_agent", {"role": "researcher", "task": "x", "model": "gpt-9"})
    error = envelope(widened)
    assert error["type"] == "invalid_arguments" and error["where"] == "skills"
    assert "'shell-command' is not in the role's allow-list" in error["message"]
    assert "read-file, json-query, collect, number-stats" in error["hint"]
    error = envelope(unknown)
    assert error["type"] == "invalid_arguments" and error["where"] == "role"
    assert error["hint"].startswith("did you mean 'researcher'?")
    error = envelope(bad_model)
    assert error["type"] == "invalid_arguments" and error["where"] == "model" and "gpt-9" in error["message"]


async def test_an_agent_step_names_a_role_and_the_verifier_knows_the_roles(home: Path, skills: Path) -> None:
    _home_roles(
        home,
        """
        roles:
          summer: {description: Adds numbers., skills: [total], max_iterations: 4}
        """,
    )
    good = textwrap.dedent(
        """
        id: add-up
        steps:
          - id: work
            agent: {role: summer, max_iterations: 9}
            parameters: {task: "Add 1 and 2"}
        outputs: {answer: "{{ work.output }}"}
        """
    )
    bad = good.replace("role: summer, max_iterations: 9", "role: sumer, skills: [total]")
    widened = good.replace("role: summer, max_iterations: 9", "role: summer, skills: [total, read-file]")
    overview = "Adds one and two with an agent."  # register_pipeline asks for the help's overview first
    model = ClientModel(overview, [tool_use("total", {"values": [1, 2]})], final(3))
    async with connect(home, model, skill_dirs=[skills]) as client:
        checked = data_of(await client.call_tool("validate_pipeline", {"yaml": bad}))
        wide = data_of(await client.call_tool("validate_pipeline", {"yaml": widened}))
        registered = data_of(await client.call_tool("register_pipeline", {"yaml": good}))
        ran = data_of(await client.call_tool("add-up", {}))
    assert not checked["valid"]
    issue = next(i for i in checked["issues"] if i["code"] == "agent-role")
    assert issue["message"] == "unknown agent role 'sumer'" and issue["hint"].startswith("did you mean 'summer'?")
    assert issue["line"] == 5
    assert not wide["valid"] and any(i["code"] == "agent-skills" for i in wide["issues"])
    assert registered["registered"] and ran["answer"] == 3
    assert "At most 4 turns" in (model.requests[1].system_prompt or "")  # 9 is capped to the role's 4


BUDGET = """\
id: parallel-agents
limits: {max_agent_tokens: 100}
steps:
  - id: work
    for: {items: [a, b], variable: name, parallel: true}
    agent: {skills: [number-stats], max_tokens: 10000, max_iterations: 10}
    parameters: {task: "Measure {{ name }}"}
    on_error: continue
outputs:
  statuses: "{{ work | map(attribute='status') | list }}"
  tokens: "{{ work | map(attribute='tokens') | list }}"
  summaries: "{{ work | map(attribute='summary') | list }}"
"""


async def test_two_parallel_agents_are_stopped_together_by_the_runs_shared_budget(
    home: Path, stub: AnthropicStub
) -> None:
    # Each turn spends 60 tokens; each agent alone may spend 10,000. At most three turns run, and
    # the server may ask for the registered pipeline's overview in the background: five replies.
    for _ in range(5):
        stub.reply(tool_uses=[{"name": "number-stats", "input": {"values": [1, 2]}}], input_tokens=50, output_tokens=10)
    async with connect(home, None) as client:
        registered = data_of(await client.call_tool("register_pipeline", {"yaml": BUDGET}))
        result = await client.call_tool("parallel-agents", {})
    assert registered["registered"]
    # Stopped by the budget before their answers, both agents failed: the run is PARTIAL (an
    # error), and each item's failure record keeps what its agent had.
    assert "PARTIAL: 0/1 steps succeeded, 1 failed (work)" in envelope(result)["message"]
    data = json.loads(getattr(result.content[0], "text", ""))
    assert data["statuses"] == ["budget_exceeded", "budget_exceeded"]
    # Each turn spends 60: the budget of 100 is spent after the second turn of either agent; no turn
    # starts after that (one in flight may still end: at most three turns in all).
    assert 120 <= sum(data["tokens"]) <= 180
    assert all("the run's shared budget (the run's agents have spent its 100 tokens)" in s for s in data["summaries"])
    assert stub.pending >= 1  # they would have gone on


def test_the_budget_and_role_keys_are_documented_in_the_shipped_files() -> None:
    from skills.core.roles import load_roles

    book = load_roles(None)
    assert book.names() == ["code-reviewer", "data-extractor", "researcher"] and not book.problems
    assert all(role.description for role in book.roles.values())
    assert json.dumps(book.describe())  # what clients and the router read is plain JSON


async def test_an_agent_skill_names_a_role_in_its_skill_yaml(home: Path, skills: Path) -> None:
    _home_roles(home, "roles:\n  summer: {skills: [total], instructions: Sum things., max_cost_usd: 0.2}\n")
    write_skill(skills, "adder", body="You add for the user.", contract={"run": {"agent": {"role": "summer"}}})
    model = ClientModel([tool_use("total", {"values": [2, 3]})], final(5))
    async with connect(home, model, skill_dirs=[skills]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        data = data_of(await client.call_tool("adder", {"task": "2 + 3"}))
    assert tools["adder"].input_schema["required"] == ["task"]
    assert data["status"] == "success" and data["output"] == 5
    system = model.requests[0].system_prompt or ""
    assert "You add for the user." in system and "Sum things." in system and "$0.2" in system
