"""Protocol correctness through real clients of both eras: error codes, logging, completion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, PromptReference, ResourceTemplateReference

from mcp_server import create_server
from skills.core.schema import portability_problems
from tests.helpers import write_skill

ERAS = ["auto", "legacy"]


def _guide(parent: Path, name: str = "style-guide") -> Path:
    return write_skill(
        parent,
        name,
        description="House style for reports. Use when writing any report.",
        body="# Style\nWrite short sentences.\n",
        files={"references/tone.md": "Be direct.\n", "references/terms.md": "Use 'skill'.\n"},
    )


def _chatty(parent: Path) -> Path:
    return write_skill(
        parent,
        "chatty",
        contract={"run": {"python": "impl:main"}},
        impl="""
        async def main(ctx):
            await ctx.log("debug", "a detail")
            await ctx.info("chatty: an info")
            await ctx.warning("a warning")
            await ctx.log("error", "an error")
            return {"ok": True}
        """,
    )


@pytest.mark.parametrize("mode", ERAS)
async def test_an_unknown_prompt_is_invalid_params_with_the_message_and_the_server_goes_on(
    tmp_path: Path, mode: str
) -> None:
    _guide(tmp_path / "skills")
    async with Client(create_server(skill_dirs=[tmp_path / "skills"]), mode=mode) as client:
        with pytest.raises(MCPError) as caught:
            await client.get_prompt("style-giude")
        with pytest.raises(MCPError) as nothing_close:
            await client.get_prompt("quarterly-numbers")
        prompt = await client.get_prompt("style-guide", {"task": "a memo"})
    assert caught.value.error.code == INVALID_PARAMS
    assert "no prompt named 'style-giude'" in caught.value.error.message
    assert "did you mean 'style-guide'" in caught.value.error.message
    assert "prompts/list" in nothing_close.value.error.message  # where prompts are listed, not the tools
    assert "tool" not in nothing_close.value.error.message
    assert "Write short sentences" in prompt.messages[0].content.text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_refused_resource_path_is_invalid_params_and_an_unknown_one_has_its_eras_code(
    tmp_path: Path, mode: str
) -> None:
    _guide(tmp_path / "skills")
    async with Client(create_server(skill_dirs=[tmp_path / "skills"]), mode=mode) as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource("skill://style-guide/../../etc/passwd")
        with pytest.raises(MCPError) as missing:
            await client.read_resource("skill://style-guide/references/none.md")
        with pytest.raises(MCPError) as no_skill:
            await client.read_resource("skill://nobody/SKILL.md")
        read = await client.read_resource("skill://style-guide/references/tone.md")
    assert refused.value.error.code == INVALID_PARAMS and "escapes the skill folder" in refused.value.error.message
    # 2025-11-25: "Resource not found: -32002"; 2026-07-28 (SEP-2164): -32602 Invalid Params.
    expected = INVALID_PARAMS if mode == "auto" else -32002
    assert missing.value.error.code == expected and "no file 'references/none.md'" in missing.value.error.message
    assert no_skill.value.error.code == expected and "no skill named 'nobody'" in no_skill.value.error.message
    assert read.contents[0].text == "Be direct.\n"  # type: ignore[union-attr]


# logging is deprecated in 2026-07-28: the SDK's warning is ignored by its category (its words are the SDK's)
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_logging_is_declared_and_set_level_filters_per_session(tmp_path: Path) -> None:
    _chatty(tmp_path / "skills")
    server = create_server(skill_dirs=[tmp_path / "skills"])
    quiet: list[Any] = []
    loud: list[Any] = []

    async def on_quiet(params: Any) -> None:
        quiet.append(params)

    async def on_loud(params: Any) -> None:
        loud.append(params)

    async with (
        Client(server, mode="legacy", logging_callback=on_quiet) as first,
        Client(server, mode="legacy", logging_callback=on_loud) as second,
    ):
        assert first.server_capabilities.logging is not None
        await first.set_logging_level("warning")
        assert (await first.call_tool("chatty", {})).structured_content == {"ok": True}
        assert (await second.call_tool("chatty", {})).structured_content == {"ok": True}
        await first.set_logging_level("debug")
        await first.call_tool("chatty", {})
    levels = [entry.level for entry in quiet]
    assert levels == ["warning", "error", "debug", "info", "warning", "error"]
    assert (loud[1].logger, loud[1].data) == ("chatty", "an info")  # the logger's name is said once
    assert [entry.level for entry in loud] == ["debug", "info", "warning", "error"]  # its own level: all


async def test_a_2026_client_gets_the_log_levels_it_asks_for(tmp_path: Path) -> None:
    _chatty(tmp_path / "skills")
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    async with Client(
        create_server(skill_dirs=[tmp_path / "skills"]), mode="auto", log_level="warning", logging_callback=on_log
    ) as client:
        assert client.server_capabilities.logging is not None
        await client.call_tool("chatty", {})
    assert [entry.level for entry in logs] == ["warning", "error"]


@pytest.mark.parametrize("mode", ERAS)
async def test_completion_proposes_skill_names_files_and_pipeline_ids(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "skills"
    _guide(root)
    _guide(root, "style-memo")
    skill_file = ResourceTemplateReference(uri="skill://{name}/{path}")
    async with Client(create_server(skill_dirs=[root]), mode=mode) as client:
        assert client.server_capabilities.completions is not None
        names = await client.complete(skill_file, {"name": "name", "value": "style-"})
        files = await client.complete(skill_file, {"name": "path", "value": "references/t"}, {"name": "style-guide"})
        ids = await client.complete(
            ResourceTemplateReference(uri="pipeline://{id}/graph"), {"name": "id", "value": "r"}
        )
        task = await client.complete(PromptReference(name="style-guide"), {"name": "task", "value": "wr"})
        with pytest.raises(MCPError) as unknown:
            await client.complete(PromptReference(name="nope"), {"name": "task", "value": ""})
        with pytest.raises(MCPError) as template:
            await client.complete(ResourceTemplateReference(uri="file://{x}"), {"name": "x", "value": ""})
    assert names.completion.values == ["style-guide", "style-memo"] and names.completion.has_more is False
    assert files.completion.values == ["references/terms.md", "references/tone.md"]
    assert ids.completion.values == ["retry-until-success", "route-by-complexity", "running-totals"]
    assert task.completion.values == []
    assert unknown.value.error.code == INVALID_PARAMS and "no prompt named 'nope'" in unknown.value.error.message
    assert template.value.error.code == INVALID_PARAMS


async def test_completion_is_bounded_to_100_values_with_has_more(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    for i in range(105):
        write_skill(root, f"bulk-{i:03d}")
    async with Client(create_server(skill_dirs=[root])) as client:
        result = await client.complete(
            ResourceTemplateReference(uri="skill://{name}/{path}"), {"name": "name", "value": "bulk-"}
        )
    assert len(result.completion.values) == 100 and result.completion.values[0] == "bulk-000"
    assert result.completion.total == 105 and result.completion.has_more is True


@pytest.mark.parametrize("mode", ERAS)
async def test_completion_proposes_the_runs_with_artifacts_and_their_files(tmp_path: Path, mode: str) -> None:
    async with Client(create_server(), mode=mode) as client:
        ran = await client.call_tool("running-totals", {})
        run_id = ran.structured_content["run_id"]  # type: ignore[index]
        template = ResourceTemplateReference(uri="run://{run_id}/{path}")
        with anyio.fail_after(30):
            runs = await client.complete(template, {"name": "run_id", "value": run_id[:4]})
            files = await client.complete(template, {"name": "path", "value": ""}, {"run_id": run_id})
            strangers = await client.complete(template, {"name": "path", "value": ""}, {"run_id": "../../"})
    assert run_id in runs.completion.values
    assert all(not f.startswith("/") and ".." not in f for f in files.completion.values)
    assert strangers.completion.values == []


async def test_every_published_schema_types_every_property_and_uses_no_type_arrays(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "skills"
    _guide(root)
    write_skill(root, "helper", contract={"run": {"agent": {"skills": ["list-files"]}}})
    write_skill(
        root,
        "typed-helper",
        contract={
            "run": {"agent": {"skills": []}},
            "outputs": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    )
    write_skill(root, "summarize", contract={"run": {"prompt": "p.md"}}, files={"p.md": "Summarize {{ text }}"})
    pipelines = home / "pipelines"
    pipelines.mkdir(parents=True)
    (pipelines / "loose.yaml").write_text(
        "id: loose\ninputs: {anything: {description: untyped}}\nparameters: {n: 3}\nsteps:\n"
        "  - id: files\n    skill: list-files\n    parameters: {directory: .}\n"
        "outputs: {count: '{{ files.count }}', raw: '{{ anything }}', label: 'n={{ n }}', same: '{{ n > 2 }}'}\n"
    )
    async with Client(create_server(home=home, skill_dirs=[root])) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"validate_pipeline", "create_skill", "code-review", "list-files", "helper", "loose"} <= tools.keys()
    problems = [
        f"{name} {side}: {problem}"
        for name, tool in tools.items()
        for side, schema in (("input", tool.input_schema), ("output", tool.output_schema))
        for problem in portability_problems(schema or {})
    ]
    assert problems == []
    loose = tools["loose"].output_schema["properties"]  # type: ignore[index]
    assert (loose["count"]["type"], loose["label"]["type"], loose["same"]["type"]) == ("integer", "string", "boolean")
    assert [m["type"] for m in loose["raw"]["anyOf"]] == ["object", "array", "string", "number", "boolean", "null"]
