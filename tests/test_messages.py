"""Messages that show every mistake at once, where it is and how to fix it (issue 8, "Messages")."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
from mcp import Client

from mcp_server import create_server
from tests.helpers import write_skill

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


def _python_skill(parent: Path, name: str, contract: dict, impl: str) -> Path:
    return write_skill(parent, name, contract={"inputs": {"type": "object"}, **contract}, impl=impl)


def test_skill_yaml_errors_carry_file_line_col_and_did_you_mean(tmp_path: Path, cli) -> None:
    folder = _python_skill(tmp_path, "typo", {"run": {"python": "impl:main"}, "timout": 5}, "def main():\n    pass\n")
    done = cli("skills", "validate", str(folder), "--json")
    problem = done.json()["folders"][0]["problems"][0]
    assert done.code == 2
    assert (problem["line"], problem["col"], problem["message"]) == (5, 1, "unknown key 'timout'")
    assert problem["hint"].startswith("did you mean 'timeout'?")
    text = cli("skills", "validate", str(folder)).out
    assert f"{folder / 'skill.yaml'}:5:1 [timout]: error: unknown key 'timout'" in text


def test_validate_checks_the_python_entry_point_without_importing_it(tmp_path: Path, cli) -> None:
    impl = "import sys\nsys.exit('importing me is a mistake')\n\ndef count(text):\n    return len(text)\n"
    folder = _python_skill(tmp_path, "counter", {"run": {"python": "impl:cuont"}}, impl)
    done = cli("skills", "validate", str(folder), "--json")
    problem = done.json()["folders"][0]["problems"][0]
    assert done.code == 2 and problem["field"] == "run.python" and problem["line"] == 4
    assert "has no top-level function 'cuont'" in problem["message"] and "impl:count" in problem["hint"]
    broken = _python_skill(tmp_path, "broken", {"run": {"python": "impl:main"}}, "def main(:\n    pass\n")
    syntax = cli("skills", "validate", str(broken), "--json").json()["folders"][0]["problems"][0]
    assert syntax["path"] == str(broken / "impl.py") and syntax["line"] == 1 and "does not parse" in syntax["message"]


def test_an_unknown_model_in_skill_yaml_is_reported_before_any_call(tmp_path: Path, cli) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "summarise", contract={"run": {"prompt": "prompt.md"}, "model": "claude-sonet"})
    (skills / "summarise" / "prompt.md").write_text("Summarise {{ text }}")
    validated = cli("skills", "validate", str(skills / "summarise"), "--json").json()
    problem = validated["folders"][0]["problems"][0]
    assert problem["field"] == "model" and problem["message"] == "unknown model 'claude-sonet'"
    shown = cli("skills", "show", "summarise", "--skills", str(skills), "--json").json()
    assert any("unknown model 'claude-sonet'" in w for w in shown["warnings"])
    (tmp_path / "uses.yaml").write_text(
        "id: uses\ndescription: d\nsteps:\n  - id: s\n    skill: summarise\n    parameters: {text: hi}\n"
    )
    issues = cli("pipelines", "validate", "uses.yaml", "--skills", str(skills), "--json").json()["issues"]
    assert [(i["line"], i["code"]) for i in issues] == [(5, "unknown-model")]
    assert "summarise" in issues[0]["message"] and "claude-sonet" in issues[0]["message"]


def _traceback_lines(path: Path, line: int, function: str) -> tuple[str, str]:
    """The first line of a Python traceback, and its line for a frame (as this Python writes them)."""
    try:
        raise RuntimeError
    except RuntimeError as exc:
        header = traceback.format_exception(exc)[0]
    return header, traceback.format_list([(str(path), line, function, "")])[0]


@pytest.mark.parametrize("define", ["def", "async def"], ids=["sync-in-a-worker", "async-in-process"])
def test_a_failing_skill_called_from_the_cli_says_where_in_its_file(tmp_path: Path, cli, define: str) -> None:
    impl = f"def helper(x):\n    return 1 / x\n\n\n{define} boom():\n    return helper(0)\n"
    folder = _python_skill(tmp_path / "skills", "boom", {"run": {"python": "impl:boom"}}, impl)
    done = cli("call", "boom", "--skills", str(tmp_path / "skills"))
    assert done.code == 1
    assert f"(at {folder / 'impl.py'}:2)" in done.err and "--log-level DEBUG" in done.err
    assert "server log" not in done.err and "Traceback" not in done.err
    debug = cli("call", "boom", "--skills", str(tmp_path / "skills"), "--log-level", "DEBUG", allow_traceback=True)
    header, frame = _traceback_lines(folder / "impl.py", 6, "boom")  # Python's layout, read from Python
    assert header in debug.err and frame in debug.err
