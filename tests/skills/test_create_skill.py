"""create_skill through a real MCP client, with a scripted model at the process edge.

Each case scripts the model's answers stage by stage (atomize, plan, execute [, parts,
aggregate], review); the skill's tests really run in the script sandbox, and an accepted skill
is really published and called.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_server import create_server
from skills import Home
from skills.creation._creator_ask import parse_json
from tests._scripted import Script, connect, roles

INPUTS = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "The text to count the words of."}},
    "required": ["text"],
    "additionalProperties": False,
}
OUTPUTS = {"type": "object", "properties": {"words": {"type": "integer"}}, "required": ["words"]}

SIMPLE = {"complexity": "simple", "reason": "one function"}


def plan(name: str = "word-count", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "title": "Word count",
        "description": "Count the words of a text. Use it to measure how long a text is.",
        "inputs": INPUTS,
        "outputs": OUTPUTS,
        "approach": "split on whitespace and count",
        "timeout": 10,
        "test_cases": [
            {"arguments": {"text": "one two three"}, "expected": {"words": 3}},
            {
                "arguments": {"text": "  "},
                "checks": [
                    {"path": "words", "equals": 0, "type": "integer"},
                    {"path": "", "contains": "words", "length": 1},
                    {"path": "words", "min": 0, "max": 0, "matches": "^0$"},
                ],
            },
        ],
        **extra,
    }


def script_source(expression: str = "len(args['text'].split())") -> str:
    return (
        "import json\nimport sys\n\n\ndef main():\n    args = json.load(sys.stdin)\n"
        f"    print(json.dumps({{'words': {expression}}}))\n\n\nif __name__ == '__main__':\n    main()\n"
    )


WRITTEN = {"script": script_source(), "body": '# Word count\n\nCounts words: `{"text": "a b"}` gives 2.\n'}
APPROVED = {"approved": True, "reasons": ["does what was asked, safely"]}


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


def registry(home: Path) -> dict[str, dict[str, Any]]:
    return Home(home).read_registry()


async def test_an_accepted_skill_is_saved_recorded_published_at_once_and_callable(home: Path) -> None:
    script = Script.of(
        "It is simple: one function counts words.",  # not JSON: asked again
        SIMPLE,
        plan(),
        WRITTEN,
        APPROVED,
    )
    async with connect(home, script) as session:
        assert "word-count" not in await session.tool_names()
        result = await session.client.call_tool("create_skill", {"request": "count the words of a text"})
        data = result.structured_content
        assert not result.is_error, data
        assert data is not None and data["created"] is True and data["stage"] == "done"
        await session.list_changed()
        assert "word-count" in await session.tool_names()
        called = await session.client.call_tool("word-count", {"text": "the quick brown fox"})
    assert called.structured_content == {"words": 4}
    assert data["name"] == "word-count" and data["published"] is True
    assert data["tests_passed"] == data["tests_total"] == 2
    assert data["review"]["approved"] is True
    assert data["usage"]["calls"] == 5
    folder = home / "skills" / "word-count"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "SKILL.md",
        "scripts/run.py",
        "skill.yaml",
        "tests.json",
    ]
    assert set(data["files"]) == {"SKILL.md", "skill.yaml", "scripts/run.py", "tests.json"}
    assert "run:\n  script: scripts/run.py" in (folder / "skill.yaml").read_text()
    assert json.loads((folder / "tests.json").read_text())[0] == {
        "arguments": {"text": "one two three"},
        "expected": {"words": 3},
    }
    assert registry(home)["word-count"] == {"source": "created", "path": "skills/word-count", "enabled": True}
    # The stages asked the roles they are meant for, and the re-ask said what was wrong.
    role = roles(home)
    wanted = ["validation", "validation", "orchestrator", "orchestrator", "review"]
    assert [r.model for r in script.requests] == [role[w] for w in wanted]
    assert "could not be used" in script.requests[1].prompt
    assert "count the words of a text" in script.requests[4].prompt and "scripts/run.py" in script.requests[4].prompt
    assert script.left == 0


async def test_a_skill_the_reviewer_rejects_is_not_registered_and_the_reasons_come_back(home: Path) -> None:
    rejected = {"approved": False, "reasons": ["it reads files the arguments do not name"]}
    script = Script.of(SIMPLE, plan(), WRITTEN, rejected)
    async with connect(home, script) as session:
        result = await session.client.call_tool("create_skill", {"request": "count the words of a text"})
        tools = await session.tool_names()
    data = result.structured_content
    assert result.is_error and data is not None
    assert data["created"] is False and data["stage"] == "review"
    assert data["reasons"] == ["it reads files the arguments do not name"]
    assert data["tests"] == []  # never run: the review comes first
    assert "scripts/run.py" in data["files"] and "SKILL.md" in data["files"]
    assert "word-count" not in tools
    assert not (home / "skills" / "word-count").exists()
    assert "word-count" not in registry(home)


async def test_a_skill_that_fails_its_own_tests_is_not_registered_and_the_failing_case_is_shown(home: Path) -> None:
    given = [
        {"arguments": {"text": "a b"}, "expected": {"words": 2}},
        {"arguments": {"text": "x"}, "expected": {"words": 1}},
    ]
    buggy = {"script": script_source("len(args['text'])"), "body": "Counts words."}  # counts characters
    script = Script.of(
        SIMPLE,
        plan(name="ignored-name", test_cases=[]),  # the given name and tests win
        {"script": "def main(:\n    pass\n", "body": "x"},  # does not compile: asked again
        buggy,
        APPROVED,
    )
    async with connect(home, script) as session:
        result = await session.client.call_tool(
            "create_skill", {"request": "count words", "name": "words", "test_cases": given}
        )
        tools = await session.tool_names()
    data = result.structured_content
    assert result.is_error and data is not None
    assert data["created"] is False and data["stage"] == "test" and data["name"] == "words"
    assert data["tests_passed"] == 1 and data["tests_total"] == 2
    failing = data["tests"][0]
    assert failing["passed"] is False and failing["arguments"] == {"text": "a b"} and failing["result"] == {"words": 3}
    assert failing["failures"] == ["result.words: expected 2, got 3"]
    assert len(data["reasons"]) == 1 and data["reasons"][0].startswith('test 1 {"text": "a b"}: result.words')
    assert "does not compile: line 1" in script.requests[3].prompt
    assert "words" not in tools and not (home / "skills" / "words").exists()
    assert "words" not in registry(home)


async def test_a_complex_skill_is_written_in_parts_and_aggregated(home: Path) -> None:
    parts = {
        "complexity": "complex",
        "reason": "tokenising and counting are separate",
        "subtasks": [
            {"name": "tokens", "description": "split a text into words"},
            {"name": "tally", "description": "count a list of words"},
        ],
    }
    entry = (
        "import json\nimport sys\n\nfrom part_tally import tally\nfrom part_tokens import tokens\n\n\n"
        "def main():\n    args = json.load(sys.stdin)\n"
        "    print(json.dumps({'words': tally(tokens(args['text']))}))\n\n\n"
        "if __name__ == '__main__':\n    main()\n"
    )
    script = Script.of(
        parts,
        plan(),
        {"code": "def tokens(text):\n    return text.split()\n", "signature": "def tokens(text: str) -> list[str]"},
        {"code": "def count(words):\n    return len(words)\n"},  # the wrong function: asked again
        {"code": "def tally(words):\n    return len(words)\n", "signature": "def tally(words: list) -> int"},
        {"script": entry, "body": "Counts words in two steps."},
        APPROVED,
    )
    async with connect(home, script) as session:
        result = await session.client.call_tool("create_skill", {"request": "count the words of a text"})
        called = await session.client.call_tool("word-count", {"text": "a b c d e"})
    data = result.structured_content
    assert data is not None and data["created"] is True, data
    assert {"scripts/part_tokens.py", "scripts/part_tally.py", "scripts/run.py"} <= set(data["files"])
    assert "must define a top-level function named tally" in script.requests[4].prompt
    assert called.structured_content == {"words": 5}


async def test_a_name_that_is_taken_is_refused_before_any_model_is_asked(home: Path) -> None:
    script = Script.of()
    async with connect(home, script) as session:
        result = await session.client.call_tool("create_skill", {"request": "list files", "name": "list-files"})
    data = result.structured_content
    assert result.is_error and data is not None and data["created"] is False
    assert "builtin skill has that name" in data["reasons"][0] and "overwrite" in data["reasons"][0]
    assert script.requests == []


def test_answers_are_found_in_prose_and_code_fences() -> None:
    assert parse_json('Here it is:\n```json\n{"a": 1}\n```\nDone.') == {"a": 1}
    assert parse_json('Sure. {"approved": true, "reasons": []} Hope that helps.') == {"approved": True, "reasons": []}
    with pytest.raises(ValueError, match="not JSON"):
        parse_json("no json here")


async def test_a_skill_is_created_through_a_2026_07_28_client_whose_calls_pause_for_its_model(home: Path) -> None:
    script = Script.of(SIMPLE, plan(), WRITTEN, APPROVED)
    async with connect(home, script, mode="auto") as session:
        result = await session.client.call_tool("create_skill", {"request": "count the words of a text"})
        assert "word-count" in await session.tool_names()
        called = await session.client.call_tool("word-count", {"text": "a b"})
    data = result.structured_content
    assert data is not None and data["created"] is True, data
    assert called.structured_content == {"words": 2}
    assert len(script.requests) == 4 and script.left == 0  # replayed rounds reuse the answers given


async def test_without_a_model_create_skill_fails_saying_how_to_get_one(home: Path) -> None:
    async with Client(create_server(home=home)) as client:  # no sampling, no API key
        result = await client.call_tool("create_skill", {"request": "count words"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "ANTHROPIC_API_KEY" in text and "sampling" in text
    assert all(entry["source"] != "created" for entry in registry(home).values())
