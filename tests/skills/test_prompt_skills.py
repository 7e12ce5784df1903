"""Prompt skills and instructions skills carried out by a model, through a real MCP client.

The model is the client's own (its sampling callback answers from a script, `ClientModel`),
or the real `anthropic` SDK talking to a local Messages API stand-in (`AnthropicStub`).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from jinja2 import Environment, StrictUndefined, UndefinedError
from mcp_types import CallToolResult, TextContent

from tests.fixtures.anthropic_stub import AnthropicStub
from tests.fixtures.model_client import ClientModel, connect
from tests.helpers import envelope, raised_by, schema_says, write_skill

ERAS = ["legacy", "auto"]  # handshake era (2025-11-25) and 2026-07-28
SUMMARY = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "words": {"type": "integer"}},
    "required": ["summary", "words"],
}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write_skill(
        root,
        "summarize",
        description="Summarise a text in one sentence.",
        body="You write faithful one-sentence summaries.\n",
        contract={
            "inputs": {
                "type": "object",
                "properties": {"text": {"type": "string"}, "style": {"type": "string", "default": "plain"}},
                "required": ["text"],
            },
            "outputs": SUMMARY,
            "run": {"prompt": "prompt.md"},
        },
        files={"prompt.md": "Summarise this in a {{ style }} style:\n{{ text }}\n"},
    )
    write_skill(
        root,
        "haiku",
        description="Write a haiku about a topic.",
        body="You are a poet.\n",
        contract={
            "inputs": {
                "type": "object",
                "properties": {"topic": {"type": "string"}, "tone": {"type": "string"}},
                "required": ["topic"],
            },
            "run": {"prompt": "prompt.md"},
            "model": "validation",
        },
        files={"prompt.md": "A haiku about {{ topic }}{% if tone %}, {{ tone }}{% endif %}."},
    )
    write_skill(
        root,
        "style-guide",
        description="House style for written answers.",
        body="# Style\n\nWrite short sentences. Prefer plain words.\n",
        files={"references/tone.md": "Be warm.\n"},
    )
    return root


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


@pytest.mark.parametrize("mode", ERAS)
async def test_a_prompt_skill_answers_with_structured_output_after_a_reask(home: Path, skills: Path, mode: str) -> None:
    model = ClientModel(
        "Sure! Here is the summary you asked for.",
        '```json\n{"summary": "Cats sleep.", "words": "two"}\n```',
        '```json\n{"summary": "Cats sleep a lot.", "words": 4}\n```',
    )
    async with connect(home, model, skill_dirs=[skills], mode=mode) as client:
        result = await client.call_tool("summarize", {"text": "Cats sleep sixteen hours a day."})
    assert not result.is_error, text_of(result)
    assert result.structured_content == {"summary": "Cats sleep a lot.", "words": 4}
    first = model.requests[0]
    assert first.system_prompt is not None
    assert first.system_prompt.startswith("You write faithful one-sentence summaries.")
    assert '"words"' in first.system_prompt  # the outputs schema is part of the instructions
    assert model.prompt(0) == "Summarise this in a plain style:\nCats sleep sixteen hours a day.\n"
    assert "not valid JSON" in model.prompt(1)
    said = schema_says(SUMMARY, {"summary": "Cats sleep.", "words": "two"})  # the validator's words, passed on
    assert f"it does not match its outputs schema at words: {said}" in model.prompt(2)
    assert len(model.requests) == 3


async def test_an_answer_that_never_fits_the_outputs_fails_clearly(home: Path, skills: Path) -> None:
    model = ClientModel("no", "still no", '{"summary": 1}')
    async with connect(home, model, skill_dirs=[skills]) as client:
        result = await client.call_tool("summarize", {"text": "x", "style": "terse"})
    error = envelope(result)
    assert error["type"] == "skill_failed"
    assert "did not fit the outputs schema after 3 attempts" in error["message"]
    assert error["hint"].startswith("make the prompt say what to return")
    assert model.left == 0


async def test_an_answer_nested_50000_deep_is_told_our_bound_and_asked_again(home: Path, skills: Path) -> None:
    model = ClientModel("[" * 50_000, '{"summary": "Cats sleep.", "words": 2}')
    async with connect(home, model, skill_dirs=[skills]) as client:
        result = await client.call_tool("summarize", {"text": "Cats sleep."})
    assert not result.is_error, text_of(result)
    assert result.structured_content == {"summary": "Cats sleep.", "words": 2}
    assert "nested more than 100 levels deep" in model.prompt(1)  # our words, not a RecursionError


async def test_a_prompt_skill_without_outputs_returns_the_text_and_uses_its_model(home: Path, skills: Path) -> None:
    model = ClientModel("Old pond, a frog jumps")
    async with connect(home, model, skill_dirs=[skills]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("haiku", {"topic": "frogs"})
    assert tools["haiku"].output_schema is None
    assert not result.is_error
    assert text_of(result) == "Old pond, a frog jumps" and result.structured_content is None
    request = model.requests[0]
    assert model.prompt() == "A haiku about frogs."  # an optional argument left out is None
    assert request.system_prompt == "You are a poet."
    hints = request.model_preferences.hints if request.model_preferences else None
    assert hints and "haiku" in (hints[0].name or "")  # the `validation` role


async def test_a_template_name_that_is_not_an_argument_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    root = tmp_path / "bad"
    write_skill(
        root,
        "typo",
        contract={"inputs": {"type": "object", "properties": {"topic": {"type": "string"}}}, "run": {"prompt": "p.md"}},
        files={"p.md": "About {{ topci }}"},
    )
    async with connect(home, ClientModel(), skill_dirs=[root]) as client:
        result = await client.call_tool("typo", {"topic": "x"})
    assert result.is_error
    template = Environment(undefined=StrictUndefined).from_string("{{ topci }}")
    undefined = raised_by(template.render, UndefinedError)  # Jinja's own words for the name
    assert f"'typo': p.md uses a name that is not an argument: {undefined.message}" in text_of(result)


@pytest.mark.parametrize("mode", ERAS)
async def test_without_any_model_provider_the_call_fails_saying_how_to_get_one(
    home: Path, skills: Path, mode: str
) -> None:
    async with connect(home, None, skill_dirs=[skills], mode=mode) as client:
        result = await client.call_tool("summarize", {"text": "x"})
    error = envelope(result)
    assert "no model provider" in error["message"]
    assert error["hint"].startswith("set ANTHROPIC_API_KEY, or call it from a client that supports sampling")


async def test_a_prompt_skill_through_the_anthropic_api(home: Path, skills: Path, stub: AnthropicStub) -> None:
    stub.reply("not json", input_tokens=100, output_tokens=10)
    stub.reply(json.dumps({"summary": "Short.", "words": 1}), input_tokens=120, output_tokens=12)
    async with connect(home, None, skill_dirs=[skills]) as client:
        result = await client.call_tool("summarize", {"text": "A long text."})
    assert result.structured_content == {"summary": "Short.", "words": 1}
    first, second = (r["body"] for r in stub.requests)
    assert first["messages"] == [{"role": "user", "content": "Summarise this in a plain style:\nA long text.\n"}]
    assert second["messages"][1] == {"role": "assistant", "content": "not json"}
    assert first["model"] == second["model"]  # the orchestrator role


# -- instructions skills inside pipelines ------------------------------------------------------------


def _pipeline(home: Path, pipeline_id: str, text: str) -> None:
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{pipeline_id}.yaml").write_text(textwrap.dedent(text))


async def test_an_instructions_skill_in_a_pipeline_is_carried_out_by_the_model(home: Path, skills: Path) -> None:
    _pipeline(
        home,
        "tidy",
        """
        id: tidy
        inputs: {draft: {type: string}}
        steps:
          - id: styled
            skill: style-guide
            parameters: {draft: "{{ draft }}", audience: customers}
          - id: plain
            skill: style-guide
            parameters: {task: "Say hello to {{ styled.greeting }}"}
        outputs:
          styled: "{{ styled }}"
          plain: "{{ plain.text }}"
        """,
    )
    model = ClientModel(json.dumps({"greeting": "Ada", "text": "Dear Ada."}), "Hello, Ada.")
    async with connect(home, model, skill_dirs=[skills]) as client:
        result = await client.call_tool("tidy", {"draft": "hi ada!!!"})
        direct = await client.call_tool("style-guide", {"task": "review"})
    assert not result.is_error, text_of(result)
    data: dict[str, Any] = result.structured_content or {}
    assert data["styled"] == {"greeting": "Ada", "text": "Dear Ada."}  # a JSON answer is the step's output
    assert data["plain"] == "Hello, Ada."
    system = model.requests[0].system_prompt or ""
    assert system.startswith("# Style\n\nWrite short sentences.") and "references/tone.md" in system
    first = model.prompt(0)
    assert '"draft": "hi ada!!!"' in first and '"audience": "customers"' in first
    assert model.prompt(1).startswith("Say hello to Ada")
    assert data["usage"]["calls"] == 2 and set(data["usage"]["steps"]) == {"styled", "plain"}
    # Outside a pipeline the tool still hands the instructions back, no model asked.
    assert (direct.structured_content or {})["instructions"].startswith("# Style")
    assert len(model.requests) == 2
