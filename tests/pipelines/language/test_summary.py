"""Run summaries: a pipeline result says in `summary` how its steps went (seed 004's ExecutionResult).

Through a real in-memory MCP client, with small folder skills written into tmp_path; the CLI
through the installed console script.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_server import create_server
from tests.helpers import envelope, run_cli, write_skill

OPEN = {"type": "object"}


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    for name, impl in {
        "echo": "def run(**kwargs):\n    return kwargs\n",
        "fail": "def run(message='boom'):\n    raise RuntimeError(message)\n",
        "odd-only": "def run(n):\n    if n % 2 == 0:\n        raise ValueError(f'{n} is even')\n    return {'n': n}\n",
    }.items():
        write_skill(root, name, contract={"inputs": OPEN, "run": {"python": "impl:run"}}, impl=impl)
    return root


async def _call(home: Path, skills: Path, text: str, *, partial: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Publish the pipeline, call it; (its structured result, its tool's output schema).

    `partial`: a step fails under `on_error: continue`, so the result is an error whose
    structured content is the envelope with the outputs, summary and usage beside it."""
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summed.yaml").write_text(textwrap.dedent(text))
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("summed", {})
    if partial:
        assert envelope(result)["type"] == "skill_failed"
    else:
        assert not result.is_error, result.content
    assert result.structured_content is not None and tools["summed"].output_schema is not None
    return result.structured_content, tools["summed"].output_schema


MIXED = """\
id: summed
steps:
  - id: first
    skill: echo
    parameters: {x: 1}
  - id: broken
    skill: fail
    on_error: continue
  - id: never
    skill: echo
    condition: "{{ false }}"
  - id: items
    for: {items: [1, 2, 3], variable: n}
    skill: odd-only
    parameters: {n: "{{ n }}"}
    on_error: continue
  - id: nested
    if:
      condition: "{{ true }}"
      then:
        - {id: inner, skill: echo, parameters: {y: 2}}
  - id: quoting
    skill: echo
    parameters: {seen: "{{ broken }}"}
outputs:
  first: "{{ first.x }}"
"""


async def test_the_result_counts_succeeded_failed_and_skipped_steps_in_a_line(home: Path, skills: Path) -> None:
    data, schema = await _call(home, skills, MIXED, partial=True)
    assert data["summary"] == {
        "total": 6,
        "succeeded": 3,  # first, nested, quoting: quoting a failure record is not failing
        "failed": 2,  # broken itself; items through its second item (on_error: continue)
        "skipped": 1,
        "failed_steps": ["broken", "items"],
        "line": "PARTIAL: 3/6 steps succeeded, 2 failed (broken, items), 1 skipped",
    }
    assert data["first"] == 1
    summary = schema["properties"]["summary"]
    assert summary["type"] == "object" and set(summary["required"]) == set(data["summary"])


async def test_a_failure_deep_inside_a_loop_item_fails_its_top_level_step_and_is_named_by_its_path(
    home: Path, skills: Path
) -> None:
    text = """\
    id: summed
    steps:
      - id: outer
        for: {items: [1, 2], variable: n, parallel: true}
        steps:
          - id: branch
            if:
              condition: "{{ n == 2 }}"
              then:
                - {id: deep, skill: fail, on_error: continue}
      - id: after
        skill: echo
    """
    data, _ = await _call(home, skills, text, partial=True)
    assert data["summary"]["failed_steps"] == ["outer/branch/deep"] and data["summary"]["succeeded"] == 1
    assert data["summary"]["failed"] == 1


async def test_a_pipeline_with_its_own_summary_output_gets_the_run_summary_as_run_summary(
    home: Path, skills: Path
) -> None:
    text = """\
    id: summed
    steps:
      - {id: first, skill: echo, parameters: {text: "short"}}
    outputs:
      summary: "{{ first.text }}"
    """
    data, schema = await _call(home, skills, text)
    assert data["summary"] == "short"
    assert data["run_summary"]["line"] == "SUCCESS: 1/1 steps succeeded, 0 failed, 0 skipped"
    assert "run_summary" in schema["properties"]


def test_the_command_line_prints_the_outputs_of_a_partial_run_says_partial_and_exits_1(
    tmp_path: Path, home: Path, skills: Path
) -> None:
    pipeline = tmp_path / "summed.yaml"
    pipeline.write_text(MIXED)
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    plain = run_cli("run", str(pipeline), "--skills", str(skills), env=env, cwd=tmp_path)
    assert plain.code == 1, plain.err
    assert json.loads(plain.out) == {"first": 1}  # what it computed is not lost
    assert "ended PARTIAL: 3/6 steps succeeded, 2 failed (broken, items), 1 skipped" in plain.err
    full = run_cli("run", str(pipeline), "--skills", str(skills), "--json", env=env, cwd=tmp_path)
    assert full.code == 1, full.err
    data = json.loads(full.out)
    assert data["status"] == "failed" and data["first"] == 1
    assert data["summary"]["failed_steps"] == ["broken", "items"] and data["usage"]["calls"] == 0
    listed = run_cli("runs", "list", "--json", env=env, cwd=tmp_path).json()
    assert isinstance(listed, dict)
    assert [r["status"] for r in listed["runs"]] == ["failed", "failed"]
    assert listed["runs"][0]["failed_step"] == "broken" and "PARTIAL" in listed["runs"][0]["error"]
    assert listed["runs"][0]["result"]["first"] == 1


def test_the_command_line_prints_a_successful_runs_summary_line(tmp_path: Path, home: Path, skills: Path) -> None:
    pipeline = tmp_path / "fine.yaml"
    pipeline.write_text("id: fine\nsteps:\n  - {id: first, skill: echo, parameters: {x: 1}}\n")
    env = {**os.environ, "ORCHESTRATOR_HOME": str(home)}
    plain = run_cli("run", str(pipeline), "--skills", str(skills), env=env, cwd=tmp_path)
    assert plain.code == 0, plain.err
    assert json.loads(plain.out) == {"first": {"x": 1}}  # no run_id, summary nor usage among the outputs
    assert "orchestrator: SUCCESS: 1/1 steps succeeded, 0 failed, 0 skipped" in plain.err


async def test_plan_and_run_review_returns_issues_and_fix_instructions_as_lists(home: Path) -> None:
    from tests._scripted import Script, connect
    from tests.pipelines.planning.test_plan_and_run import SUM

    review = {
        "verdict": "needs_fix",
        "reasoning": "The sum is there, the mean is not.",
        "issues": ["the output is the sum", "the mean is missing"],
        "fix_instructions": "output stats.mean as `mean`",  # one string: one instruction
    }
    script = Script.of(f"```yaml\n{SUM}```", review)
    async with connect(home, script) as session:
        result = await session.client.call_tool("plan_and_run", {"request": "the mean", "max_iterations": 1})
    data = result.structured_content
    assert data is not None and data["status"] == "needs_fix", data
    assert data["review"] == {
        "verdict": "needs_fix",
        "reasoning": "The sum is there, the mean is not.",
        "issues": ["the output is the sum", "the mean is missing"],
        "fix_instructions": ["output stats.mean as `mean`"],
    }
    assert data["outputs"]["summary"]["line"] == "SUCCESS: 1/1 steps succeeded, 0 failed, 0 skipped"
    assert '"issues": [' in script.requests[1].system  # the reviewer is asked for lists
