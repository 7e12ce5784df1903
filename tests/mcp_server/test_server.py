"""The server through a real in-memory MCP client: catalogue, schemas, errors, resources, prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_server import create_server
from skills.core.yamltext import load_yaml
from tests.helpers import envelope, raised_by, schema_says, write_skill

ADD_CONTRACT: dict[str, Any] = {
    "inputs": {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "first"},
            "b": {"type": "integer", "description": "second", "default": 1},
        },
        "required": ["a"],
        "additionalProperties": False,
    },
    "outputs": {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]},
    "run": {"python": "impl:add"},
    "timeout": 5,
    "annotations": {"readOnlyHint": True, "idempotentHint": True},
}


def add_skill(parent: Path, name: str = "adder", **extra: Any) -> Path:
    return write_skill(
        parent,
        name,
        description="Add two integers. Use it to test the server.",
        contract={**ADD_CONTRACT, **extra},
        impl="def add(a, b=1):\n    return {'sum': a + b}\n",
        front={"metadata": {"title": "Adder"}},
    )


@pytest.fixture
def user_skills(tmp_path: Path) -> Path:
    root = tmp_path / "user-skills"
    add_skill(root)
    return root


async def test_a_skill_is_a_tool_with_its_explicit_schemas_title_and_annotations(user_skills: Path) -> None:
    server = create_server(skill_dirs=[user_skills])
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    tool = tools["adder"]
    assert tool.title == "Adder"
    assert tool.description == "Add two integers. Use it to test the server."
    assert tool.input_schema == ADD_CONTRACT["inputs"]
    assert tool.output_schema == ADD_CONTRACT["outputs"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_json_object_result_comes_back_as_structured_content(user_skills: Path, mode: str) -> None:
    async with Client(create_server(skill_dirs=[user_skills]), mode=mode) as client:
        result = await client.call_tool("adder", {"a": 2, "b": 40})
    assert not result.is_error
    assert result.structured_content == {"sum": 42}
    assert '"sum": 42' in result.content[0].text


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({}, "a"), ({"a": "two"}, "a"), ({"a": 1, "c": 3}, "c")],
    ids=["missing", "wrong-type", "unknown"],
)
async def test_arguments_that_break_the_schema_are_refused_naming_the_field(
    user_skills: Path, arguments: dict[str, Any], field: str
) -> None:
    async with Client(create_server(skill_dirs=[user_skills])) as client:
        result = await client.call_tool("adder", arguments)
    error = envelope(result)
    assert error["type"] == "invalid_arguments" and error["retryable"] is False
    # our prefix and the field, then the validator's own explanation, passed on as it words it
    said = schema_says(ADD_CONTRACT["inputs"], arguments)
    assert error["message"] == f"invalid arguments for 'adder': {field}: {said}"
    assert error["where"] == field
    assert error["hint"] == "arguments: a, b; required: a"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_unknown_tool_is_an_error_that_suggests_the_closest_name(user_skills: Path, mode: str) -> None:
    async with Client(create_server(skill_dirs=[user_skills]), mode=mode) as client:
        result = await client.call_tool("addr", {"a": 1})
    error = envelope(result)
    assert result.structured_content is not None, "an unknown tool has no output schema: structured too"
    assert error["type"] == "unknown_tool" and error["where"] == "name"
    assert "no skill or tool named 'addr'" in error["message"]
    assert "did you mean 'adder'" in error["hint"]


async def test_a_crashing_skill_gives_a_clean_error_without_traceback_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    root = tmp_path / "skills"
    write_skill(
        root,
        "crash",
        contract={"run": {"python": "impl:main"}},
        impl="def main():\n    secret_local = 'x'\n    raise KeyError('missing-key')\n",
    )
    add_skill(root)
    async with Client(create_server(skill_dirs=[root])) as client:
        result = await client.call_tool("crash", {})
        error = envelope(result)
        assert error["type"] == "skill_failed" and error["where"] == "impl.py:3"
        text = result.content[0].text
        assert "'crash' failed: KeyError" in text and "missing-key" in text
        assert "Traceback" not in text and "secret_local" not in text
        assert (await client.call_tool("adder", {"a": 1})).structured_content == {"sum": 2}


async def test_a_slow_python_skill_is_stopped_at_its_timeout(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(
        root,
        "slow",
        contract={"run": {"python": "impl:main"}, "timeout": 0.2},
        impl="import anyio\nasync def main():\n    await anyio.sleep(30)\n",
    )
    async with Client(create_server(skill_dirs=[root])) as client:
        with anyio.fail_after(10):
            result = await client.call_tool("slow", {})
    error = envelope(result)
    assert error["type"] == "timeout" and error["retryable"] is True
    assert "did not finish within 0.2s" in error["message"]


async def test_a_result_that_breaks_the_outputs_schema_is_reported_as_an_error(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    add_skill(root)
    (root / "adder" / "impl.py").write_text("def add(a, b=1):\n    return {'sum': str(a + b)}\n")
    async with Client(create_server(skill_dirs=[root])) as client:
        result = await client.call_tool("adder", {"a": 1})
    error = envelope(result)
    assert error["type"] == "skill_failed" and error["where"] == "result.sum"
    assert "does not match its outputs schema at sum" in error["message"]
    assert result.structured_content is None, "the tool has an output schema: the envelope is text only"


async def test_progress_and_log_messages_reach_the_calling_client(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    write_skill(
        root,
        "steps",
        contract={"inputs": {"type": "object", "properties": {"n": {"type": "integer"}}}, "run": {"python": "impl:go"}},
        impl="""
        async def go(n, ctx):
            for i in range(n):
                await ctx.progress(i + 1, n, f"step {i + 1}")
            await ctx.info("all steps done")
            return {"done": n}
        """,
    )
    progress: list[tuple[float, float | None, str | None]] = []
    logs: list[Any] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def on_log(params: Any) -> None:
        logs.append(params)

    async with Client(create_server(skill_dirs=[root]), mode="legacy", logging_callback=on_log) as client:
        result = await client.call_tool("steps", {"n": 3}, progress_callback=on_progress)
    assert result.structured_content == {"done": 3}
    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert [(entry.level, entry.data, entry.logger) for entry in logs] == [("info", "all steps done", "steps")]


def _guide(parent: Path) -> Path:
    return write_skill(
        parent,
        "style-guide",
        description="House style for reports. Use when writing any report.",
        body="# Style\nWrite short sentences.\n",
        files={"references/tone.md": "Be direct.\n", "assets/logo.bin": "\x00\x01"},
    )


async def test_an_instructions_skill_returns_its_body_and_bundled_files(tmp_path: Path) -> None:
    _guide(tmp_path / "skills")
    async with Client(create_server(skill_dirs=[tmp_path / "skills"])) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("style-guide", {"task": "write the Q3 report"})
    assert tools["style-guide"].description.startswith("Instructions: House style")
    assert tools["style-guide"].input_schema["properties"]["task"]["type"] == "string"
    data = result.structured_content
    assert data is not None
    assert data["instructions"].startswith("# Style") and data["task"] == "write the Q3 report"
    assert data["files"] == ["SKILL.md", "assets/logo.bin", "references/tone.md"]


async def test_skill_files_are_resources_and_nothing_outside_the_folder_is(tmp_path: Path) -> None:
    _guide(tmp_path / "skills")
    async with Client(create_server(skill_dirs=[tmp_path / "skills"])) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert "skill://style-guide/SKILL.md" in listed
        templates = (await client.list_resource_templates()).resource_templates
        assert templates[0].uri_template == "skill://{name}/{path}"
        tone = await client.read_resource("skill://style-guide/references/tone.md")
        assert tone.contents[0].text == "Be direct.\n"
        skill_md = await client.read_resource("skill://style-guide/SKILL.md")
        assert "name: style-guide" in skill_md.contents[0].text
        for uri in (
            "skill://style-guide/../../etc/passwd",
            "skill://style-guide/%2e%2e/%2e%2e/etc/passwd",
            "skill://style-guide/references/../../../etc/passwd",
            "skill://style-guide//etc/passwd",
        ):
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            assert "root:" not in str(refused.value)
        with pytest.raises(MCPError, match=r"no file 'nope\.md'"):
            await client.read_resource("skill://style-guide/nope.md")


async def test_instructions_skills_are_prompts(tmp_path: Path) -> None:
    _guide(tmp_path / "skills")
    async with Client(create_server(skill_dirs=[tmp_path / "skills"])) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert "style-guide" in prompts
        got = await client.get_prompt("style-guide", {"task": "review my draft"})
    text = got.messages[0].content.text
    assert text.startswith("# Style") and text.endswith("Task: review my draft")
    assert "skill://style-guide/references/tone.md" in text


async def test_a_broken_folder_is_reported_and_every_good_skill_is_still_served(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    add_skill(root)
    bad = root / "broken"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: broken\ndescription: [unclosed\n---\nbody\n")
    write_skill(root, "no-template", contract={"run": {"prompt": "prompt.md"}})
    write_skill(root, "no-impl", contract={"run": {"python": "missing:main"}})
    server = create_server(skill_dirs=[root])
    async with Client(server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert (await client.call_tool("adder", {"a": 1})).structured_content == {"sum": 2}
    assert "adder" in names and "list-files" in names
    assert not names & {"broken", "no-template", "no-impl"}
    reported = {p.path.name: str(p.error) for p in server.catalog.problems()}
    assert "front matter is not valid YAML at line 4" in reported["broken"]
    unclosed = raised_by(lambda: load_yaml("name: broken\ndescription: [unclosed\n"), yaml.MarkedYAMLError)
    assert f"({unclosed.context} that starts at line 3)" in reported["broken"]  # PyYAML's words, our line
    assert "'prompt.md' does not exist" in reported["no-template"]
    assert "'missing.py' does not exist" in reported["no-impl"]


async def test_a_user_skill_overrides_the_builtin_of_the_same_name(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    add_skill(root, "list-files")
    server = create_server(skill_dirs=[root])
    assert server.catalog.get("list-files").source == "user"
    async with Client(server) as client:
        result = await client.call_tool("list-files", {"a": 5})
    assert result.structured_content == {"sum": 6}


async def test_the_registry_can_switch_a_skill_off(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "skills"
    add_skill(root)
    create_server()  # installs the home
    registry = home / "skills" / "registry.yaml"
    registry.write_text(registry.read_text() + "  adder: {enabled: false}\n")
    async with Client(create_server(skill_dirs=[root])) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("adder", {"a": 1})
    assert "adder" not in names
    assert envelope(result)["type"] == "unknown_tool" and "disabled" in envelope(result)["hint"]


async def test_a_restart_sees_skills_edited_while_the_server_was_down(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "skills"
    add_skill(root)
    async with Client(create_server(skill_dirs=[root])) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= {"adder"}
    assert list((home / "cache").glob("skills-*.json")), "parsed skills are cached in the home"
    write_skill(
        root,
        "adder",
        description="Add, edited offline.",
        contract=ADD_CONTRACT,
        impl="def add(a, b=1):\n    return {'sum': a + b}\n",
    )
    add_skill(root, "adder-two")
    async with Client(create_server(skill_dirs=[root])) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert tools["adder"].description == "Add, edited offline."
    assert "adder-two" in tools
