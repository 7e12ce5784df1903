"""plan_and_run through a real MCP client, with a scripted model at the process edge.

The model's pipelines are really verified, run (built-in skills, run history, checkpoints)
and, when asked, registered; only the model's answers are scripted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_server import create_server
from pipelines.language.describe import help_text
from pipelines.language.verify import check_text
from pipelines.storage.runs import RunStore
from skills import Home
from tests._scripted import Script, connect

MEAN = """\
id: mean-of-numbers
description: "The mean of a few numbers"
inputs:
  numbers: {type: array, default: [2, 4, 6, 8]}
steps:
  - id: stats
    skill: number-stats
    parameters: {values: "{{ numbers }}"}
outputs:
  mean: "{{ stats.mean }}"
"""

BROKEN = MEAN.replace("skill: number-stats", "skill: number-stat").replace("{{ stats.mean }}", "{{ stat.mean }}")
SUM = MEAN.replace('mean: "{{ stats.mean }}"', 'total: "{{ stats.sum }}"')
COMPLETE = {"verdict": "complete", "reasons": ["the mean is there"], "fix_instructions": ""}


def fenced(text: str) -> str:
    return f"Here is the pipeline:\n\n```yaml\n{text}```\n"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


async def call(home: Path, script: Script, arguments: dict[str, Any]) -> dict[str, Any]:
    async with connect(home, script) as session:
        result = await session.client.call_tool("plan_and_run", arguments)
    assert result.structured_content is not None, result.content
    return result.structured_content


async def test_verifier_errors_go_back_to_the_model_until_the_pipeline_compiles_then_it_runs(home: Path) -> None:
    script = Script.of(fenced(BROKEN), fenced(MEAN), COMPLETE)
    data = await call(home, script, {"request": "the mean of 2, 4, 6 and 8"})
    assert data["status"] == "complete", data
    assert data["iterations"] == 1 and data["history"][0]["fixes"] == 1
    assert data["outputs"]["mean"] == 5 and data["run_id"] == data["outputs"]["run_id"]
    assert data["pipeline_yaml"] == MEAN and data["pipeline_id"] == "mean-of-numbers"
    assert data["review"]["verdict"] == "complete"
    assert data["usage"]["calls"] == 3
    # What the model was given: the skills it may use, the syntax; then every verifier error.
    first, fix, review = script.requests
    assert "number-stats" in first.prompt and "arguments: values: array*" in first.prompt
    assert "Writing pipelines" in first.system and "```yaml" in first.system
    assert "unknown skill 'number-stat'" in fix.prompt and "did you mean 'number-stats'" in fix.prompt
    assert "'stat' is not defined" in fix.prompt
    assert '"mean": 5' in review.prompt and "the mean of 2, 4, 6 and 8" in review.prompt
    assert "needs_fix" in review.system
    record = RunStore(Home(home).state_db).get(data["run_id"])
    assert record is not None and record.status == "succeeded" and record.pipeline == "mean-of-numbers"


async def test_a_needs_fix_review_sends_the_reasons_back_and_the_next_iteration_completes(home: Path) -> None:
    needs_fix = {
        "verdict": "needs_fix",
        "reasons": ["the output is the sum, the request asked for the mean"],
        "fix_instructions": "output stats.mean as `mean`",
    }
    script = Script.of(fenced(SUM), needs_fix, fenced(MEAN), COMPLETE)
    data = await call(home, script, {"request": "the mean of 2, 4, 6 and 8"})
    assert data["status"] == "complete", data
    assert data["iterations"] == 2
    assert [h["verdict"] for h in data["history"]] == ["needs_fix", "complete"]
    first_run, second_run = (h["run_id"] for h in data["history"])
    assert first_run and second_run and first_run != second_run == data["run_id"]
    assert data["outputs"]["mean"] == 5
    revise = script.requests[2]
    assert "the output is the sum" in revise.prompt and "output stats.mean as `mean`" in revise.prompt
    assert any(m["role"] == "assistant" and "total:" in str(m["content"]) for m in revise.messages)


async def test_a_failed_run_is_sent_back_as_a_fix_and_max_iterations_bounds_the_loop(home: Path) -> None:
    missing = MEAN.replace("skill: number-stats", "skill: read-file").replace(
        'parameters: {values: "{{ numbers }}"}', f"parameters: {{path: {json.dumps(str(home / 'nope.txt'))}}}"
    )
    needs_fix = {"verdict": "needs_fix", "reasons": ["no mean"], "fix_instructions": "use number-stats"}
    script = Script.of(fenced(missing), fenced(SUM), needs_fix)
    data = await call(home, script, {"request": "the mean of 2, 4, 6 and 8", "max_iterations": 2})
    assert data["status"] == "needs_fix"
    assert data["iterations"] == 2
    assert data["history"][0]["error"] and "nope.txt" in data["history"][0]["error"]
    assert "failed when it ran" in script.requests[1].prompt and "nope.txt" in script.requests[1].prompt
    assert data["outputs"]["total"] == 20 and data["review"]["verdict"] == "needs_fix"
    assert script.left == 0


async def test_a_pipeline_that_never_compiles_fails_with_the_verifier_issues(home: Path) -> None:
    script = Script.of(fenced(BROKEN), "no yaml at all, sorry", fenced(BROKEN))
    data = await call(home, script, {"request": "the mean", "max_fixes": 2})
    assert data["status"] == "failed" and data["iterations"] == 1
    assert data["outputs"] is None and data["run_id"] is None
    assert any("unknown skill 'number-stat'" in issue for issue in data["issues"])
    assert script.left == 0


async def test_the_final_pipeline_is_registered_as_a_tool_under_the_name_asked_for(home: Path) -> None:
    script = Script.of(fenced(MEAN), COMPLETE, "Averages a list of numbers.")
    async with connect(home, script) as session:
        result = await session.client.call_tool(
            "plan_and_run", {"request": "the mean of 2, 4, 6 and 8", "register_as": "average"}
        )
        data = result.structured_content
        assert data is not None and data["status"] == "complete", data
        await session.list_changed()
        assert "average" in await session.tool_names()
        called = await session.client.call_tool("average", {"numbers": [1, 2, 3]})
    assert data["registered"] is True and data["tool"] == "average"
    assert (home / "pipelines" / "average.yaml").read_text().startswith('id: "average"\n')
    assert called.structured_content is not None and called.structured_content["mean"] == 2
    assert "overview at the top of a tool's help" in script.requests[2].system and data["usage"]["calls"] == 3


OVERVIEW = "Takes a list of numbers and returns their mean. Give `numbers` as a JSON array."


async def test_registered_pipeline_help_is_improved_by_the_model_once_per_file_and_cached(home: Path) -> None:
    script = Script.of(OVERVIEW)
    async with connect(home, script) as session:
        first = await session.client.call_tool("register_pipeline", {"yaml": MEAN})
        again = await session.client.call_tool("register_pipeline", {"yaml": MEAN, "overwrite": True})
        tools = {t.name: t for t in (await session.client.list_tools()).tools}
    assert OVERVIEW in (tools["mean-of-numbers"].description or "")  # the tool description carries it too
    assert first.structured_content is not None and again.structured_content is not None
    help_ = first.structured_content["help"]
    assert help_.startswith("# mean-of-numbers\n\nThe mean of a few numbers\n\n" + OVERVIEW + "\n\n## Inputs")
    assert "## Example call" in help_  # the deterministic facts stay
    assert again.structured_content["help"] == help_
    assert len(script.requests) == 1 and "number-stats" in script.requests[0].prompt
    digest = hashlib.sha256(MEAN.encode()).hexdigest()
    assert (home / "cache" / f"help-{digest}.txt").read_text().strip() == OVERVIEW


async def test_without_a_model_the_help_is_the_deterministic_one(home: Path) -> None:
    async with Client(create_server(home=home)) as client:
        result = await client.call_tool("register_pipeline", {"yaml": MEAN})
    assert result.structured_content is not None
    spec, _ = check_text(MEAN)
    assert spec is not None and result.structured_content["help"] == help_text(spec)
    assert not list((home / "cache").glob("help-*.txt"))


async def test_a_missing_skill_can_be_created_for_the_pipeline_that_needs_it(home: Path) -> None:
    pipeline = """\
