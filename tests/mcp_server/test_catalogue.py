"""Big catalogues: catalogue mode (find, read, call skills by name) and cursors on every long list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_server import create_server
from tests._wild import many_skills
from tests.helpers import envelope, write_skill

META = {
    "validate_pipeline",
    "register_pipeline",
    "create_skill",
    "plan_and_run",
    "orchestrate",
    "spawn_agent",
    "run_pipeline",
    "answer_run",
    "list_runs",
    "get_run",
    "cancel_run",
}
CATALOGUE = {"find_skills", "read_skill", "call_skill"}
ADD = {
    "inputs": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    "outputs": {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]},
    "run": {"python": "impl:add"},
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = many_skills(tmp_path_factory.mktemp("corpus"), 1_200)
    write_skill(root / "math", "adder", contract=ADD, impl="def add(a, b):\n    return {'sum': a + b}\n")
    return root


async def _all_pages(list_page) -> list:
    items, cursor = [], None
    while True:
        page = await list_page(cursor)
        items += page[0]
        cursor = page[1]
        if cursor is None:
            return items


async def test_a_big_catalogue_publishes_a_few_tools_instead_of_one_per_skill(corpus: Path) -> None:
    server = create_server(skill_dirs=[corpus], builtin=False)
    async with Client(server) as client:
        listing = await client.list_tools()
        found = await client.call_tool("find_skills", {"query": "convert csv files", "limit": 5})
    assert {t.name for t in listing.tools} == CATALOGUE | META and listing.next_cursor is None
    hits = found.structured_content["skills"]
    assert found.structured_content["total"] == 1_201 and len(hits) == 5
    assert all("csv" in h["description"] for h in hits)


async def test_a_skill_found_in_the_catalogue_is_read_and_called_with_validated_arguments(corpus: Path) -> None:
    server = create_server(skill_dirs=[corpus], builtin=False, pipelines=False)
    async with Client(server) as client:
        read = await client.call_tool("read_skill", {"name": "adder"})
        called = await client.call_tool("call_skill", {"name": "adder", "arguments": {"a": 2, "b": 40}})
        wrong = await client.call_tool("call_skill", {"name": "adder", "arguments": {"a": "two"}})
        unknown = await client.call_tool("call_skill", {"name": "addr", "arguments": {}})
        direct = await client.call_tool("adder", {"a": 1, "b": 1})  # still callable by its own name
        resource = await client.read_resource("skill://skill-0007/SKILL.md")
    assert read.structured_content["input_schema"] == ADD["inputs"]
    assert read.structured_content["files"][0] == "skill://adder/SKILL.md"
    assert called.structured_content == {"sum": 42} and direct.structured_content == {"sum": 2}
    assert envelope(wrong)["type"] == "invalid_arguments" and "a" in envelope(wrong)["where"]
    assert envelope(unknown)["type"] == "unknown_tool" and "adder" in envelope(unknown)["hint"]
    assert "Body of skill-0007." in resource.contents[0].text


async def test_catalogue_mode_follows_the_threshold_and_the_flag(tmp_path: Path) -> None:
    many_skills(tmp_path / "few", 6, nested=False)
    for mode, threshold, expect_catalogue in (("auto", 5, True), ("auto", 6, False), ("on", 100, True)):
        server = create_server(
            skill_dirs=[tmp_path / "few"], builtin=False, pipelines=False, catalogue=mode, catalogue_threshold=threshold
        )
        async with Client(server) as client:
            names = {t.name for t in (await client.list_tools()).tools}
        assert (names == CATALOGUE) is expect_catalogue, (mode, threshold, names)


async def test_auto_catalogue_mode_switches_when_a_reload_crosses_the_threshold(tmp_path: Path) -> None:
    root = many_skills(tmp_path / "few", 5, nested=False)
    server = create_server(skill_dirs=[root], builtin=False, pipelines=False, catalogue_threshold=5)
    async with Client(server) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        write_skill(root, "zz-new", description="A new skill about invoices.")
        await server.reload()
        during = {t.name for t in (await client.list_tools()).tools}
        found = (await client.call_tool("find_skills", {"query": "invoices"})).structured_content
        shutil.rmtree(root / "zz-new")
        await server.reload()
        after = {t.name for t in (await client.list_tools()).tools}
        gone = await client.call_tool("find_skills", {"query": "invoices"})
    assert len(before) == 5 and not before & CATALOGUE and during == CATALOGUE and after == before
    assert found is not None and [s["name"] for s in found["skills"]] == ["zz-new"] and found["total"] == 6
    assert envelope(gone)["type"] == "unknown_tool"


async def test_meta_tools_are_listed_and_called_but_no_skill_takes_their_names_and_the_catalogue_holds_skills(
    tmp_path: Path,
) -> None:
    write_skill(tmp_path / "skills", "create_skill", description="A skill that would shadow the meta tool.")
    write_skill(tmp_path / "skills", "planner-notes", description="Notes on how to create a skill and plan a run.")
    server = create_server(skill_dirs=[tmp_path / "skills"], builtin=False, catalogue="on")
    async with Client(server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        found = (await client.call_tool("find_skills", {"query": "create skill plan run"})).structured_content
        read = await client.call_tool("read_skill", {"name": "create_skill"})
        called = await client.call_tool("create_skill", {})
    assert names == CATALOGUE | META  # the server's own tools stay listed in catalogue mode
    assert found is not None and [s["name"] for s in found["skills"]] == ["planner-notes"] and found["total"] == 1
    assert envelope(read)["type"] == "unknown_tool"  # the folder was refused; the meta tool is not a skill
    assert envelope(called)["type"] == "invalid_arguments"  # the meta tool answered: it needs a request
    refused = [p for p in server.catalog.problems() if "name of a meta tool" in str(p.error)]
    assert [p.path.name for p in refused] == ["create_skill"]


async def test_every_long_list_pages_with_cursors(corpus: Path) -> None:
    server = create_server(skill_dirs=[corpus], builtin=False, pipelines=False, catalogue="off", page_size=300)
    async with Client(server) as client:
        first = await client.list_tools()
        tools = await _all_pages(lambda c: _page(client.list_tools, "tools", c))
        resources = await _all_pages(lambda c: _page(client.list_resources, "resources", c))
        prompts = await _all_pages(lambda c: _page(client.list_prompts, "prompts", c))
        again = await client.list_tools(cursor=first.next_cursor)  # a page asked twice comes from the cache
        again2 = await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
    assert len(first.tools) == 300 and first.next_cursor
    assert len({t.name for t in tools}) == len(tools) == 1_201
    assert len(resources) == 1_201 and len(prompts) == 1_200
    assert [t.name for t in again.tools] == [t.name for t in again2.tools] == [t.name for t in tools[300:600]]


async def _page(method, field: str, cursor: str | None) -> tuple[list, str | None]:
    result = await method(cursor=cursor, cache_mode="bypass")
    return getattr(result, field), result.next_cursor


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_a_forged_or_foreign_cursor_is_invalid_params(corpus: Path, era: str) -> None:
    server = create_server(skill_dirs=[corpus], builtin=False, pipelines=False, catalogue="off", page_size=100)
    async with Client(server, mode=era) as client:
        cursor = (await client.list_tools()).next_cursor
        offset, _, mac = cursor.partition(".")
        for bad in (f"{int(offset) + 100}.{mac}", "0." + "A" * 16, "x" * 5000):
            with pytest.raises(MCPError) as forged:
                await client.list_tools(cursor=bad, cache_mode="bypass")
            assert forged.value.error.code == -32602 and "list again" in forged.value.error.message
        with pytest.raises(MCPError) as foreign:
            await client.list_prompts(cursor=cursor, cache_mode="bypass")
        assert foreign.value.error.code == -32602
        assert len((await client.list_tools(cursor=cursor, cache_mode="bypass")).tools) == 100


async def test_a_change_of_the_catalogue_shows_on_the_next_listing_of_a_page(tmp_path: Path) -> None:
    root = many_skills(tmp_path / "root", 30, nested=False)
    server = create_server(skill_dirs=[root], builtin=False, pipelines=False, catalogue="off", page_size=20)
    async with Client(server) as client:
        first = await client.list_tools()
        before = await client.list_tools(cursor=first.next_cursor)
        write_skill(root, "zz-new")
        await server.reload()
        after = await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
    assert len(before.tools) == 10 and [t.name for t in after.tools][-1] == "zz-new"


def test_catalogue_tool_definitions_are_a_small_fraction_of_one_tool_per_skill(corpus: Path) -> None:
    import anyio

    async def size(mode: str) -> int:
        server = create_server(skill_dirs=[corpus], builtin=False, pipelines=False, catalogue=mode, page_size=5_000)
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
        return len(json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]))

    catalogue, per_skill = anyio.run(size, "on"), anyio.run(size, "off")
    assert catalogue * 50 < per_skill
