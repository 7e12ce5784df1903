"""`prompt:` steps: a model asked inline in a pipeline, through the Anthropic API or the client's sampling."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import mcp_types as types
import pytest
from mcp_types import CallToolResult, TextContent

from pipelines.language.verify import check_text
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import ClientModel, connect
from tests.helpers import envelope

ERAS = ["legacy", "auto"]  # handshake era (2025-11-25) and 2026-07-28

VERDICT = """
id: verdict
inputs: {claim: string}
steps:
  - id: judge
    prompt: "Is this true? {{ claim }}"
    system: "You check facts for {{ claim | length }}-character claims."
    model: validation
    max_tokens: 300
    output:
      type: object
      properties: {verdict: {type: string, enum: ["true", "false"]}, confidence: {type: number}}
      required: [verdict, confidence]
outputs: {verdict: "{{ judge.verdict }}", sure: "{{ judge.confidence > 0.5 }}"}
"""


def _pipeline(home: Path, text: str) -> None:
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    spec_id = text.split("id:", 1)[1].split()[0]
    (home / "pipelines" / f"{spec_id}.yaml").write_text(textwrap.dedent(text).lstrip())


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


async def test_a_prompt_step_through_the_anthropic_api_is_asked_again_once_and_counted(
    home: Path, stub: AnthropicStub
) -> None:
    _pipeline(home, VERDICT)
    stub.reply('{"verdict": "maybe"}', input_tokens=100, output_tokens=10)
    stub.reply('```json\n{"verdict": "true", "confidence": 0.9}\n```', input_tokens=150, output_tokens=12)
    async with connect(home, None) as client:
        result = await client.call_tool("verdict", {"claim": "Water is wet."})
    assert not result.is_error, text_of(result)
    data = result.structured_content
    assert data is not None
    assert data["verdict"] == "true" and data["sure"] is True
    assert data["usage"]["steps"]["judge"]["calls"] == 2
    assert data["usage"]["input_tokens"] == 250 and data["usage"]["output_tokens"] == 22
    first, second = (r["body"] for r in stub.requests)
    assert first["messages"][0]["content"] == "Is this true? Water is wet."
    system = first["system"] if isinstance(first["system"], str) else first["system"][0]["text"]
    assert system.startswith("You check facts for 13-character claims.")
    assert '"confidence"' in system  # the output schema is part of the instructions
    assert first["max_tokens"] == 300
    assert first["model"].startswith("claude-") and "haiku" in first["model"]  # the `validation` role
    reask = second["messages"][-1]["content"]
    assert "cannot be used" in reask and "verdict" in reask
    assert len(stub.requests) == 2


async def test_a_prompt_step_whose_answer_never_fits_fails_naming_what_did_not_fit(
    home: Path, stub: AnthropicStub
) -> None:
    _pipeline(home, VERDICT)
    stub.reply('{"verdict": "maybe", "confidence": 1}')
    stub.reply('{"verdict": "perhaps", "confidence": 1}')
    async with connect(home, None) as client:
        result = await client.call_tool("verdict", {"claim": "Water is wet."})
    assert result.is_error
    body = envelope(result)
    assert "step 'judge'" in body["message"] and "`output:`" in body["message"]
    assert "verdict" in body["message"] and "after 2 attempts" in body["message"]
    assert len(stub.requests) == 2  # asked again once, not more


def _echo(params: types.CreateMessageRequestParams) -> str:
    content = params.messages[-1].content
    asked = content.text if isinstance(content, types.TextContent) else ""
    return asked.upper()


@pytest.mark.parametrize("mode", ERAS)
async def test_prompt_steps_in_a_parallel_loop_through_the_clients_sampling(home: Path, mode: str) -> None:
    _pipeline(
        home,
        """
        id: shout
        inputs: {words: {type: array, items: {type: string}}}
        steps:
          - id: loud
            for: {items: "{{ words }}", variable: word, parallel: true, max_parallel: 3}
            prompt: "say {{ word }}"
        outputs: {loud: "{{ loud }}"}
        """,
    )
    model = ClientModel(*[_echo] * 4)
    async with connect(home, model, mode=mode) as client:
        result = await client.call_tool("shout", {"words": ["a", "b", "c", "d"]})
    assert not result.is_error, text_of(result)
    data = result.structured_content
    assert data is not None
    assert data["loud"] == ["SAY A", "SAY B", "SAY C", "SAY D"]  # item order, whatever order they finished in
    assert data["usage"]["steps"]["loud"]["calls"] == 4
    assert model.requests[0].model_preferences is not None


@pytest.mark.parametrize("mode", ERAS)
async def test_a_prompt_step_re_asks_through_sampling_when_the_answer_does_not_fit(home: Path, mode: str) -> None:
    _pipeline(home, VERDICT)
    model = ClientModel("I think so.", json.dumps({"verdict": "false", "confidence": 0.2}))
    async with connect(home, model, mode=mode) as client:
        result = await client.call_tool("verdict", {"claim": "Fire is cold."})
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    assert result.structured_content["verdict"] == "false" and result.structured_content["sure"] is False
    assert "not valid JSON" in model.prompt(1)


def test_verification_checks_a_prompt_steps_templates_model_and_output_schema() -> None:
    text = textwrap.dedent(
        """\
        id: bad
        inputs: {claim: string}
        steps:
          - id: judge
            prompt: "Is this true? {{ clam }}"
            system: "{{ nobody }}"
            model: no-such-model
            output: {type: objekt}
        """
    )
    _, issues = check_text(text, "bad.yaml", models={"orchestrator", "validation", "review"})
    found = {(i.code, i.line): i for i in issues}
    assert ("undefined", 5) in found and "'clam'" in found[("undefined", 5)].message
    assert "claim" in found[("undefined", 5)].hint  # did you mean
    assert found[("undefined", 5)].col > 1
    assert ("undefined", 6) in found
    assert any(i.code == "unknown-model" and i.line == 7 for i in issues)
    assert any(i.code == "schema" and i.line == 8 and "`output:`" in i.message for i in issues)


def test_a_step_cannot_both_prompt_and_call_a_skill() -> None:
    text = "id: two\nsteps:\n  - id: both\n    prompt: hi\n    skill: read-file\n"
    _, issues = check_text(text, "two.yaml")
    assert any("`skill` and `prompt` cannot go together" in i.message for i in issues)