id: count-words
inputs:
  text: {type: string, default: "one two three"}
steps:
  - id: counted
    skill: word-count
    parameters: {text: "{{ text }}"}
outputs:
  words: "{{ counted.words }}"
"""
    source = (
        "import json, sys\n\nargs = json.load(sys.stdin)\nprint(json.dumps({'words': len(args['text'].split())}))\n"
    )
    skill_plan = {
        "name": "word-count",
        "description": "Count the words of a text.",
        "inputs": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "outputs": {"type": "object", "properties": {"words": {"type": "integer"}}, "required": ["words"]},
        "test_cases": [{"arguments": {"text": "a b"}, "expected": {"words": 2}}],
    }
    script = Script.of(
        fenced(pipeline),
        {"complexity": "simple"},
        skill_plan,
        {"script": source, "body": "Counts words."},
        {"approved": True, "reasons": []},
        COMPLETE,
    )
    data = await call(home, script, {"request": "count the words of 'one two three'", "create_missing": True})
    assert data["status"] == "complete", data
    assert data["created_skills"] == [{"name": "word-count", "created": True, "stage": "done", "reasons": []}]
    assert data["outputs"]["words"] == 3 and data["history"][0]["fixes"] == 0
    assert "step 'counted'" in script.requests[1].prompt and "count the words" in script.requests[1].prompt
    assert (home / "skills" / "word-count" / "scripts" / "run.py").is_file()


async def test_plan_and_run_works_through_a_2026_07_28_client_whose_calls_pause_for_its_model(home: Path) -> None:
    needs_fix = {"verdict": "needs_fix", "reasons": ["sum, not mean"], "fix_instructions": "output the mean"}
    script = Script.of(fenced(BROKEN), fenced(SUM), needs_fix, fenced(MEAN), COMPLETE)
    async with connect(home, script, mode="auto") as session:
        result = await session.client.call_tool("plan_and_run", {"request": "the mean of 2, 4, 6 and 8"})
    data = result.structured_content
    assert data is not None and data["status"] == "complete", data
    assert data["outputs"]["mean"] == 5 and data["iterations"] == 2
    assert len(script.requests) == 5 and script.left == 0
