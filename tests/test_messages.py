"""Messages that show every mistake at once, where it is and how to fix it (issue 8, "Messages")."""

from __future__ import annotations

from pathlib import Path

from mcp import Client

from mcp_server import create_server

FOUR_MISTAKES = """\
id: broken
description: four mistakes
inputs:
  directory: {type: string, default: "."}
steps:
  - id: files
    skill: list-files
    parameters: {directory: "{{ directry }}"}
  - id: each
    for: {items: "{{ files.paths }}", variable: f, parallel: true, max_parallel: four}
    skill: no-such-skill
    parameters: {path: "{{ f }}"}
  - id: report
    skill: text-stats
    model: gpt-nothing
    parameters: {text: "{{ each }}"}
"""


def test_a_schema_error_does_not_hide_the_other_mistakes_of_a_pipeline(tmp_path: Path, cli) -> None:
    (tmp_path / "broken.yaml").write_text(FOUR_MISTAKES)
    done = cli("pipelines", "validate", "broken.yaml", "--json")
    assert done.code == 2
    found = {(i["line"], i["message"].split(":")[0]) for i in done.json()["issues"]}
    assert found == {
        (8, "'directry' is not defined here"),
        (10, "steps.1.for.max_parallel"),
        (11, "unknown skill 'no-such-skill'"),
        (15, "unknown model 'gpt-nothing'"),
    }


async def test_validate_pipeline_reports_schema_and_semantic_errors_together() -> None:
    async with Client(create_server()) as client:
        result = await client.call_tool("validate_pipeline", {"yaml": FOUR_MISTAKES})
    issues = result.structured_content["issues"]
    assert not result.structured_content["valid"] and len(issues) == 4
    assert [i["line"] for i in issues] == [8, 10, 11, 15]
