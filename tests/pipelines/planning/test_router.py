"""`orchestrate`: the router (seed 001) picks one skill, one agent or the planner, else falls back.

Through a real MCP client; the router's and the work's model answers come from a client's
sampling (a scripted model at the process edge) or from the real `anthropic` SDK against the
local Messages-API stand-in where tokens and prices are summed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CallToolResult

from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import ClientModel, connect, final
from tests.helpers import envelope

SUM_PIPELINE = """\
id: sum-of-numbers
inputs:
  numbers: {type: array, default: [2, 4, 6]}
steps:
  - id: stats
    skill: number-stats
    parameters: {values: "{{ numbers }}"}
outputs:
  total: "{{ stats.sum }}"
"""
COMPLETE = {"verdict": "complete", "reasoning": "the sum is there", "issues": [], "fix_instructions": []}


def data_of(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, [getattr(c, "text", c) for c in result.content]
    assert result.structured_content is not None
    return result.structured_content


def route(**fields: Any) -> str:
    return json.dumps(fields)


async def orchestrate(home: Path, model: ClientModel, request: str, *, mode: str = "legacy") -> CallToolResult:
    async with connect(home, model, mode=mode) as client:
        return await client.call_tool("orchestrate", {"request": request})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_request_one_skill_answers_is_routed_to_that_skill_with_its_arguments(home: Path, mode: str) -> None:
    model = ClientModel(route(route="skill", skill="number-stats", arguments={"values": [1, 2, 3]}, reason="one call"))
    data = data_of(await orchestrate(home, model, "What is the mean of 1, 2 and 3?", mode=mode))
    assert data["route"] == "skill" and data["routed_by"] == "model" and data["reason"] == "one call"
    assert data["skill"] == "number-stats" and data["arguments"] == {"values": [1, 2, 3]}
    assert data["result"]["mean"] == 2 and data["result"]["count"] == 3
    assert data["usage"]["router"]["calls"] == 1 and data["usage"]["work"]["calls"] == 0
    asked = model.requests[0]
    assert asked.model_preferences is not None and asked.model_preferences.hints[0].name == "claude-haiku-5-5"
    prompt = model.prompt(0)
    assert "What is the mean of 1, 2 and 3?" in prompt and "- number-stats" in prompt and "- researcher:" in prompt
    assert '"route": "planner"' in (asked.system_prompt or "")
    assert "pipeline-authoring" not in prompt  # instructions skills are not a route


async def test_a_request_for_judgement_is_routed_to_one_agent_of_a_role(home: Path) -> None:
    model = ClientModel(
        route(route="agent", role="data-extractor", task="Extract the year from 'born 1984'", reason="extraction"),
        final({"year": 1984}, "Found the year."),
    )
    data = data_of(await orchestrate(home, model, "When was the person in 'born 1984' born?"))
    assert data["route"] == "agent" and data["role"] == "data-extractor"
    assert data["result"]["status"] == "success" and data["result"]["output"] == {"year": 1984}
    assert data["result"]["role"] == "data-extractor"
    agent = model.requests[1]
    assert "You extract data." in (agent.system_prompt or "")
    assert model.prompt(1) == "## Task\nExtract the year from 'born 1984'"
    assert data["usage"]["work"]["calls"] == 1 and data["usage"]["calls"] == 2


async def test_a_request_that_needs_several_skills_goes_to_the_planner(home: Path) -> None:
    model = ClientModel(
        route(route="planner", reason="chain"),
        f"```yaml\n{SUM_PIPELINE}```",
        json.dumps(COMPLETE),
    )
    data = data_of(await orchestrate(home, model, "Sum 2, 4 and 6 in a pipeline"))
    assert data["route"] == "planner" and data["routed_by"] == "model"
    assert data["result"]["status"] == "complete" and data["result"]["outputs"]["total"] == 12
    assert data["usage"]["router"]["calls"] == 1 and data["usage"]["work"]["calls"] == 2
    assert data["usage"]["calls"] == 3


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("I would use number-stats for this.", "not JSON"),
        (route(route="skill", skill="no-such-skill", arguments={}), "'no-such-skill' is not a listed skill"),
        (route(route="skill", skill="number-stats", arguments={"numbers": [1]}), "values"),
        (route(route="agent", role="astronaut", task="fly"), "unknown agent role 'astronaut'"),
        (route(route="teleport"), "route"),
    ],
)
async def test_any_routing_failure_falls_back_to_the_planner(home: Path, answer: str, why: str) -> None:
    model = ClientModel(answer, f"```yaml\n{SUM_PIPELINE}```", json.dumps(COMPLETE))
    data = data_of(await orchestrate(home, model, "Sum 2, 4 and 6"))
    assert data["route"] == "planner" and data["routed_by"] == "fallback"
    assert why in data["fallback_reason"], data["fallback_reason"]
    assert data["result"]["outputs"]["total"] == 12
    assert model.left == 0 and len(model.requests) == 3  # the router is asked once, never again


async def test_the_usage_of_the_router_and_of_the_work_is_summed(home: Path, stub: AnthropicStub) -> None:
    stub.reply(route(route="agent", role="researcher", task="Say hi"), input_tokens=1000, output_tokens=100)
    stub.reply(final("hi", "Said hi."), input_tokens=2000, output_tokens=200)
    async with connect(home, None) as client:
        data = data_of(await client.call_tool("orchestrate", {"request": "Say hi"}))
    router, work, total = data["usage"]["router"], data["usage"]["work"], data["usage"]
    assert router["total_tokens"] == 1100 and work["total_tokens"] == 2200 and total["total_tokens"] == 3300
    # haiku ($0.10 / $0.50 per million) routes, the researcher's sonnet ($2 / $10) works
    assert router["cost_usd"] == pytest.approx(0.00015) and work["cost_usd"] == pytest.approx(0.006)
    assert total["cost_usd"] == pytest.approx(0.00615)
    assert [r["body"]["model"] for r in stub.requests] == ["claude-haiku-5-5", "claude-sonnet-5-5"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_without_any_model_orchestrate_fails_saying_how_to_get_one(home: Path, mode: str) -> None:
    async with connect(home, None, mode=mode) as client:
        result = await client.call_tool("orchestrate", {"request": "anything"})
    error = envelope(result)
    assert error["type"] == "skill_failed" and "ANTHROPIC_API_KEY" in error["hint"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_skill_the_router_chose_that_fails_is_the_calls_error(home: Path, tmp_path: Path, mode: str) -> None:
    missing = str(tmp_path / "nope.txt")
    model = ClientModel(route(route="skill", skill="read-file", arguments={"path": missing}))
    result = await orchestrate(home, model, "Show me nope.txt", mode=mode)
    error = envelope(result)
    assert error["type"] == "skill_failed" and "nope.txt" in error["message"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_planner_that_cannot_write_a_pipeline_fails_the_call_with_how_far_it_got(home: Path, mode: str) -> None:
    model = ClientModel(route(route="planner", reason="chain"), *["no yaml at all, sorry"] * 4)  # a try and 3 fixes
    result = await orchestrate(home, model, "Do the impossible", mode=mode)
    error = envelope(result, report=True)  # the structured content is the report (it fits the output schema)
    assert error["type"] == "skill_failed" and error["where"] == "route planner"
    assert "pipeline_yaml" in error["hint"]
    report = result.structured_content
    assert report is not None and report["route"] == "planner" and report["result"]["status"] == "failed"
    assert report["usage"]["router"]["calls"] == 1 and report["usage"]["work"]["calls"] == 4
    assert model.left == 0
