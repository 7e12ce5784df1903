"""Missing skills created where a pipeline needs them: register_pipeline / validate_pipeline with
`create_missing: true`, and `orchestrator run --create-missing`.

The model is scripted at the process edge (a client's sampling for the meta tools, the local
Messages-API stand-in for the command line, which has no client); the created skill really goes
through create_skill: strict check, review, its tests in the confined sandbox, publishing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests._scripted import Script, connect
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.helpers import envelope, run_cli
from tests.skills.test_create_skill import APPROVED, SIMPLE, WRITTEN, plan

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="created skills are tested confined (bwrap)")

COUNTING = """\
id: count-words
description: "Count the words of a text"
inputs:
  text: {type: string, default: "one two three"}
steps:
  - id: counted
    skill: word-count
    parameters: {text: "{{ text }}"}
outputs:
  words: "{{ counted.words }}"
"""
CREATION = (SIMPLE, plan(), WRITTEN, APPROVED)
"""The model's answers for one creation: atomize, plan, execute, review."""


@needs_bwrap
async def test_register_pipeline_creates_the_missing_skill_then_registers_and_runs(home: Path) -> None:
    script = Script.of(*CREATION, "Counts the words of a text.")
    async with connect(home, script) as session:
        result = await session.client.call_tool("register_pipeline", {"yaml": COUNTING, "create_missing": True})
        data = result.structured_content
        assert data is not None and data["registered"] is True, result.content
        ran = await session.client.call_tool("count-words", {"text": "a b c d"})
    assert data["created_skills"] == [{"name": "word-count", "created": True, "stage": "done", "reasons": []}]
    assert ran.structured_content is not None and ran.structured_content["words"] == 4
    asked = script.requests[1].prompt  # the plan stage is told which step needs the skill, and why
    assert "step 'counted'" in asked and "Count the words of a text" in asked
    assert (home / "skills" / "word-count" / "scripts" / "run.py").is_file()
    assert (home / "pipelines" / "count-words.yaml").is_file()


async def test_validate_pipeline_reports_a_skill_that_could_not_be_created_and_the_error_stays(home: Path) -> None:
    rejected = {"approved": False, "reasons": ["it reads files it was not asked to"]}
    script = Script.of(SIMPLE, plan(), WRITTEN, rejected)
    async with connect(home, script) as session:
        result = await session.client.call_tool("validate_pipeline", {"yaml": COUNTING, "create_missing": True})
    data = result.structured_content
    assert data is not None and data["valid"] is False
    assert data["created_skills"] == [
        {"name": "word-count", "created": False, "stage": "review", "reasons": ["it reads files it was not asked to"]}
    ]
    assert [i["code"] for i in data["issues"]] == ["unknown-skill"]
    assert not (home / "skills" / "word-count").exists() and script.left == 0


async def test_without_create_missing_nothing_is_created_and_nothing_is_asked(home: Path) -> None:
    script = Script.of()
    async with connect(home, script) as session:
        result = await session.client.call_tool("validate_pipeline", {"yaml": COUNTING})
    data = result.structured_content
    assert data is not None and data["valid"] is False and "created_skills" not in data
    assert script.requests == []


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_create_missing_without_a_model_is_an_error_that_says_how_to_get_one(home: Path, mode: str) -> None:
    from mcp import Client

    from mcp_server import create_server

    async with Client(create_server(home=home), mode=mode) as client:
        result = await client.call_tool("register_pipeline", {"yaml": COUNTING, "create_missing": True})
    error = envelope(result)
    assert error["type"] == "skill_failed" and "ANTHROPIC_API_KEY" in error["hint"]
    assert not (home / "pipelines" / "count-words.yaml").exists()


@needs_bwrap
def test_run_create_missing_creates_the_skill_with_the_api_then_runs_the_pipeline(
    home: Path, tmp_path: Path, stub: AnthropicStub
) -> None:
    pipeline = tmp_path / "count-words.yaml"
    pipeline.write_text(COUNTING)
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    refused = run_cli("run", str(pipeline), env=env, cwd=tmp_path)
    assert refused.code == 2 and "unknown skill 'word-count'" in refused.err
    assert "`--create-missing` has a model write the missing skills" in refused.err
    for answer in CREATION:
        stub.reply(json.dumps(answer))
    run = run_cli(
        "run", str(pipeline), "--create-missing", "--input", "text=four words right here", env=env, cwd=tmp_path
    )
    assert run.code == 0, run.err
    assert json.loads(run.out) == {"words": 4}
    assert "created the skill 'word-count'" in run.err
    assert stub.pending == 0 and len(stub.requests) == 4
    assert [r["body"]["model"] for r in stub.requests] == [
        "claude-haiku-5-5",  # atomize: validation
        "claude-sonnet-5-5",  # plan: orchestrator
        "claude-sonnet-5-5",  # execute: orchestrator
        "claude-opus-5-5",  # review: review
    ]
    again = run_cli("run", str(pipeline), env=env, cwd=tmp_path)  # the skill is the home's now
    assert again.code == 0 and json.loads(again.out) == {"words": 3}


def test_run_create_missing_without_a_key_fails_saying_how_to_get_a_model(home: Path, tmp_path: Path) -> None:
    pipeline = tmp_path / "count-words.yaml"
    pipeline.write_text(COUNTING)
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    run = run_cli("run", str(pipeline), "--create-missing", env=env, cwd=tmp_path)
    assert run.code == 1 and "ANTHROPIC_API_KEY" in run.err
