"""The MCP Skills extension (SEP-2640): skills/list, skills/get, resources/directory/read.

Tested with the Python SDK's client (in memory, its wire dicts read as they come) and with
FastMCP 4's client (an independent implementation) against `orchestrator serve` over stdio.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import Request
from pydantic import TypeAdapter

from mcp_server import create_server
from tests._wild import build_repo
from tests.helpers import ORCHESTRATOR, write_skill

EXT = "io.modelcontextprotocol/skills"
_WIRE = TypeAdapter(dict[str, Any])


async def _call(client: Client, method: str, **params: Any) -> dict[str, Any]:
    return await client.session.send_request(Request[dict[str, Any], str](method=method, params=params), _WIRE)


async def _every_entry(client: Client) -> list[dict[str, Any]]:
    entries, cursor = [], None
    while True:
        page = await _call(client, "skills/list", **({"cursor": cursor} if cursor else {}))
        entries += page["skills"]
        cursor = page.get("nextCursor")
        if not cursor:
            return entries


async def _bytes(client: Client, uri: str) -> bytes:
    content = (await client.read_resource(uri)).contents[0]
    return content.text.encode() if hasattr(content, "text") else base64.b64decode(content.blob)


@pytest.fixture
def repo(tmp_path: Path, home: Path) -> Path:
    repo = build_repo(tmp_path)
    # A skill in the home, where create_skill publishes what it makes.
    write_skill(home / "skills", "made-here", front={"license": "MIT", "x-custom": {"keep": [1, 2]}})
    return repo


async def test_the_extension_is_declared_and_lists_every_folder_skill_with_digests(repo: Path) -> None:
    server = create_server(skill_dirs=[repo], builtin=False, pipelines=False, page_size=3)
    async with Client(server) as client:
        assert client.server_capabilities.extensions[EXT] == {"directoryRead": True}
        entries = await _every_entry(client)
        by_name = {e["frontmatter"]["name"]: e for e in entries}
        # every manifest entry is the bytes resources/read returns
        for entry in (by_name["pdf"], by_name["report-writer"], by_name["board"]):
            for file in entry["resources"]:
                data = await _bytes(client, file["uri"])
                assert file["digest"] == "sha256:" + hashlib.sha256(data).hexdigest() and file["size"] == len(data)
    # a folder, an archive, a home skill (where created skills live), a linked SKILL.md
    assert {"pdf", "report-writer", "made-here", "board", "dot-skill", "deep-skill"} <= set(by_name)
    assert by_name["made-here"]["frontmatter"] == {
        "name": "made-here",
        "description": "The made-here skill, for tests.",
        "license": "MIT",
        "x-custom": {"keep": [1, 2]},
    }
    pdf = [f["uri"] for f in by_name["pdf"]["resources"]]
    assert pdf[0] == by_name["pdf"]["uri"] == "skill://pdf/SKILL.md"
    assert "skill://pdf/assets/font.ttf" in pdf and not any(".env" in u for u in pdf)
    # skills served leniently cannot have a verbatim entry matching their URI
    assert not {"ahrefs-automation", "claude-api", "meta-skill"} & set(by_name)


async def test_skills_get_answers_for_a_skill_and_says_why_it_cannot_for_others(repo: Path) -> None:
    server = create_server(skill_dirs=[repo], builtin=False, pipelines=False)
    async with Client(server) as client:
        got = await _call(client, "skills/get", uri="skill://report-writer/SKILL.md")
        errors = {}
        for uri in ("skill://nope/SKILL.md", "skill://ahrefs-automation/SKILL.md", "skill://pdf/references/forms.md"):
            with pytest.raises(MCPError) as exc:
                await _call(client, "skills/get", uri=uri)
            errors[uri] = exc.value.error
    assert got["skill"]["uri"] == "skill://report-writer/SKILL.md" and got["resultType"] == "complete"
    assert {f["uri"] for f in got["skill"]["resources"]} == {
        "skill://report-writer/SKILL.md",
        "skill://report-writer/templates/t.md",
    }
    assert all(e.code == -32602 for e in errors.values())
    assert "Ahrefs Automation" in errors["skill://ahrefs-automation/SKILL.md"].message


async def test_directory_read_lists_direct_children_and_refuses_what_is_not_a_directory(repo: Path) -> None:
    server = create_server(skill_dirs=[repo], builtin=False, pipelines=False)
    async with Client(server) as client:
        root = await _call(client, "resources/directory/read", uri="skill://pdf")
        assets = await _call(client, "resources/directory/read", uri="skill://pdf/assets")
        refused = []
        for uri in ("skill://pdf/SKILL.md", "skill://pdf/../document-skills", "skill://pdf/.git", "skill://nope"):
            with pytest.raises(MCPError) as exc:
                await _call(client, "resources/directory/read", uri=uri)
            refused.append(exc.value.error.code)
    kinds = {r["name"]: r["mimeType"] for r in root["resources"]}
    assert kinds == {
        "SKILL.md": "text/markdown",
        "assets": "inode/directory",
        "references": "inode/directory",
        "scripts": "inode/directory",
    }
    assert [r["uri"] for r in assets["resources"]] == ["skill://pdf/assets/font.ttf"]  # .env.example is hidden
    assert refused == [-32602] * 4
    # cacheable like every listing of the 2026-07-28 era (the Inspector refuses the result without)
    assert root["ttlMs"] > 0 and root["cacheScope"] in ("private", "public")


async def test_handshake_era_clients_keep_tools_prompts_and_resources(repo: Path) -> None:
    server = create_server(skill_dirs=[repo], builtin=False, pipelines=False)
    async with Client(server, mode="legacy") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        resources = {str(r.uri): r.name for r in (await client.list_resources()).resources}
    assert "pdf" in tools and "pdf" in prompts
    assert resources["skill://pdf/SKILL.md"] == "pdf"  # named as its frontmatter (SEP-2640)


async def test_fastmcp_client_lists_and_gets_skills_over_stdio(repo: Path, home: Path) -> None:
    from fastmcp import Client as FastMCPClient
    from fastmcp.client.transports import StdioTransport
    from fastmcp.skills.client import SkillsClientExtension

    env = {"ORCHESTRATOR_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HOME": str(home)}
    args = ["serve", "--skills", str(repo), "--page-size", "2", "--catalogue", "on"]
    transport = StdioTransport(str(ORCHESTRATOR), args, env=env, cwd=str(repo), keep_alive=False)
    async with FastMCPClient(transport, extensions=[SkillsClientExtension()]) as client:
        skills = await client.list_skills()
        listed = {s.frontmatter.name: s for s in skills}
        got = await client.get_skill("skill://pdf/SKILL.md")
        font = await client.read_resource("skill://pdf/assets/font.ttf")
        tools = {t.name for t in await client.list_tools()}
    assert {"pdf", "report-writer", "made-here", "board", "writing-skills"} <= set(listed)
    assert got.uri == "skill://pdf/SKILL.md" and got.frontmatter.description == "Anthropic's pdf skill."
    digest = next(r.digest for r in got.resources if r.uri.endswith("font.ttf"))
    assert digest == "sha256:" + hashlib.sha256(base64.b64decode(font[0].blob)).hexdigest()
    assert {"find_skills", "read_skill", "call_skill"} <= tools  # the skills stay reachable in catalogue mode
